"""Shared parts of the selection environments (the action is a node or an edge of the step's graph).

The environments live one per module: :mod:`offline_graph.env.next_hop` (:class:`NextHopEnv`)
and :mod:`offline_graph.env.grow_tree` (:class:`GrowTreeEnv`). This module holds what both use:

* :class:`SelectionEnv`, the base class (config handling, action parsing, ``reset``,
  ``info``, ``make_policy``);
* the graph helpers: :func:`geometric_graph` (the random graphs), :func:`distances`,
  :func:`components`, :func:`adjacency_from_pairs` (graphs given in ``reset(options=...)``),
  :func:`shortest_distances_to` (Dijkstra);
* :func:`make_selection_policy`, the ``"expert"`` / ``"random"`` / ``"mixed"`` behaviour
  policies built from an env's expert and its allowed choices.

Both envs draw one graph per episode (its size long-tailed) and keep it for the whole episode;
only the node flags change. ``info["action_mask"]`` (bool ``[N]`` / ``[E]``) says which choices
are allowed. An illegal action (out of range or masked out) ends the episode with a reward
lower than that of any legal way to finish it, and ``info["illegal_action"] = True``.

Graphs: nodes uniform in the unit square, symmetric k-nearest-neighbour edges plus the
shortest edges that join the components; every undirected edge is stored as two directed
edges, sorted by (source, target). Policies (``policy(obs_dict, info) -> int``) read only the
observation dict (``graph_to_dict(obs, 1)``), so they work on recorded data too.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import GraphInstance

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict
from offline_graph.data.graphs.spaces import selection_level
from offline_graph.env.graph_env import resolve_config
from offline_graph.env.policies import MIXED_HINT, RANDOM_ACTION_HINT, check_epsilon, check_name

Policy = Callable[[GraphDict, dict[str, Any]], int]
SELECTION_POLICY_NAMES = ("expert", "random", "mixed")

# Heavy tail of the node count, as in GraphEnv: Pareto(scale=2.5 * lambda, shape=2.2).
_TAIL_SCALE = 2.5
_TAIL_ALPHA = 2.2


# ----------------------------------------------------------------- configuration
def check_common_config(cfg: Any) -> None:
    """Validation shared by both configs (node count distribution, neighbours, penalty)."""
    name = type(cfg).__name__

    def bad(field: str, expected: str, hint: str) -> ConfigError:
        return ConfigError(f"{name}: {field} must be {expected} (found {getattr(cfg, field)!r}). {hint}")

    if int(cfg.min_nodes) < 2:
        raise bad("min_nodes", ">= 2", "Every episode needs at least one step.")
    if int(cfg.max_nodes) < int(cfg.min_nodes):
        raise bad("max_nodes", f">= min_nodes={cfg.min_nodes}", "Node counts are clipped to it.")
    if not float(cfg.poisson_lambda) >= 0:
        raise bad("poisson_lambda", ">= 0", "It is the mean node count above min_nodes.")
    if not 0.0 <= float(cfg.tail_prob) <= 1.0:
        raise bad("tail_prob", "in [0, 1]", "It is a probability.")
    if int(cfg.k_neighbors) < 1:
        raise bad("k_neighbors", ">= 1", "Each node is joined to its k nearest neighbours.")
    if not float(cfg.illegal_penalty) >= 0:
        raise bad("illegal_penalty", ">= 0", "It is subtracted from the illegal-action reward.")


# ----------------------------------------------------------------- graphs
def draw_num_nodes(rng: np.random.Generator, cfg: Any) -> int:
    """One episode's node count: ``min_nodes + Poisson(poisson_lambda)``, or with probability
    ``tail_prob`` a Pareto tail draw; clipped to ``[min_nodes, max_nodes]``."""
    if rng.random() < cfg.tail_prob:
        n = round(max(_TAIL_SCALE * cfg.poisson_lambda, 1.0) * (1.0 + rng.pareto(_TAIL_ALPHA)))
    else:
        n = int(cfg.min_nodes) + int(rng.poisson(cfg.poisson_lambda))
    return int(min(max(n, int(cfg.min_nodes)), int(cfg.max_nodes)))


def distances(pos: np.ndarray) -> np.ndarray:
    """Float64 ``[n, n]`` Euclidean distances between the rows of ``pos [n, 2]``."""
    p = np.asarray(pos, dtype=np.float64)
    return np.sqrt(((p[:, None, :] - p[None, :, :]) ** 2).sum(-1))


def components(adj: np.ndarray) -> np.ndarray:
    """Component label of every node: the lowest node index of its component."""
    n = adj.shape[0]
    lab = np.arange(n)
    while True:
        new = np.minimum(lab, np.where(adj, lab[None, :], n).min(axis=1))
        if np.array_equal(new, lab):
            return lab
        lab = new


def geometric_graph(rng: np.random.Generator, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A connected random geometric graph: ``(pos float32 [n,2], adj bool [n,n], dist [n,n])``.

    Symmetric k-nearest-neighbour edges, then, while the graph is disconnected, the shortest
    edge from node 0's component to any other node.
    """
    pos = rng.random((n, 2), dtype=np.float32)
    dist = distances(pos)
    adj = np.zeros((n, n), dtype=bool)
    kk = min(int(k), n - 1)
    if kk > 0:
        d = dist.copy()
        np.fill_diagonal(d, np.inf)
        nbr = np.argpartition(d, kk - 1, axis=1)[:, :kk]
        adj[np.arange(n)[:, None], nbr] = True
        adj |= adj.T
    lab = components(adj)
    while np.any(lab != 0):
        inside, outside = np.flatnonzero(lab == 0), np.flatnonzero(lab != 0)
        i, j = np.unravel_index(np.argmin(dist[np.ix_(inside, outside)]), (inside.size, outside.size))
        u, v = inside[i], outside[j]
        adj[u, v] = adj[v, u] = True
        lab[lab == lab[v]] = 0
    return pos, adj, dist


def adjacency_from_pairs(where: str, n: int, pairs: Any) -> np.ndarray:
    """Symmetric bool adjacency from undirected pairs given in ``reset(options=...)``."""
    p = np.asarray(pairs, dtype=np.int64).reshape(-1, 2) if len(pairs) else np.zeros((0, 2), np.int64)
    if np.any((p < 0) | (p >= n)) or np.any(p[:, 0] == p[:, 1]):
        raise ConfigError(
            f"{where}: options['edges'] must be pairs (u, v) of distinct nodes in [0, {n}) "
            f"(found {p.tolist()}). Each pair is stored in both directions."
        )
    adj = np.zeros((n, n), dtype=bool)
    adj[p[:, 0], p[:, 1]] = True
    adj |= adj.T
    if np.any(components(adj) != 0):
        raise ConfigError(
            f"{where}: options['edges'] must connect all {n} nodes (found "
            f"{np.unique(components(adj)).size} components). Add edges between them."
        )
    return adj


def option_node(where: str, options: Mapping[str, Any], key: str, n: int) -> int:
    """``options[key]`` checked to be a node index in ``[0, n)``."""
    value = options.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < n:
        raise ConfigError(f"{where}: options[{key!r}] must be a node index in [0, {n}) (found {value!r}).")
    return int(value)


# ----------------------------------------------------------------- experts and policies
def shortest_distances_to(target: int, edge_index: np.ndarray, weight: np.ndarray, n: int) -> np.ndarray:
    """Dijkstra: float64 ``[n]`` length of the shortest directed path from each node to
    ``target`` (``inf`` if none). ``weight [E] >= 0`` goes with the columns of ``edge_index``."""
    src = np.asarray(edge_index[0], dtype=np.int64)
    dst = np.asarray(edge_index[1], dtype=np.int64)
    order = np.argsort(dst, kind="stable")  # incoming edges of each node, grouped
    ptr = np.searchsorted(dst[order], np.arange(n + 1)).tolist()
    src_l, w_l = src[order].tolist(), np.asarray(weight, dtype=np.float64)[order].tolist()
    dist = [math.inf] * n
    dist[target] = 0.0
    heap = [(0.0, target)]
    done = [False] * n
    while heap:
        d, v = heapq.heappop(heap)
        if done[v]:
            continue
        done[v] = True
        for i in range(ptr[v], ptr[v + 1]):
            u, nd = src_l[i], d + w_l[i]
            if nd < dist[u]:
                dist[u] = nd
                heapq.heappush(heap, (nd, u))
    return np.asarray(dist)


def flagged_node(x: np.ndarray, col: int, name: str, where: str) -> int:
    """The one node whose flag column ``x[:, col]`` is set."""
    hits = np.flatnonzero(x[:, col] > 0.5)
    if hits.size != 1:
        raise ConfigError(
            f"{where}: x[:, {col}] ({name}) must mark exactly one node (found {hits.size}). "
            "Pass an observation of the matching environment."
        )
    return int(hits[0])


def make_selection_policy(
    name: str,
    epsilon: float,
    rng: np.random.Generator,
    expert: Policy,
    choices: Callable[[GraphDict], np.ndarray],
    where: str = "make_policy",
) -> Policy:
    """``"expert"``, ``"random"`` (uniform over allowed choices) or ``"mixed"`` (expert with
    probability ``1 - epsilon``, else random) for a selection env."""
    check_name(where, name, SELECTION_POLICY_NAMES, MIXED_HINT)
    eps = check_epsilon(where, epsilon, RANDOM_ACTION_HINT)

    def random_choice(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        allowed = np.flatnonzero(choices(obs))
        if allowed.size == 0:
            raise ConfigError(
                f"{where}: the observation must allow a choice (found none). "
                "Do not act on a terminal observation."
            )
        return int(allowed[rng.integers(allowed.size)])

    def mixed(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        return random_choice(obs, info) if rng.random() < eps else expert(obs, {} if info is None else info)

    return {"expert": expert, "random": random_choice, "mixed": mixed}[name]


# ----------------------------------------------------------------- environments
class SelectionEnv(gym.Env):
    """Base of the selection envs: config handling, action parsing, ``reset``, ``info`` and
    ``make_policy``. A subclass sets ``config_cls``, ``_expert``, ``_choices`` and implements
    ``_random_episode``, ``_from_options``, ``_mask``, ``_obs`` and ``step``."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (as gymnasium.Env)
    config_cls: type
    """The config dataclass (set by the subclass)."""
    edge_dim = 1
    """D, the edge feature size, for ``graph_to_dict(obs, env.edge_dim)``."""
    _expert: Callable[..., int]
    _choices: Callable[[GraphDict], np.ndarray]
    _links: np.ndarray

    def __init__(self, config: Any = None, render_mode: str | None = None, **overrides: Any) -> None:
        name = type(self).__name__
        self.config: Any = resolve_config(name, self.config_cls, config, overrides)
        if render_mode is not None:
            raise ConfigError(
                f"{name}: render_mode must be None (found {render_mode!r}). This environment does not render."
            )
        self.render_mode = render_mode
        self._n = 0
        self._t = 0
        self._active = False

    def _random_episode(self, rng: np.random.Generator) -> None:
        """Draw and load a new episode's graph (subclass)."""
        raise NotImplementedError

    def _from_options(self, options: Mapping[str, Any]) -> None:
        """Load a given graph from ``reset(options=...)`` (subclass)."""
        raise NotImplementedError

    def _mask(self) -> np.ndarray:
        """The current action mask (subclass)."""
        raise NotImplementedError

    def _obs(self) -> GraphInstance:
        """The current observation (subclass)."""
        raise NotImplementedError

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[GraphInstance, dict[str, Any]]:
        super().reset(seed=seed)
        if options:
            self._from_options(options)
        else:
            self._random_episode(self.np_random)
        self._t, self._active = 0, True
        return self._obs(), self._info(self._mask(), False)

    def make_policy(self, name: str, epsilon: float, rng: np.random.Generator) -> Policy:
        """Behaviour policy by name: ``"expert"``, ``"random"`` or ``"mixed"``."""
        return make_selection_policy(
            name,
            epsilon,
            rng,
            type(self)._expert,
            type(self)._choices,
            f"{type(self).__name__}.make_policy",
        )

    def _action(self, action: Any) -> int:
        try:
            return int(action)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{type(self).__name__}.step: action must be an integer index "
                f"(found {action!r}). It is a {selection_level(self.action_space)} of this step's graph."
            ) from None

    def _require_reset(self) -> None:
        if not self._active:
            raise RuntimeError(f"{type(self).__name__}: reset() must be called before step().")

    def _info(self, mask: np.ndarray, illegal: bool, success: bool = False) -> dict[str, Any]:
        return {
            "action_mask": mask,
            "illegal_action": illegal,
            # gymnasium convention: True once the task is solved (target reached / tree done)
            "is_success": success,
            "num_nodes": self._n,
            "num_edges": int(self._links.shape[0]),
        }

    def render(self) -> None:
        return None
