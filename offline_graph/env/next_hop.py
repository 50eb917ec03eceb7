"""NextHop (``"offline_graph/NextHop-v0"``, :class:`~offline_graph.data.graphs.spaces.NodeAction`).

Route from a start node to a target node on a connected random geometric graph; the expert
(:func:`next_hop_expert`) takes the next hop of a shortest path (Dijkstra on edge lengths).
What all selection envs share (graphs, masks, illegal actions, policies) is described in
:mod:`offline_graph.env.selection`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import GraphInstance

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.env.selection import (
    SelectionEnv,
    adjacency_from_pairs,
    check_common_config,
    distances,
    draw_num_nodes,
    flagged_node,
    geometric_graph,
    option_node,
    shortest_distances_to,
)

NEXT_HOP_FEATURES = (
    "is_current",
    "is_target",
    "visited",
    "pos_x",
    "pos_y",
    "to_target_x",
    "to_target_y",
    "target_distance",
)
"""Node feature columns of :class:`NextHopEnv` (``to_target = pos[target] - pos[node]``,
``target_distance`` its Euclidean norm). The edge feature is the edge's Euclidean length."""

_SQRT2 = float(np.float32(math.sqrt(2.0)))


@dataclasses.dataclass(frozen=True)
class NextHopConfig:
    """Settings of :class:`NextHopEnv`."""

    max_nodes: int = 64
    """Node counts are clipped to ``[min_nodes, max_nodes]``; the action space is
    ``NodeAction(max_nodes)``."""
    min_nodes: int = 6
    """Node count is ``min_nodes + Poisson(poisson_lambda)`` in the bulk of the distribution."""
    poisson_lambda: float = 14.0
    """Mean node count above ``min_nodes`` (outside the tail)."""
    tail_prob: float = 0.05
    """Probability that the node count comes from a heavy Pareto tail (scale
    ``2.5 * poisson_lambda``, shape 2.2) instead."""
    k_neighbors: int = 3
    """Each node is joined to its k nearest neighbours (both directions)."""
    max_steps_per_node: float = 2.0
    """The episode is truncated after ``ceil(max_steps_per_node * N)`` steps."""
    goal_reward: float = 1.0
    """Bonus on the step that reaches the target (on top of ``-length``)."""
    illegal_penalty: float = 1.0
    """An illegal action's reward is ``-(illegal_penalty + remaining_steps * longest_edge)``:
    below the return of any legal way to finish the episode."""

    def __post_init__(self) -> None:
        check_common_config(self)
        if not float(self.max_steps_per_node) > 0:
            raise ConfigError(
                f"NextHopConfig: max_steps_per_node must be > 0 (found {self.max_steps_per_node!r})."
                " The horizon is ceil(max_steps_per_node * N) steps."
            )


def next_hop_choices(obs: GraphDict) -> np.ndarray:
    """Bool ``[N]``: the out-neighbours of the current node (the NextHop action mask)."""
    x, ei = np.asarray(obs["x"]), np.asarray(obs["edge_index"]).reshape(2, -1)
    cur = flagged_node(x, 0, "is_current", "next_hop_choices")
    mask = np.zeros(x.shape[0], dtype=bool)
    mask[ei[1][ei[0] == cur]] = True
    return mask


def next_hop_expert(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
    """The next node on a shortest path (by ``edge_attr[:, 0]``) from the current node to
    the target; among equally short ways, the lowest node index. Reads only ``obs``."""
    x, ei = np.asarray(obs["x"]), np.asarray(obs["edge_index"]).reshape(2, -1)
    w = np.asarray(obs["edge_attr"], dtype=np.float64).reshape(ei.shape[1], -1)[:, 0]
    cur = flagged_node(x, 0, "is_current", "next_hop_expert")
    target = flagged_node(x, 1, "is_target", "next_hop_expert")
    out = np.flatnonzero(ei[0] == cur)
    if out.size == 0:
        raise ConfigError(
            f"next_hop_expert: the current node must have an out-edge (found none at node {cur}). "
            "No hop is possible."
        )
    dist = shortest_distances_to(target, ei, w, x.shape[0])
    cand = ei[1][out]
    cost = w[out] + dist[cand]
    return int(cand[np.lexsort((cand, cost))[0]])


class NextHopEnv(SelectionEnv):
    """Route from the start node to the target; the action is the next node (a neighbour).

    Observation ``GraphInstance(nodes [N,8], edges [E,1] length, edge_links [E,2])``, node
    columns :data:`NEXT_HOP_FEATURES`. Reward ``-length`` per hop, ``+goal_reward`` on
    reaching the target (terminates); truncated after ``ceil(max_steps_per_node * N)`` steps.
    ``reset(options={"positions": [[x, y], ...], "edges": [(u, v), ...], "start": s,
    "target": t})`` uses that graph instead of drawing one (edges undirected, in [0,1]^2).
    """

    config_cls = NextHopConfig
    _expert = staticmethod(next_hop_expert)
    _choices = staticmethod(next_hop_choices)

    def __init__(
        self,
        config: NextHopConfig | Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, render_mode, **overrides)
        low = np.array([0, 0, 0, 0, 0, -1, -1, 0], dtype=np.float32)
        high = np.array([1, 1, 1, 1, 1, 1, 1, _SQRT2], dtype=np.float32)
        self.observation_space = gym.spaces.Graph(
            node_space=gym.spaces.Box(low, high, dtype=np.float32),
            edge_space=gym.spaces.Box(0.0, _SQRT2, (1,), np.float32),
        )
        self.action_space = NodeAction(int(self.config.max_nodes))

    def _load(self, pos: np.ndarray, adj: np.ndarray, start: int, target: int) -> None:
        n = pos.shape[0]
        src, dst = np.nonzero(adj)
        length = distances(pos)[src, dst].astype(np.float32)
        self._n, self._adj, self._cur, self._target = n, adj, start, target
        self._len = np.zeros((n, n), dtype=np.float32)
        self._len[src, dst] = length
        self._links = np.stack([src, dst], axis=1).astype(np.int64)
        self._edges = length.reshape(-1, 1)
        self._max_len = float(length.max()) if length.size else 0.0
        self._horizon = math.ceil(float(self.config.max_steps_per_node) * n)
        base = np.zeros((n, len(NEXT_HOP_FEATURES)), dtype=np.float32)
        base[:, 3:5] = pos
        base[:, 5:7] = pos[target] - pos
        base[:, 7] = np.sqrt((base[:, 5:7].astype(np.float64) ** 2).sum(1))
        base[target, 1] = 1.0
        self._base = base
        self._visited = np.zeros(n, dtype=bool)
        self._visited[start] = True

    def _from_options(self, options: Mapping[str, Any]) -> None:
        where = "NextHopEnv.reset"
        pos = np.asarray(options.get("positions", []), dtype=np.float32)
        if (
            pos.ndim != 2
            or pos.shape[1] != 2
            or not 2 <= pos.shape[0] <= self.config.max_nodes
            or np.any((pos < 0) | (pos > 1))
        ):
            raise ConfigError(
                f"{where}: options['positions'] must be [N, 2] in [0, 1] with 2 <= N <= "
                f"{self.config.max_nodes} (found shape {list(pos.shape)}). One row per node."
            )
        n = pos.shape[0]
        adj = adjacency_from_pairs(where, n, options.get("edges", []))
        start, target = (option_node(where, options, k, n) for k in ("start", "target"))
        if start == target:
            raise ConfigError(f"{where}: options['target'] must differ from start (found {target}).")
        self._load(pos, adj, start, target)

    def _obs(self) -> GraphInstance:
        x = self._base.copy()
        x[self._cur, 0] = 1.0
        x[self._visited, 2] = 1.0
        return GraphInstance(nodes=x, edges=self._edges, edge_links=self._links)

    def _random_episode(self, rng: np.random.Generator) -> None:
        n = draw_num_nodes(rng, self.config)
        pos, adj, _ = geometric_graph(rng, n, int(self.config.k_neighbors))
        start, off = rng.integers(n), rng.integers(1, n)
        self._load(pos, adj, int(start), int((start + off) % n))

    def _mask(self) -> np.ndarray:
        return self._adj[self._cur].copy()

    def step(self, action: Any) -> tuple[GraphInstance, float, bool, bool, dict[str, Any]]:
        self._require_reset()
        a = self._action(action)
        remaining = self._horizon - self._t
        self._t += 1
        if not (0 <= a < self._n and self._adj[self._cur, a]):
            self._active = False
            reward = -(float(self.config.illegal_penalty) + remaining * self._max_len)
            return self._obs(), reward, True, False, self._info(self._mask(), True)
        reward = -float(self._len[self._cur, a])
        self._cur = a
        self._visited[a] = True
        terminated = a == self._target
        if terminated:
            reward += float(self.config.goal_reward)
        truncated = not terminated and self._t >= self._horizon
        self._active = not (terminated or truncated)
        return (self._obs(), reward, terminated, truncated, self._info(self._mask(), False, bool(terminated)))
