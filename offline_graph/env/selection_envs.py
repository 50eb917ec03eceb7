"""Two selection environments: the action is a node or an edge of the step's graph.

* :class:`NextHopEnv` (``"offline_graph/NextHop-v0"``, :class:`~offline_graph.data.spaces.NodeAction`):
  route from a start node to a target node on a connected random geometric graph; the expert
  (:func:`next_hop_expert`) takes the next hop of a shortest path (Dijkstra on edge lengths).
* :class:`GrowTreeEnv` (``"offline_graph/GrowTree-v0"``, :class:`~offline_graph.data.spaces.EdgeAction`):
  grow a spanning tree from a root one edge at a time; the expert (:func:`grow_tree_expert`)
  is Prim's choice, the lightest edge leaving the tree.

Both draw one graph per episode (its size long-tailed) and keep it for the whole episode; only
the node flags change. ``info["action_mask"]`` (bool ``[N]`` / ``[E]``) says which choices
are allowed. An illegal action (out of range or masked out) ends the episode with a reward
lower than that of any legal way to finish it, and ``info["illegal_action"] = True``.

Graphs: nodes uniform in the unit square, symmetric k-nearest-neighbour edges plus the
shortest edges that join the components; every undirected edge is stored as two directed
edges, sorted by (source, target). Policies (``policy(obs_dict, info) -> int``) read only the
observation dict (``graph_to_dict(obs, 1)``), so they work on recorded data too.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import GraphInstance

from offline_graph.env.graph_env import resolve_config as _resolve_config
from offline_graph.data.errors import ConfigError
from offline_graph.data.graph import GraphDict
from offline_graph.data.spaces import EdgeAction, NodeAction, selection_level

Policy = Callable[[GraphDict, dict[str, Any]], int]
SELECTION_POLICY_NAMES = ("expert", "random", "mixed")

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
GROW_TREE_FEATURES = ("in_tree", "is_root")
"""Node feature columns of :class:`GrowTreeEnv`. The edge feature is the edge's weight."""

# Heavy tail of the node count, as in GraphEnv: Pareto(scale=2.5 * lambda, shape=2.2).
_TAIL_SCALE = 2.5
_TAIL_ALPHA = 2.2
# GrowTree edge weights are uniform in [_W_LOW, 1): no zero-weight edges.
_W_LOW = 0.05
_SQRT2 = float(np.float32(math.sqrt(2.0)))


# ----------------------------------------------------------------- configuration
def _check_common(cfg: Any) -> None:
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
        _check_common(self)
        if not float(self.max_steps_per_node) > 0:
            raise ConfigError(
                f"NextHopConfig: max_steps_per_node must be > 0 (found {self.max_steps_per_node!r})."
                " The horizon is ceil(max_steps_per_node * N) steps."
            )


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
        _check_common(self)

    @property
    def max_edges(self) -> int:
        """Bound on directed edges: < ``k*N`` kNN pairs + ``N-1`` joins, two directions each."""
        return 2 * (int(self.k_neighbors) + 1) * int(self.max_nodes)


# ----------------------------------------------------------------- graphs
def _num_nodes(rng: np.random.Generator, cfg: Any) -> int:
    if rng.random() < cfg.tail_prob:
        n = round(max(_TAIL_SCALE * cfg.poisson_lambda, 1.0) * (1.0 + rng.pareto(_TAIL_ALPHA)))
    else:
        n = int(cfg.min_nodes) + int(rng.poisson(cfg.poisson_lambda))
    return int(min(max(n, int(cfg.min_nodes)), int(cfg.max_nodes)))


def _distances(pos: np.ndarray) -> np.ndarray:
    p = np.asarray(pos, dtype=np.float64)
    return np.sqrt(((p[:, None, :] - p[None, :, :]) ** 2).sum(-1))


def _components(adj: np.ndarray) -> np.ndarray:
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
    dist = _distances(pos)
    adj = np.zeros((n, n), dtype=bool)
    kk = min(int(k), n - 1)
    if kk > 0:
        d = dist.copy()
        np.fill_diagonal(d, np.inf)
        nbr = np.argpartition(d, kk - 1, axis=1)[:, :kk]
        adj[np.arange(n)[:, None], nbr] = True
        adj |= adj.T
    lab = _components(adj)
    while np.any(lab != 0):
        inside, outside = np.flatnonzero(lab == 0), np.flatnonzero(lab != 0)
        i, j = np.unravel_index(np.argmin(dist[np.ix_(inside, outside)]), (inside.size, outside.size))
        u, v = inside[i], outside[j]
        adj[u, v] = adj[v, u] = True
        lab[lab == lab[v]] = 0
    return pos, adj, dist


def _adjacency(where: str, n: int, pairs: Any) -> np.ndarray:
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
    if np.any(_components(adj) != 0):
        raise ConfigError(
            f"{where}: options['edges'] must connect all {n} nodes (found "
            f"{np.unique(_components(adj)).size} components). Add edges between them."
        )
    return adj


def _option_int(where: str, options: Mapping[str, Any], key: str, n: int) -> int:
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


def _flag_node(x: np.ndarray, col: int, name: str, where: str) -> int:
    hits = np.flatnonzero(x[:, col] > 0.5)
    if hits.size != 1:
        raise ConfigError(
            f"{where}: x[:, {col}] ({name}) must mark exactly one node (found {hits.size}). "
            "Pass an observation of the matching environment."
        )
    return int(hits[0])


def next_hop_choices(obs: GraphDict) -> np.ndarray:
    """Bool ``[N]``: the out-neighbours of the current node (the NextHop action mask)."""
    x, ei = np.asarray(obs["x"]), np.asarray(obs["edge_index"]).reshape(2, -1)
    cur = _flag_node(x, 0, "is_current", "next_hop_choices")
    mask = np.zeros(x.shape[0], dtype=bool)
    mask[ei[1][ei[0] == cur]] = True
    return mask


def next_hop_expert(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
    """The next node on a shortest path (by ``edge_attr[:, 0]``) from the current node to
    the target; among equally short ways, the lowest node index. Reads only ``obs``."""
    x, ei = np.asarray(obs["x"]), np.asarray(obs["edge_index"]).reshape(2, -1)
    w = np.asarray(obs["edge_attr"], dtype=np.float64).reshape(ei.shape[1], -1)[:, 0]
    cur = _flag_node(x, 0, "is_current", "next_hop_expert")
    target = _flag_node(x, 1, "is_target", "next_hop_expert")
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
    if name not in SELECTION_POLICY_NAMES:
        raise ConfigError(
            f"{where}: name must be one of {list(SELECTION_POLICY_NAMES)} (found {name!r}). "
            "'mixed' is the expert with probability 1-epsilon, else uniformly random."
        )
    if not 0.0 <= float(epsilon) <= 1.0:
        raise ConfigError(
            f"{where}: epsilon must be in [0, 1] (found {epsilon!r}). "
            "It is the probability of a random action."
        )
    eps = float(epsilon)

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
class _SelectionEnv(gym.Env):
    """Config handling, action parsing and ``make_policy`` shared by both envs."""

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
        self.config = _resolve_config(name, self.config_cls, config, overrides)
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


class NextHopEnv(_SelectionEnv):
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
        length = _distances(pos)[src, dst].astype(np.float32)
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
        adj = _adjacency(where, n, options.get("edges", []))
        start, target = (_option_int(where, options, k, n) for k in ("start", "target"))
        if start == target:
            raise ConfigError(f"{where}: options['target'] must differ from start (found {target}).")
        self._load(pos, adj, start, target)

    def _obs(self) -> GraphInstance:
        x = self._base.copy()
        x[self._cur, 0] = 1.0
        x[self._visited, 2] = 1.0
        return GraphInstance(nodes=x, edges=self._edges, edge_links=self._links)

    def _random_episode(self, rng: np.random.Generator) -> None:
        n = _num_nodes(rng, self.config)
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
        return (self._obs(), reward, terminated, truncated,
                self._info(self._mask(), False, bool(terminated)))


class GrowTreeEnv(_SelectionEnv):
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
        adj = _adjacency(where, int(n), pairs)
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
        self._load(wmat, adj, _option_int(where, options, "root", int(n)))

    def _mask(self) -> np.ndarray:
        return self._in_tree[self._src] & ~self._in_tree[self._dst]

    def _obs(self) -> GraphInstance:
        x = np.zeros((self._n, len(GROW_TREE_FEATURES)), dtype=np.float32)
        x[self._in_tree, 0] = 1.0
        x[self._root, 1] = 1.0
        return GraphInstance(nodes=x, edges=self._edges, edge_links=self._links)

    def _random_episode(self, rng: np.random.Generator) -> None:
        n = _num_nodes(rng, self.config)
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
        return (self._obs(), -float(self._weight[a]), terminated, False,
                self._info(self._mask(), False, bool(terminated)))
