"""Synthetic bench data: long-tailed graph episodes generated as columns, and their episode rows.

Graph sizes have the toy env's shape (:mod:`offline_graph.env`): ``N = 1 + Poisson(lam)`` with
probability ``1 - tail_prob``, else ``Pareto(tail_scale, tail_alpha)``, clipped to
``[1, n_max]``. ``lam`` is solved so that the mean is ``mean_nodes`` whatever ``n_max`` is (the
memory case compares ``n_max`` 128 and 512 at the same mean). Defaults: mean 25, p99 ~120,
max 512 (one graph of exactly ``n_max`` nodes is planted so the padded baselines need their
full width). ``E = round(edges_per_node * N)`` directed edges with uniform endpoints; features
are standard normal rounded to 1/8, like ``GraphEnv``'s noise.

All graphs are generated as flat columns (:class:`~offline_graph.data.graphs.columns.GraphColumns`) in a
few numpy calls; only the encoding into episode rows (:func:`episode_items`) loops, once per
episode. The stock paths' copies of the same episodes are in :mod:`offline_graph.bench.stock_data`;
the files on disk in :mod:`offline_graph.bench.data`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import gymnasium as gym
import numpy as np

from offline_graph.data.graphs.columns import GraphColumns, counts_to_ptr
from offline_graph.data.episodes.validation import EpisodeSpec


@dataclass(frozen=True)
class DataConfig:
    """Shape of one synthetic graph data set."""

    transitions: int = 100_000
    """Approximate number of transitions (whole episodes are generated until reached)."""
    num_features: int = 16
    """F: node feature size."""
    edge_dim: int = 2
    """D: edge feature size."""
    num_actions: int = 4
    """k: Discrete(k) actions."""
    mean_nodes: float = 25.0
    """Mean node count per graph (after clipping to ``n_max``)."""
    n_max: int = 512
    """Largest graph; node counts are clipped to ``[1, n_max]``."""
    tail_prob: float = 0.05
    """Probability that a node count comes from the Pareto tail."""
    tail_scale: float = 58.0
    """Pareto scale (x_m) of the tail; 58 puts p99 at ~120 nodes."""
    tail_alpha: float = 2.2
    """Pareto shape of the tail."""
    edges_per_node: float = 4.0
    """Directed edges per graph: ``E = round(edges_per_node * N)``."""
    min_len: int = 10
    """Shortest episode (transitions)."""
    max_len: int = 50
    """Longest episode (transitions)."""
    episodes_per_file: int = 200
    """Episode rows per Parquet file (several files let Ray Data read in parallel)."""
    seed: int = 0
    """Seed of everything generated."""

    @property
    def spec(self) -> EpisodeSpec:
        return EpisodeSpec(self.num_features, self.edge_dim, self.num_actions)

    @property
    def e_max(self) -> int:
        """Edges of the largest graph (the padded baselines' edge capacity)."""
        return int(round(self.edges_per_node * self.n_max))

    @property
    def padded_width(self) -> int:
        """Floats of one padded observation (layout in :mod:`offline_graph.bench.stock_data`)."""
        return 2 + self.n_max * self.num_features + self.e_max * (2 + self.edge_dim)


def payload_bytes(num_nodes: np.ndarray, num_edges: np.ndarray, cfg: DataConfig) -> np.ndarray:
    """Real payload per graph: ``N*F*4 + E*2*8 + E*D*4`` (float32 x, int64 edge_index, float32
    edge_attr)."""
    return (num_nodes * cfg.num_features * 4 + num_edges * 2 * 8 + num_edges * cfg.edge_dim * 4).astype(
        np.int64
    )


def graph_spaces(cfg: DataConfig) -> tuple[gym.spaces.Graph, gym.spaces.Discrete]:
    """Our (observation, action) spaces."""
    node = gym.spaces.Box(-np.inf, np.inf, (cfg.num_features,), np.float32)
    edge = gym.spaces.Box(-np.inf, np.inf, (cfg.edge_dim,), np.float32) if cfg.edge_dim else None
    return gym.spaces.Graph(node_space=node, edge_space=edge), gym.spaces.Discrete(cfg.num_actions)


def _tail_mean(scale: float, alpha: float, cap: float) -> float:
    """``E[min(X, cap)]`` for ``X ~ Pareto(scale, alpha)``."""
    if cap <= scale:
        return cap
    return scale + scale**alpha * (cap ** (1 - alpha) - scale ** (1 - alpha)) / (1 - alpha)


def node_counts(rng: np.random.Generator, num: int, cfg: DataConfig) -> np.ndarray:
    """``num`` node counts with mean ``cfg.mean_nodes`` (see the module docstring)."""
    p = cfg.tail_prob
    tail = _tail_mean(cfg.tail_scale, cfg.tail_alpha, cfg.n_max)
    lam = max((cfg.mean_nodes - p * tail) / (1 - p) - 1.0, 0.0)
    bulk = 1 + rng.poisson(lam, num)
    heavy = np.round(cfg.tail_scale * (1.0 + rng.pareto(cfg.tail_alpha, num)))
    n = np.where(rng.random(num) < p, heavy, bulk)
    n = np.clip(n, 1, cfg.n_max).astype(np.int64)
    if num:
        n[int(rng.integers(num))] = cfg.n_max
    return n


@dataclass
class SyntheticEpisodes:
    """Episodes as columns: ``lengths[e]`` transitions and ``lengths[e] + 1`` graphs each."""

    ids: list[str]
    lengths: np.ndarray
    obs: GraphColumns
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray

    def __repr__(self) -> str:
        return (
            f"SyntheticEpisodes(episodes={len(self.ids)}, transitions={self.num_transitions}, "
            f"obs={self.obs!r})"
        )

    @property
    def num_transitions(self) -> int:
        return int(self.lengths.sum())

    @property
    def obs_ptr(self) -> np.ndarray:
        return counts_to_ptr(self.lengths + 1)

    @property
    def act_ptr(self) -> np.ndarray:
        return counts_to_ptr(self.lengths)

    def transition_index(self) -> np.ndarray:
        """Graph index of every transition's observation (final observations left out)."""
        is_final = np.zeros(len(self.obs), bool)
        is_final[self.obs_ptr[1:] - 1] = True
        return np.flatnonzero(~is_final)

    def transition_graphs(self) -> GraphColumns:
        return self.obs.take(self.transition_index())

    def head(self, num_transitions: int) -> "SyntheticEpisodes":
        """The first whole episodes holding at least ``num_transitions`` transitions (or all)."""
        cum = np.cumsum(self.lengths)
        n = min(int(np.searchsorted(cum, num_transitions)) + 1, len(self.lengths))
        return episode_range(self, 0, n)

    def episode_slices(self) -> Iterator[tuple[int, slice, slice]]:
        """(episode, graph slice, step slice) per episode."""
        op, ap = self.obs_ptr, self.act_ptr
        for e in range(len(self.ids)):
            yield e, slice(int(op[e]), int(op[e + 1])), slice(int(ap[e]), int(ap[e + 1]))


def _quantize(noise: np.ndarray) -> np.ndarray:
    """Rounded to multiples of 1/8, as GraphEnv's noise (recorded files compress alike)."""
    return np.round(noise * np.float32(8.0)) / np.float32(8.0)


def generate(cfg: DataConfig) -> SyntheticEpisodes:
    """Whole episodes until ``cfg.transitions`` transitions, all columns drawn at once."""
    rng = np.random.default_rng(cfg.seed)
    mean_len = (cfg.min_len + cfg.max_len) / 2
    lengths = rng.integers(cfg.min_len, cfg.max_len + 1, int(cfg.transitions / mean_len * 1.2) + 2)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), cfg.transitions)) + 1]
    num_graphs = int((lengths + 1).sum())
    n = node_counts(rng, num_graphs, cfg)
    e = np.round(cfg.edges_per_node * n).astype(np.int64)
    node_ptr, edge_ptr = counts_to_ptr(n), counts_to_ptr(e)
    x = _quantize(rng.standard_normal((int(node_ptr[-1]), cfg.num_features), dtype=np.float32))
    limit = np.repeat(n, e).astype(np.float64)
    edge_index = (rng.random((2, int(edge_ptr[-1]))) * limit).astype(np.int64)
    edge_attr = None
    if cfg.edge_dim:
        edge_attr = _quantize(rng.standard_normal((int(edge_ptr[-1]), cfg.edge_dim), dtype=np.float32))
    steps = int(lengths.sum())
    return SyntheticEpisodes(
        ids=[f"bench-{cfg.seed}-{i}" for i in range(len(lengths))],
        lengths=lengths.astype(np.int64),
        obs=GraphColumns(x, node_ptr, edge_index, edge_ptr, edge_attr),
        actions=rng.integers(0, cfg.num_actions, steps).astype(np.int64),
        rewards=rng.standard_normal(steps).astype(np.float32),
        terminated=rng.random(len(lengths)) < 0.5,
    )


def episode_range(eps: SyntheticEpisodes, start: int, stop: int) -> SyntheticEpisodes:
    """Episodes ``start`` to ``stop - 1`` of ``eps``."""
    op, ap = eps.obs_ptr, eps.act_ptr
    return SyntheticEpisodes(
        ids=eps.ids[start:stop],
        lengths=eps.lengths[start:stop],
        obs=eps.obs.slice(int(op[start]), int(op[stop])),
        actions=eps.actions[ap[start] : ap[stop]],
        rewards=eps.rewards[ap[start] : ap[stop]],
        terminated=eps.terminated[start:stop],
    )


def size_summary(eps: SyntheticEpisodes) -> dict[str, float]:
    """Node-count statistics of the transitions' graphs."""
    n = eps.obs.num_nodes[eps.transition_index()]
    return {
        "mean": float(n.mean()),
        "p50": float(np.percentile(n, 50)),
        "p99": float(np.percentile(n, 99)),
        "max": int(np.max(n)) if n.size else 0,
        "edges_per_node": float(eps.obs.num_edges.sum() / max(eps.obs.num_nodes.sum(), 1)),
    }


def episode_row(obs: Sequence, eps: SyntheticEpisodes, e: int, steps: slice) -> bytes:
    """Episode ``e`` of ``eps`` as one RLlib episode row (``encode_episode`` bytes) with the
    observations ``obs`` (ours: graph dicts; the stock copies: their Box rows)."""
    from offline_graph.rllib.offline.episodes import encode_episode

    term = bool(eps.terminated[e])
    return encode_episode(
        obs,
        eps.actions[steps].tolist(),
        eps.rewards[steps].tolist(),
        terminated=term,
        truncated=not term,
        episode_id=eps.ids[e],
    )


def episode_items(eps: SyntheticEpisodes) -> list[bytes]:
    """Our episode rows (observation dicts)."""
    return [
        episode_row([eps.obs.graph(g) for g in range(gs.start, gs.stop)], eps, e, steps)
        for e, gs, steps in eps.episode_slices()
    ]
