"""GrowTree (``"offline_graph/GrowTree-v0"``, :class:`~offline_graph.data.graphs.spaces.EdgeAction`).

Grow a spanning tree from a root one edge at a time; the expert (:func:`grow_tree_expert`) is
Prim's choice, the lightest edge leaving the tree. What all selection envs share (graphs,
masks, illegal actions, policies) is described in :mod:`offline_graph.env.selection`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import GraphInstance

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict
from offline_graph.data.graphs.spaces import EdgeAction
from offline_graph.env.selection import (
    SelectionEnv,
    adjacency_from_pairs,
    check_common_config,
    draw_num_nodes,
    geometric_graph,
    option_node,
)

GROW_TREE_FEATURES = ("in_tree", "is_root")
"""Node feature columns of :class:`GrowTreeEnv`. The edge feature is the edge's weight."""

# Edge weights are uniform in [_W_LOW, 1): no zero-weight edges.
_W_LOW = 0.05


@dataclasses.dataclass(frozen=True)
class GrowTreeConfig:
    """Settings of :class:`GrowTreeEnv`. Edge weights are uniform in [0.05, 1)."""

    max_nodes: int = 64
    """Node counts are clipped to ``[min_nodes, max_nodes]``."""
    min_nodes: int = 5
    """Node count is ``min_nodes + Poisson(poisson_lambda)`` in the bulk of the distribution."""
    poisson_lambda: float = 12.0
    """Mean node count above ``min_nodes`` (outside the tail)."""
    tail_prob: float = 0.05
    """Probability that the node count comes from a heavy Pareto tail (scale
    ``2.5 * poisson_lambda``, shape 2.2) instead."""
    k_neighbors: int = 3
    """Each node is joined to its k nearest neighbours (positions are not observed)."""
    illegal_penalty: float = 1.0
    """An illegal action's reward is ``-(illegal_penalty + remaining_edges * heaviest_edge)``:
    below the return of any legal way to finish the tree."""

    def __post_init__(self) -> None:
        check_common_config(self)

    @property
    def max_edges(self) -> int:
        """Bound on directed edges: < ``k*N`` kNN pairs + ``N-1`` joins, two directions each."""
        return 2 * (int(self.k_neighbors) + 1) * int(self.max_nodes)


def grow_tree_choices(obs: GraphDict) -> np.ndarray:
    """Bool ``[E]``: edges from a tree node to a node outside the tree (the GrowTree mask)."""
    in_tree = np.asarray(obs["x"])[:, 0] > 0.5
    ei = np.asarray(obs["edge_index"]).reshape(2, -1)
    return in_tree[ei[0]] & ~in_tree[ei[1]]


def grow_tree_expert(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
    """Prim's choice: the lightest edge (``edge_attr[:, 0]``) leaving the tree; ties go to
    the lowest edge index. Reads only ``obs``."""
    allowed = np.flatnonzero(grow_tree_choices(obs))
    if allowed.size == 0:
        raise ConfigError(
            "grow_tree_expert: the tree must have an edge leaving it (found none). "
            "The episode is over once every node is in the tree."
        )
    w = np.asarray(obs["edge_attr"]).reshape(np.shape(obs["edge_index"])[1], -1)[:, 0]
    return int(allowed[np.argmin(w[allowed])])


class GrowTreeEnv(SelectionEnv):
    """Grow a spanning tree from the root; the action is an edge from the tree to a new node.

    Observation ``GraphInstance(nodes [N,2], edges [E,1] weight, edge_links [E,2])``, node
    columns :data:`GROW_TREE_FEATURES`. Reward ``-weight`` per edge; terminates when every
    node is in the tree (``N - 1`` steps). ``reset(options={"num_nodes": N, "edges": [(u, v),
    ...], "weights": [w, ...], "root": r})`` uses that graph (edges undirected).
    """

    config_cls = GrowTreeConfig
    _expert = staticmethod(grow_tree_expert)
    _choices = staticmethod(grow_tree_choices)

    def __init__(
        self,
        config: GrowTreeConfig | Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, render_mode, **overrides)
        self.observation_space = gym.spaces.Graph(
            node_space=gym.spaces.Box(0.0, 1.0, (len(GROW_TREE_FEATURES),), np.float32),
            edge_space=gym.spaces.Box(0.0, np.inf, (1,), np.float32),
        )
        self.action_space = EdgeAction(self.config.max_edges)

    def _load(self, wmat: np.ndarray, adj: np.ndarray, root: int) -> None:
        n = adj.shape[0]
        src, dst = np.nonzero(adj)
        weight = wmat[src, dst].astype(np.float32)
        self._n, self._adj, self._root, self._added = n, adj, root, 0
        self._src, self._dst = src, dst
        self._links = np.stack([src, dst], axis=1).astype(np.int64)
        self._edges = weight.reshape(-1, 1)
        self._weight = weight
        self._max_w = float(weight.max()) if weight.size else 0.0
        self._in_tree = np.zeros(n, dtype=bool)
        self._in_tree[root] = True

    def _from_options(self, options: Mapping[str, Any]) -> None:
        where = "GrowTreeEnv.reset"
        n = options.get("num_nodes")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 2 <= n <= self.config.max_nodes:
            raise ConfigError(
                f"{where}: options['num_nodes'] must be an int in [2, {self.config.max_nodes}] (found {n!r})."
            )
        pairs = options.get("edges", [])
        adj = adjacency_from_pairs(where, int(n), pairs)
        w = np.asarray(options.get("weights", []), dtype=np.float64)
        if w.shape != (len(pairs),) or not np.all(np.isfinite(w) & (w >= 0)):
            raise ConfigError(
                f"{where}: options['weights'] must be {len(pairs)} finite values >= 0 (found "
                f"shape {list(w.shape)}). One weight per undirected edge."
            )
        if int(adj.sum()) > self.config.max_edges:
            raise ConfigError(
                f"{where}: the directed edge count must be <= max_edges={self.config.max_edges} "
                f"(found {int(adj.sum())}). Raise max_nodes or k_neighbors."
            )
        p = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        wmat = np.zeros((n, n))
        wmat[p[:, 0], p[:, 1]] = w
        wmat[p[:, 1], p[:, 0]] = w
        self._load(wmat, adj, option_node(where, options, "root", int(n)))

    def _mask(self) -> np.ndarray:
        return self._in_tree[self._src] & ~self._in_tree[self._dst]

    def _obs(self) -> GraphInstance:
        x = np.zeros((self._n, len(GROW_TREE_FEATURES)), dtype=np.float32)
        x[self._in_tree, 0] = 1.0
        x[self._root, 1] = 1.0
        return GraphInstance(nodes=x, edges=self._edges, edge_links=self._links)

    def _random_episode(self, rng: np.random.Generator) -> None:
        n = draw_num_nodes(rng, self.config)
        _, adj, _ = geometric_graph(rng, n, int(self.config.k_neighbors))
        upper = np.triu(adj)
        wmat = np.zeros((n, n))
        wmat[upper] = rng.uniform(_W_LOW, 1.0, size=int(upper.sum()))
        self._load(wmat + wmat.T, adj, int(rng.integers(n)))

    def step(self, action: Any) -> tuple[GraphInstance, float, bool, bool, dict[str, Any]]:
        self._require_reset()
        a = self._action(action)
        mask = self._mask()
        self._t += 1
        if not (0 <= a < mask.shape[0] and mask[a]):
            self._active = False
            remaining = self._n - 1 - self._added
            reward = -(float(self.config.illegal_penalty) + remaining * self._max_w)
            return self._obs(), reward, True, False, self._info(mask, True)
        self._in_tree[self._dst[a]] = True
        self._added += 1
        terminated = self._added == self._n - 1
        self._active = not terminated
        return (
            self._obs(),
            -float(self._weight[a]),
            terminated,
            False,
            self._info(self._mask(), False, bool(terminated)),
        )
