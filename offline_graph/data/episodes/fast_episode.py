"""The fast path of episode validation: whole-episode arrays from raw msgpack-numpy maps.

``decode_state(item, raw_arrays=True)`` leaves every array as its msgpack-numpy map
(``{b"nd": True, b"type": "<f4", b"shape": [N, F], b"data": bytes}``). For well-formed
episodes, :func:`fast_episode` (one episode) and :func:`fast_block` (a block of episode rows,
straight to :class:`~offline_graph.data.learning.transitions.Transitions`) check all shapes and dtypes from
those maps in a few list comprehensions, join the data bytes of all observations and build
``x``, ``edge_index`` and ``edge_attr`` with one ``frombuffer`` each: no ndarray per
observation. Value checks (finite, index ranges, actions, rewards) are the same vectorized
functions as the full path, run once per episode (``fast_episode``) or once per block
(``fast_block``).

Every layout :mod:`offline_graph.data.episodes.codec` reads takes this path: observation dicts or
``GraphInstance`` triples (whose ``edge_links [E, 2]``, int32 or int64, are already the
edge-major pairs we store: joined without a gather), ``to_numpy()`` episodes (split into
per-step maps by the decoder), actions and rewards as lists of Python numbers, of numpy
scalars or 0-d arrays of one dtype (joined at once), or as arrays. The common layout (dicts,
Python numbers) runs exactly the per-block work it ran before the others were added.

Anything unusual (another dtype, a missing key, a list where a dict belongs, an unfinished
episode, wrong lengths, layouts mixed within a block; for a block also any failed value check
or a repeated episode id) returns None; the caller then runs the full path
(:func:`offline_graph.data.episodes.validation.validate_episode`, episode by episode), which names the exact
problem or skips and counts exactly the bad episodes.
"""

from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

from offline_graph.data.graphs.columns import GraphColumns, counts_to_ptr
from offline_graph.data.episodes.codec import RawEpisode, decode_map, decode_state
from offline_graph.data.errors import OfflineGraphError, where
from offline_graph.data.learning.transitions import Transitions
from offline_graph.data.episodes.validation import (
    Episode,
    EpisodeSpec,
    check_actions_rewards,
    checked_episode,
    values_ok,
)

_F32, _I64, _BOOL = np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.bool_)


_MAP_FIELDS = operator.itemgetter(b"nd", b"type", b"shape")


def _shapes(maps: Sequence[Any], ndim: int, dtype: np.dtype) -> np.ndarray | None:
    """[len(maps), ndim] shapes if every map is an ndarray of ``dtype`` and rank ``ndim``."""
    nds, types, shapes = zip(*map(_MAP_FIELDS, maps))
    if any(nd is not True for nd in nds):
        return None
    if {np.dtype(t) for t in set(types)} != {dtype}:
        return None
    try:
        out = np.asarray(shapes, dtype=np.int64)
    except (ValueError, OverflowError):  # ragged (shapes of different ranks), or beyond int64
        return None
    if out.shape != (len(maps), ndim):
        return None
    return out


_DATA = operator.itemgetter(b"data")


def _join(maps: list[Any], dtype: np.dtype, count: int) -> np.ndarray | None:
    try:
        data = b"".join(map(_DATA, maps))
    except (KeyError, TypeError):  # a map without bytes: the full path names it
        return None
    if len(data) != count * dtype.itemsize:
        return None
    return np.frombuffer(data, dtype=dtype)


def scalar_column(values: Any) -> np.ndarray:
    """T actions or rewards as a 1-D array. Raw decoding leaves numpy scalars (what
    ``add_env_step(action=np.argmax(...))`` stores) and 0-d arrays as msgpack-numpy maps
    (``{b"nd": False, b"type", b"data"}``, ``{b"nd": True, b"shape": (), ...}``): one dtype
    is joined at once, mixed ones (also Python numbers among maps) decoded each. An array (a
    whole column) is returned as is."""
    if isinstance(values, np.ndarray):
        return values
    try:
        if not len(values) or not isinstance(values[0], dict):
            plain = np.asarray(values)
            if plain.dtype != object:  # else numbers and maps mixed: decoded each below
                return plain
        try:
            kinds = {(v[b"type"], v.get(b"shape") or ()) for v in values}
        except (TypeError, KeyError, AttributeError):  # not all maps, or unhashable fields
            kinds = set()
        if len(kinds) == 1:
            descr, shape = next(iter(kinds))
            if isinstance(descr, str) and shape == ():
                joined = _join(list(values), np.dtype(descr), len(values))
                if joined is not None:
                    return joined
        return np.asarray([decode_map(v) if isinstance(v, dict) else v for v in values])
    except (ValueError, TypeError, OverflowError):  # ragged, undecodable, no dtype: no numbers
        return np.zeros((), object)


def _scalars(columns: list[Any]) -> np.ndarray:
    """The actions (rewards) of several episodes as one column: lists (recorded step by step)
    are joined as one list, arrays (a constructor's or ``to_numpy``'s) per episode."""
    if all(isinstance(c, (list, tuple)) for c in columns):
        flat: list[Any] = []
        for c in columns:
            flat += c
        return scalar_column(flat)
    return np.concatenate([scalar_column(c) for c in columns])


_X, _EI, _EA, _MASK = (operator.itemgetter(k) for k in ("x", "edge_index", "edge_attr", "action_mask"))
_NODES, _EDGES, _LINKS = (operator.itemgetter(i) for i in range(3))  # GraphInstance order
_EDGE_LINK_TYPES = (np.dtype(np.int64), np.dtype(np.int32))


def _dict_edges(em: list[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """(edge-major pairs [sumE, 2], edges per graph) from ``edge_index`` maps [2, E]."""
    es = _shapes(em, 2, _I64)
    if es is None or (es[:, 0] != 2).any():
        return None
    num_edges = es[:, 1]
    total_e = int(num_edges.sum())
    flat = _join(em, _I64, 2 * total_e)
    if flat is None:
        return None
    edge_ptr = counts_to_ptr(num_edges)
    # Each observation's edge_index is [2, E_g] row-major: E_g sources, then E_g targets, so
    # edge j of graph g (global index i) has its source at 2*ptr_g + (i - ptr_g) = i + ptr_g
    # and its target E_g later: one gather of the [sumE, 2] positions.
    pos = np.empty((total_e, 2), np.int64)
    src = pos[:, 0]
    src[:] = np.repeat(edge_ptr[:-1], num_edges)
    src += np.arange(total_e)
    np.add(src, np.repeat(num_edges, num_edges), out=pos[:, 1])
    return flat.take(pos), num_edges


def _instance_edges(lm: list[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """(pairs [sumE, 2], edges per graph) from ``GraphInstance.edge_links`` maps [E, 2] (int32
    or int64, nil for a graph without edges): already edge-major, joined as they are."""
    keep = [m is not None for m in lm]
    present = lm if all(keep) else [m for m in lm if m is not None]
    num_edges = np.zeros(len(lm), np.int64)
    if not present:
        return np.zeros((0, 2), np.int64), num_edges
    types = {m[b"type"] for m in present}
    dtype = np.dtype(types.pop()) if len(types) == 1 else None
    if dtype not in _EDGE_LINK_TYPES:
        return None
    shapes = _shapes(present, 2, dtype)  # type: ignore[arg-type]
    if shapes is None or (shapes[:, 1] != 2).any():
        return None
    num_edges[np.asarray(keep)] = shapes[:, 0]
    flat = _join(present, dtype, 2 * int(shapes[:, 0].sum()))  # type: ignore[arg-type]
    if flat is None:
        return None
    return flat.reshape(-1, 2).astype(np.int64, copy=False), num_edges


def _features(maps: list[Any], num_edges: np.ndarray, dim: int) -> np.ndarray | None:
    """``edge_attr`` [sumE, dim] from maps [E_g, dim] (None if any is unusual)."""
    if not maps:
        return np.zeros((0, dim), np.float32)
    shapes = _shapes(maps, 2, _F32)
    if shapes is None or (shapes[:, 0] != num_edges).any() or (shapes[:, 1] != dim).any():
        return None
    out = _join(maps, _F32, int(num_edges.sum()) * dim)
    return None if out is None else out.reshape(-1, dim)


def _instance_features(am: list[Any], num_edges: np.ndarray, dim: int | None) -> np.ndarray | None | bool:
    """``GraphInstance.edges``: nil is allowed for graphs without edges (gymnasium writes
    ``edges=None, edge_links=None`` there). False if anything is unusual."""
    keep = np.fromiter((m is not None for m in am), bool, len(am))
    if dim is None:
        return None if not keep.any() else False
    if not keep.all():
        if num_edges[~keep].any():
            return False
        am, num_edges = [m for m in am if m is not None], num_edges[keep]
    out = _features(am, num_edges, dim)
    return False if out is None else out


def _graphs(obs: list[Any], spec: EpisodeSpec, masked: bool) -> GraphColumns | None:
    """The observations ``obs`` (raw maps: dicts, or ``GraphInstance`` triples) as columns, or
    None if anything is unusual.

    ``edge_index`` is built edge-major (``[sumE, 2]`` contiguous, exposed as its ``[2, sumE]``
    transpose view) so that the Arrow row layout needs no second copy.
    """
    edge_attr: np.ndarray | None | bool = None
    mm = None
    try:
        if isinstance(obs[0], dict):
            if set(map(len, obs)) != {(2 if spec.edge_dim is None else 3) + masked}:
                return None
            xm = list(map(_X, obs))
            edges = _dict_edges(list(map(_EI, obs)))
            if edges is not None and spec.edge_dim is not None:
                edge_attr = _features(list(map(_EA, obs)), edges[1], spec.edge_dim)
                edge_attr = False if edge_attr is None else edge_attr
            mm = list(map(_MASK, obs)) if masked else None
        else:
            if set(map(len, obs)) != {3}:
                return None
            xm = list(map(_NODES, obs))
            edges = _instance_edges(list(map(_LINKS, obs)))
            if edges is not None:
                edge_attr = _instance_features(list(map(_EDGES, obs)), edges[1], spec.edge_dim)
        xs = _shapes(xm, 2, _F32)
        ms = _shapes(mm, 1, _BOOL) if mm is not None else None
    except (TypeError, KeyError, AttributeError, ValueError, IndexError, OverflowError):
        return None
    if xs is None or edges is None or edge_attr is False or (mm is not None and ms is None):
        return None
    if (xs[:, 1] != spec.num_features).any() or (xs[:, 0] < 1).any():
        return None
    pairs, num_edges = edges
    num_nodes = xs[:, 0]
    x = _join(xm, _F32, int(num_nodes.sum()) * spec.num_features)
    if x is None:
        return None
    graphs = GraphColumns(
        x.reshape(-1, spec.num_features),
        counts_to_ptr(num_nodes),
        pairs.T,
        counts_to_ptr(num_edges),
        edge_attr,  # type: ignore[arg-type]
    )
    if spec.action_level is not None:
        counts = np.diff(graphs.choice_ptr(spec.action_level))
        mask: np.ndarray | None
        if mm is None:  # no recorded masks: every choice allowed
            mask = np.ones(int(counts.sum()), bool)
        else:
            same = (ms[:, 0] == counts).all()  # type: ignore[index]
            mask = _join(mm, _BOOL, int(counts.sum())) if same else None
            if mask is None:
                return None
        graphs.set_mask(spec.action_level, mask)
    return graphs


def _usable(raw: RawEpisode) -> bool:
    """An ended episode with T >= 1 steps and T actions, T rewards (lists, or 1-D arrays),
    T+1 obs (tuples: ``decode_state(raw_arrays=True)`` decodes msgpack arrays as tuples)."""
    obs = raw.observations
    if not (raw.terminated or raw.truncated) or not isinstance(obs, (list, tuple)):
        return False
    num_t = len(obs) - 1
    return num_t >= 1 and _column_of(raw.actions, num_t) and _column_of(raw.rewards, num_t)


def _column_of(values: Any, num_t: int) -> bool:
    if isinstance(values, np.ndarray):
        return values.ndim == 1 and len(values) == num_t
    return isinstance(values, (list, tuple)) and len(values) == num_t


def _masked(obs: list[Any], spec: EpisodeSpec) -> bool:
    """Selection spaces: whether observations carry an ``action_mask`` (judged on the first;
    ``_graphs`` then requires every observation to agree)."""
    return spec.action_level is not None and isinstance(obs[0], dict) and "action_mask" in obs[0]


def fast_episode(
    raw: RawEpisode, spec: EpisodeSpec, *, file: str | None = None, row: int | None = None
) -> Episode | None:
    """The validated episode, or None when the full path must decide (see module doc)."""
    if spec.globals is not None or spec.typed is not None or not _usable(raw):  # the full path: Dict, typed
        return None
    graphs = _graphs(raw.observations, spec, _masked(raw.observations, spec))
    if graphs is None:
        return None
    graphs.edge_index = np.ascontiguousarray(graphs.edge_index)  # [2, E] row-major
    acts = scalar_column(raw.actions)
    rews = scalar_column(raw.rewards)
    if acts.shape != rews.shape or acts.shape != (len(raw.observations) - 1,):
        return None  # not one number per step: the full path names it

    def ctx(t: int | None = None, column: str | None = None) -> str:
        return where(file=file, row=row, episode_id=raw.id, t=t, column=column)

    return checked_episode(raw, graphs, acts, rews, spec, ctx)


def _block_graphs(
    steps: list[Any], finals: list[Any], spec: EpisodeSpec
) -> tuple[GraphColumns, GraphColumns] | None:
    """The steps' and the final observations' columns, values checked (None if anything is
    unusual or invalid): built and checked as one set of columns (one ``frombuffer`` per
    column) when both are of one layout, else each on its own, as :func:`_graphs` takes them."""
    masked = _masked(steps, spec)
    if isinstance(steps[0], dict) == isinstance(finals[0], dict):
        both = _graphs(steps + finals, spec, masked)
        if both is None or not values_ok(both):
            return None
        return both.slice(0, len(steps)), both.slice(len(steps), len(both))
    graphs, last = _graphs(steps, spec, masked), _graphs(finals, spec, masked)
    if graphs is None or last is None or not (values_ok(graphs) and values_ok(last)):
        return None
    return graphs, last


def _no_ctx(t: int | None = None, column: str | None = None) -> str:
    return ""  # block checks only decide pass / fall back; the per-episode path words errors


def fast_block(items: Sequence[Any], spec: EpisodeSpec, gamma: float) -> Transitions | None:
    """A block of episode rows (``item`` bytes) -> all their transitions, validated as one.

    Returns a :class:`~offline_graph.data.learning.transitions.Transitions` equal to
    ``Transitions.from_episodes(read_episodes(items, ...), gamma)``, or None when any row is
    unusual or invalid (the caller then runs the per-episode path for the whole block, which
    names or counts exactly the bad rows). Every observation is checked, the final ones
    included, though only the first T of each episode become transitions.
    """
    if not len(items) or spec.globals is not None or spec.typed is not None:
        return None
    raws = []
    try:
        for item in items:
            raws.append(decode_state(item, raw_arrays=True))
    except OfflineGraphError:
        return None
    ids = [r.id for r in raws]
    if len(set(ids)) != len(ids) or not all(_usable(r) for r in raws):
        return None
    steps: list[Any] = []
    finals: list[Any] = []
    for r in raws:
        steps += r.observations[:-1]
        finals.append(r.observations[-1])
    split = _block_graphs(steps, finals, spec)
    if split is None:
        return None
    graphs, last = split
    acts = _scalars([r.actions for r in raws])
    rews = _scalars([r.rewards for r in raws])
    if acts.shape != rews.shape or acts.shape != (len(steps),):
        return None
    try:
        check_actions_rewards(acts, rews, spec, _no_ctx, graphs)
    except OfflineGraphError:
        return None
    out = Transitions.from_steps(
        graphs,
        acts,
        rews,
        np.fromiter((len(r.actions) for r in raws), np.int64, len(raws)),
        [r.terminated for r in raws],
        [r.truncated and not r.terminated for r in raws],
        ids,
        gamma,
        t_started=np.fromiter((r.t_started for r in raws), np.int64, len(raws)),
    )
    out.final_obs = last
    return out
