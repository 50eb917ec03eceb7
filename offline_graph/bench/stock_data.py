"""The stock paths' copies of the bench data: padded graphs and CartPole-sized episodes.

RLlib's stock path cannot read graph observations, so its baselines read the same synthetic
episodes (:mod:`offline_graph.bench.synthetic`) with every observation padded to one float32
Box of ``padded_width``, or with CartPole-sized Box(4) observations of the same episode lengths.

Padded observation layout (float32)::

    [N, E, x: n_max*F, edge_index: e_max*2, edge_attr: e_max*D]     e_max = round(epn * n_max)
"""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pyarrow as pa

from offline_graph.bench.synthetic import DataConfig, SyntheticEpisodes, episode_row
from offline_graph.data.graphs.columns import GraphColumns


def repeated_worst_case_bytes(cfg: DataConfig) -> int:
    """RLlib ``Repeated`` worst case per observation, from the forum post: ``F*MAX`` float32 node
    features plus ``2*MAX**2`` int64 edge indices (edge features not even counted)."""
    return cfg.num_features * cfg.n_max * 4 + 2 * cfg.n_max**2 * 8


def padded_spaces(cfg: DataConfig) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    """The stock path's spaces: one flat Box of ``padded_width`` floats."""
    box = gym.spaces.Box(-np.inf, np.inf, (cfg.padded_width,), np.float32)
    return box, gym.spaces.Discrete(cfg.num_actions)


def cartpole_spaces() -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    """CartPole-sized spaces: Box(4), Discrete(2)."""
    return gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2)


def pad_graphs(graphs: GraphColumns, cfg: DataConfig) -> np.ndarray:
    """Graphs -> float32 ``[G, padded_width]`` (layout in the module docstring), vectorized."""
    num_g, f, d = len(graphs), cfg.num_features, cfg.edge_dim
    n, e = graphs.num_nodes, graphs.num_edges
    if num_g and (n.max() > cfg.n_max or e.max() > cfg.e_max):
        raise ValueError(
            f"pad_graphs: graphs must have at most n_max={cfg.n_max} nodes and e_max={cfg.e_max} "
            f"edges (found {int(n.max())} nodes, {int(e.max())} edges). Raise n_max."
        )
    out = np.zeros((num_g, cfg.padded_width), np.float32)
    out[:, 0], out[:, 1] = n, e
    g_of_node = np.repeat(np.arange(num_g), n)
    g_of_edge = np.repeat(np.arange(num_g), e)
    local_node = np.arange(len(g_of_node)) - graphs.node_ptr[g_of_node]
    local_edge = np.arange(len(g_of_edge)) - graphs.edge_ptr[g_of_edge]
    o = 2
    out[:, o : o + cfg.n_max * f].reshape(num_g, cfg.n_max, f)[g_of_node, local_node] = graphs.x
    o += cfg.n_max * f
    out[:, o : o + cfg.e_max * 2].reshape(num_g, cfg.e_max, 2)[g_of_edge, local_edge] = graphs.edge_index.T
    o += cfg.e_max * 2
    if graphs.edge_attr is not None:
        out[:, o : o + cfg.e_max * d].reshape(num_g, cfg.e_max, d)[g_of_edge, local_edge] = graphs.edge_attr
    return out


def padded_episode_items(eps: SyntheticEpisodes, cfg: DataConfig) -> list[bytes]:
    """Stock episode rows: every observation one padded Box row."""
    padded = pad_graphs(eps.obs, cfg)
    return [episode_row(list(padded[gs]), eps, e, steps) for e, gs, steps in eps.episode_slices()]


def cartpole_items(eps: SyntheticEpisodes, seed: int = 0) -> list[bytes]:
    """CartPole-sized episode rows with ``eps``' lengths (Box(4) obs, actions in {0, 1})."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((len(eps.obs), 4)).astype(np.float32)
    cp = replace(eps, actions=eps.actions % 2)
    return [episode_row(list(obs[gs]), cp, e, steps) for e, gs, steps in eps.episode_slices()]


def padded_rows_table(eps: SyntheticEpisodes, cfg: DataConfig) -> pa.Table:
    """Transitions as padded rows: ``actions`` int64 and ``obs`` as a Ray tensor column."""
    from ray.data.extensions import ArrowTensorArray

    padded = pad_graphs(eps.transition_graphs(), cfg)
    return pa.table({"actions": pa.array(eps.actions), "obs": ArrowTensorArray.from_numpy(padded)})
