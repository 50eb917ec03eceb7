"""The fast path of episode validation: whole-episode arrays from raw msgpack-numpy maps.

``decode_state(item, raw_arrays=True)`` leaves every array as its msgpack-numpy map
(``{b"nd": True, b"type": "<f4", b"shape": [N, F], b"data": bytes}``). For a well-formed
episode, :func:`fast_episode` checks all shapes and dtypes from those maps in a few list
comprehensions, joins the data bytes of all observations and builds ``x``, ``edge_index``
and ``edge_attr`` with one ``frombuffer`` each: no ndarray per observation. Value checks
(finite, index ranges, actions, rewards) are the same vectorized functions as the full path.

Anything unusual (another dtype, a missing key, a list where a dict belongs, an unfinished
episode, wrong lengths) returns None; the caller then runs the full path
(:func:`offline_graph.validation.validate_episode`), which names the exact problem.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from offline_graph.columns import GraphColumns, counts_to_ptr
from offline_graph.episode_codec import RawEpisode
from offline_graph.errors import where
from offline_graph.validation import Episode, EpisodeSpec, check_actions_rewards, check_values

_F32, _I64, _BOOL = np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.bool_)


def _shapes(maps: list[Any], ndim: int, dtype: np.dtype) -> np.ndarray | None:
    """[len(maps), ndim] shapes if every map is an ndarray of ``dtype`` and rank ``ndim``."""
    if any(m[b"nd"] is not True for m in maps):
        return None
    if {np.dtype(t) for t in {m[b"type"] for m in maps}} != {dtype}:
        return None
    shapes = [m[b"shape"] for m in maps]
    if any(len(s) != ndim for s in shapes):
        return None
    return np.asarray(shapes, dtype=np.int64).reshape(len(maps), ndim)


def _join(maps: list[Any], dtype: np.dtype, count: int) -> np.ndarray | None:
    data = b"".join([m[b"data"] for m in maps])
    if len(data) != count * dtype.itemsize:
        return None
    return np.frombuffer(data, dtype=dtype)


def fast_episode(
    raw: RawEpisode, spec: EpisodeSpec, *, file: str | None = None, row: int | None = None
) -> Episode | None:
    """The validated episode, or None when the full path must decide (see module doc)."""
    obs, actions, rewards = raw.observations, raw.actions, raw.rewards
    if not (raw.terminated or raw.truncated) or not isinstance(obs, list):
        return None
    num_t = len(obs) - 1
    if num_t < 1 or not isinstance(actions, list) or not isinstance(rewards, list):
        return None
    if len(actions) != num_t or len(rewards) != num_t:
        return None
    try:
        # selection spaces: every observation has an action_mask, or none has (else: full path)
        masked = spec.action_level is not None and "action_mask" in obs[0]
        if any(len(o) != (2 if spec.edge_dim is None else 3) + masked for o in obs):
            return None
        xm = [o["x"] for o in obs]
        em = [o["edge_index"] for o in obs]
        am = [o["edge_attr"] for o in obs] if spec.edge_dim is not None else None
        mm = [o["action_mask"] for o in obs] if masked else None
        xs = _shapes(xm, 2, _F32)
        es = _shapes(em, 2, _I64)
        as_ = _shapes(am, 2, _F32) if am is not None else None
        ms = _shapes(mm, 1, _BOOL) if mm is not None else None
    except (TypeError, KeyError, AttributeError):
        return None
    if xs is None or es is None or (am is not None and as_ is None):
        return None
    if mm is not None and ms is None:
        return None
    if (xs[:, 1] != spec.num_features).any() or (xs[:, 0] < 1).any() or (es[:, 0] != 2).any():
        return None
    num_nodes, num_edges = xs[:, 0], es[:, 1]
    if as_ is not None and ((as_[:, 0] != num_edges).any() or (as_[:, 1] != spec.edge_dim).any()):
        return None
    total_n, total_e = int(num_nodes.sum()), int(num_edges.sum())
    x = _join(xm, _F32, total_n * spec.num_features)
    flat = _join(em, _I64, 2 * total_e)
    edge_attr = None
    if am is not None:
        edge_attr = _join(am, _F32, total_e * int(spec.edge_dim))  # type: ignore[arg-type]
        if edge_attr is None:
            return None
        edge_attr = edge_attr.reshape(total_e, int(spec.edge_dim))  # type: ignore[arg-type]
    if x is None or flat is None:
        return None
    edge_ptr = counts_to_ptr(num_edges)
    # Each observation's edge_index is [2, E_g] row-major: E_g sources, then E_g targets.
    graph_of_edge = np.repeat(np.arange(len(num_edges)), num_edges)
    src_pos = 2 * edge_ptr[:-1][graph_of_edge] + (np.arange(total_e) - edge_ptr[:-1][graph_of_edge])
    edge_index = np.stack([flat[src_pos], flat[src_pos + num_edges[graph_of_edge]]])
    graphs = GraphColumns(x.reshape(total_n, spec.num_features), counts_to_ptr(num_nodes),
                          edge_index, edge_ptr, edge_attr)
    if spec.action_level is not None:
        counts = np.diff(graphs.choice_ptr(spec.action_level))
        if mm is None:  # no recorded masks: every choice allowed
            mask = np.ones(int(counts.sum()), bool)
        else:
            same = (ms[:, 0] == counts).all()  # type: ignore[index]
            mask = _join(mm, _BOOL, int(counts.sum())) if same else None
            if mask is None:
                return None
        graphs.set_mask(spec.action_level, mask)
    acts = np.asarray(actions)
    rews = np.asarray(rewards)

    def ctx(t: int | None = None, column: str | None = None) -> str:
        return where(file=file, row=row, episode_id=raw.id, t=t, column=column)

    check_values(graphs, ctx)
    check_actions_rewards(acts, rews, spec, ctx, graphs)
    return Episode(
        id=raw.id,
        obs=graphs,
        actions=acts.astype(np.int64, copy=False),
        rewards=rews.astype(np.float32, copy=False),
        terminated=raw.terminated,
        truncated=raw.truncated and not raw.terminated,
    )
