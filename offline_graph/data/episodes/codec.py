"""Episode rows: decode (the encoder, via RLlib's own episodes, is ``offline_graph.rllib.offline.episodes``).

A row's ``item`` is ``msgpack.packb(SingleAgentEpisode.get_state(), default=msgpack_numpy.encode)``,
byte for byte what RLlib writes with ``output_write_episodes=True``; RLlib's
``SingleAgentEpisode.from_state`` reads our rows and :func:`decode_state` reads RLlib's.
Decoding does not build a ``SingleAgentEpisode``: it reads the state dict's buffers directly
and hands the observation list to :mod:`offline_graph.data.episodes.validation`.

Every layout ``SingleAgentEpisode`` stores is read (``tests/test_encodings_zoo.py``):

* **lookback**: each buffer's first ``lookback`` items (``len_lookback_buffer``, or what
  ``cut()`` keeps of the previous chunk) are history, not steps of this chunk: dropped.
  ``t_started`` is kept: the chunk's steps are ``t_started, t_started + 1, ...`` as in
  RLlib's ``get_sample_batch``.
* **actions / rewards** as lists of Python numbers, of numpy scalars (msgpack-numpy maps
  ``{b"nd": False, ...}``) or of 0-d arrays, or as one array (constructor or ``to_numpy``).
* **observations** as one dict per step, or as gymnasium ``GraphInstance``s. msgpack writes
  a ``GraphInstance`` (a NamedTuple) as a plain array ``[nodes, edges, edge_links]``, so *an
  observation that is a msgpack array of exactly three elements, the first an ndarray and
  the others ndarrays or nil, is read as* ``GraphInstance(nodes, edges, edge_links)`` and
  turned into our dict (:func:`instance_to_dict`; the fast path reads the three arrays
  directly). Anything else that is not a dict is an ``obs_type`` error.
* **to_numpy()** episodes (RLlib stacks observations only when every graph of the episode
  has the same shapes): a dict of ``[T+1, ...]`` arrays, or ``[nodes, edges, edge_links]``
  of ``[T+1, ...]`` arrays, is split into one observation per step.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from offline_graph.data.graphs.typed import SEP
from offline_graph.data.errors import DecodeError, where


MULTI_AGENT_FORMAT = "offline_graph.multi_agent_episode"
"""The ``format`` value of a multi-agent episode row (:mod:`offline_graph.data.episodes.multi_agent`)."""


@dataclass
class RawEpisode:
    """The fields of one decoded episode state, not yet validated."""

    id: str
    observations: list[Any]
    actions: Any
    rewards: Any
    terminated: bool
    truncated: bool
    t_started: int


_DTYPES: dict[str, np.dtype] = {}


def fits(shape: Any, descr: Any, nbytes: int) -> bool:
    """Whether a msgpack-numpy header (``shape``, dtype ``descr``) describes exactly ``nbytes``
    bytes: checked before anything of that shape is built (a header may claim 10^9 nodes)."""
    try:
        dims = [operator.index(d) for d in shape]
        itemsize = np.dtype(descr).itemsize if isinstance(descr, str) else 0
    except (TypeError, ValueError):
        return False
    return itemsize > 0 and min(dims, default=0) >= 0 and math.prod(dims) * itemsize == nbytes


def decode_map(obj: dict) -> Any:
    """msgpack_numpy's ``decode``, safe for untrusted rows, with a dtype cache (one dict
    lookup per array instead of re-parsing the dtype string; the hook runs ~3 times per graph).

    An array map becomes an ndarray only when its header describes its bytes exactly
    (:func:`fits`: a header may claim a 10^9-node array over 12 bytes) and its dtype holds no
    Python objects: ``msgpack_numpy.decode`` would ``pickle.loads`` an object array's bytes,
    running whatever code a row holds. Any other map is left as it is (validation names it).
    """
    nd = obj.get(b"nd")
    if nd is not True and nd is not False:
        return obj
    descr, data = obj.get(b"type"), obj.get(b"data")
    if not isinstance(descr, str) or not isinstance(data, bytes):
        return obj
    dtype = _DTYPES.get(descr)
    if dtype is None:
        try:
            dtype = np.dtype(descr)
        except (TypeError, ValueError):
            return obj
        _DTYPES[descr] = dtype
    shape: Any = obj.get(b"shape") if nd else ()
    if dtype.hasobject or not fits(shape, descr, len(data)):
        return obj
    return np.ndarray(buffer=data, dtype=dtype, shape=shape) if nd else np.frombuffer(data, dtype)[0]


def _buffer_data(state: dict, key: str, ctx: str) -> tuple[Any, int]:
    """(data, lookback) of one ``InfiniteLookbackBuffer`` state."""
    buf = state.get(key)
    if not isinstance(buf, dict) or "data" not in buf:
        raise DecodeError(
            f"{ctx}, field {key!r}: episode state must hold an InfiniteLookbackBuffer dict "
            f"with 'data' (found {type(buf).__name__}). The row is not a "
            "SingleAgentEpisode.get_state() written by RLlib or offline_graph."
        )
    return buf["data"], integer(buf.get("lookback"), f"{ctx}, field {key!r}.lookback")


def integer(value: Any, ctx: str) -> int:
    """A non-negative integer field of an episode state (None: 0); DecodeError otherwise.
    A numpy scalar (RLlib's recorders store ``np.int64``) arrives as its msgpack-numpy map."""
    if isinstance(value, dict):
        value = decode_map(value)
    if value is None:
        return 0
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0:
        return int(value)
    raise DecodeError(
        f"{ctx}: value must be a non-negative integer (found {type(value).__name__} "
        f"{str(value)[:40]}). The row is corrupt; re-record it or run with on_error='skip'."
    )


def flag(value: Any, ctx: str) -> bool:
    """A bool field of an episode state (None: False); DecodeError otherwise. A numpy bool
    (RLlib's recorders store ``np.bool_`` end flags) arrives as its msgpack-numpy map."""
    if isinstance(value, dict):
        value = decode_map(value)
    if value is None or isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise DecodeError(
        f"{ctx}: value must be a bool (found {type(value).__name__} {str(value)[:40]}). "
        "The row is corrupt; re-record it or run with on_error='skip'."
    )


def is_array(value: Any) -> bool:
    """An ndarray, or (raw decoding) its msgpack-numpy map."""
    return isinstance(value, np.ndarray) or (isinstance(value, dict) and value.get(b"nd") is True)


def map_array(value: Any) -> Any:
    """A raw msgpack-numpy array map as an ndarray (one ``frombuffer``); anything else as is."""
    if isinstance(value, dict) and value.get(b"nd") is True and isinstance(value.get(b"type"), str):
        try:
            return np.frombuffer(value[b"data"], dtype=value[b"type"]).reshape(value[b"shape"])
        except (KeyError, TypeError, ValueError, OverflowError):
            return value  # validation names what is wrong with it
    return value


def _steps(leaf: Any, count: int) -> list[Any] | None:
    """A stacked ``[count, ...]`` array (or its raw map, or None) as ``count`` per-step items
    (raw maps: per-step maps over slices of the same bytes), None if it is no such array."""
    if leaf is None:
        return [None] * count
    if isinstance(leaf, np.ndarray):
        return list(leaf) if leaf.ndim and len(leaf) == count else None
    if not isinstance(leaf, dict):
        return None
    try:
        shape, data = leaf[b"shape"], memoryview(leaf[b"data"])
    except (KeyError, TypeError):  # not an array map: the layout is left as it is
        return None
    if not shape or shape[0] != count or not fits(shape, leaf.get(b"type"), len(data)):
        return None
    step = len(data) // count
    rest, kind = tuple(shape[1:]), leaf.get(b"kind", b"")
    return [
        {
            b"nd": True,
            b"type": leaf[b"type"],
            b"kind": kind,
            b"shape": rest,
            b"data": data[i * step : (i + 1) * step],
        }
        for i in range(count)
    ]


def _unstacked(data: Any, count: int | None) -> Any:
    """``to_numpy()`` observations (a dict of stacked arrays, or ``[nodes, edges, edge_links]``
    of stacked arrays) as one observation per step; any other layout as is. ``count``: the
    observations the actions allow (their number + 1); a stack of another length is left as
    it is (a header may claim 10^9 steps of empty arrays: nothing per step is built for it)."""
    if isinstance(data, dict) and data and all(isinstance(k, str) for k in data):
        first = next((v for v in data.values() if v is not None), None)
        if not count or _leading(first) != count:
            return data
        columns = {k: _steps(v, count) for k, v in data.items()}
        if any(c is None for c in columns.values()):
            return data
        return [dict(zip(columns, values)) for values in zip(*columns.values())]  # type: ignore[call-overload]
    if isinstance(data, (list, tuple)) and len(data) == 3 and is_array(data[0]):
        if not count or _leading(data[0]) != count:
            return data
        parts = [_steps(v, count) for v in data]
        if any(p is None for p in parts):
            return data
        return list(zip(*parts))  # type: ignore[call-overload]
    return data


def _leading(leaf: Any) -> int:
    if isinstance(leaf, np.ndarray):
        return len(leaf) if leaf.ndim else 0
    shape = leaf.get(b"shape") if isinstance(leaf, dict) else None
    return shape[0] if isinstance(shape, (list, tuple)) and shape and isinstance(shape[0], int) else 0


def _length(data: Any) -> int | None:
    """Items of a buffer's data: a list, an array, or an array map whose header fits its bytes."""
    if isinstance(data, (list, tuple)) or (isinstance(data, np.ndarray) and data.ndim):
        return len(data)
    raw = data.get(b"data") if is_array(data) else None
    if isinstance(raw, bytes) and fits(data.get(b"shape") or (), data.get(b"type"), len(raw)):
        return _leading(data)
    return None


def _is_instance(obs: Any) -> bool:
    return (
        isinstance(obs, (list, tuple))
        and len(obs) == 3
        and isinstance(obs[0], np.ndarray)
        and all(v is None or isinstance(v, np.ndarray) for v in obs[1:])
    )


def instance_to_dict(obs: Any) -> Any:
    """A decoded ``GraphInstance`` (``[nodes, edges, edge_links]``) as our observation dict:
    ``x = nodes`` (``[N]`` read as ``[N, 1]``), ``edge_index = edge_links.T`` (nil: no edges),
    ``edge_attr = edges`` (nil: none; allowed for a graph without edges). Anything else is
    returned as is (validation names it)."""
    if not _is_instance(obs):
        return obs
    nodes, edges, links = obs
    out = {"x": nodes.reshape(-1, 1) if nodes.ndim == 1 else nodes}
    out["edge_index"] = np.zeros((2, 0), np.int64) if links is None else links.T
    if edges is not None:
        out["edge_attr"] = edges
    return out


def decode_state(
    item: bytes, *, file: str | None = None, row: int | None = None, raw_arrays: bool = False
) -> RawEpisode:
    """``item`` bytes -> :class:`RawEpisode`; raises :class:`DecodeError` naming file and row.

    ``raw_arrays``: leave msgpack-numpy arrays as their maps (``{b"nd", b"type", b"shape",
    b"data"}``) and msgpack arrays as tuples, for :mod:`offline_graph.data.episodes.fast_episode`, which
    joins each episode's array bytes at once instead of building one ndarray per array.
    """
    ctx = where(file=file, row=row, column="item")
    if not isinstance(item, (bytes, bytearray, memoryview)):
        raise DecodeError(
            f"{ctx}: value must be msgpack bytes (found {type(item).__name__}). "
            "Episode files hold one msgpack-encoded SingleAgentEpisode state per row."
        )
    try:
        if raw_arrays:  # msgpack arrays as tuples (faster to build; the fast path only reads them)
            state = msgpack.unpackb(item, strict_map_key=False, use_list=False)
        else:
            state = unpack_item(item)
    except Exception as err:  # msgpack raises many types on garbage
        raise DecodeError(
            f"{ctx}: value must be a msgpack-encoded episode state "
            f"(found {len(item)} undecodable bytes: {type(err).__name__}: {err}). "
            "The row is corrupt; re-record it or run with on_error='skip'."
        ) from err
    if not isinstance(state, dict) or "id_" not in state:
        raise DecodeError(
            f"{ctx}: value must decode to a SingleAgentEpisode state dict with 'id_' "
            f"(found {type(state).__name__}). The row was not written by RLlib's "
            "SingleAgentEpisode.get_state()."
        )
    if state.get("format") == MULTI_AGENT_FORMAT:
        raise DecodeError(
            f"{where(file=file, row=row, episode_id=str(state['id_']))}: episode must be a "
            "single-agent episode in a single-agent config (found a multi-agent episode). "
            "Set config.multi_agent(policies=..., policy_mapping_fn=...) to train on "
            "multi-agent data.",
            reason="multi_agent",
        )
    return raw_from_state(state, file=file, row=row, raw_arrays=raw_arrays)


def raw_from_state(
    state: dict, *, file: str | None = None, row: int | None = None, raw_arrays: bool = False
) -> RawEpisode:
    """A decoded ``SingleAgentEpisode`` state dict -> :class:`RawEpisode` (see
    :func:`decode_state`; multi-agent rows hold one such state per agent)."""
    ctx = where(file=file, row=row, episode_id=str(state["id_"]))
    fields = {}
    for key in ("actions", "observations", "rewards"):
        data, lookback = _buffer_data(state, key, ctx)
        if key == "observations":
            steps = _length(state["actions"]["data"])
            data = _unstacked(data, None if steps is None else steps + 1)
        elif raw_arrays:
            data = map_array(data)  # an array of actions / rewards: one frombuffer
        if lookback and isinstance(data, (list, tuple, np.ndarray)):
            data = data[lookback:]
        fields[key] = data
    if not raw_arrays and isinstance(fields["observations"], list):
        fields["observations"] = [
            o if isinstance(o, dict) else instance_to_dict(o) for o in fields["observations"]
        ]
    return RawEpisode(
        id=str(state["id_"]),
        observations=fields["observations"],
        actions=fields["actions"],
        rewards=fields["rewards"],
        terminated=flag(state.get("is_terminated"), f"{ctx}, field 'is_terminated'"),
        truncated=flag(state.get("is_truncated"), f"{ctx}, field 'is_truncated'"),
        t_started=integer(state.get("t_started"), f"{ctx}, field 't_started'"),
    )


def unpack_item(item: bytes | bytearray | memoryview) -> Any:
    """The raw state of an ``item``, arrays decoded (:func:`decode_map`). A map keyed by
    arrays (a typed graph's edge types given as ``(src, relation, dst)`` tuples: msgpack writes
    them as arrays, which are no dict keys) is read again with those keys as text
    ``src__relation__dst`` (only then: the second read costs a Python call per map)."""
    try:
        return msgpack.unpackb(item, object_hook=decode_map, strict_map_key=False)
    except TypeError as err:
        if "unhashable" not in str(err):
            raise
        return msgpack.unpackb(item, object_pairs_hook=_text_keyed, strict_map_key=False)


def _text_keyed(pairs: list[tuple[Any, Any]]) -> Any:
    keys = [SEP.join(map(str, k)) if isinstance(k, list) else k for k, _ in pairs]
    return decode_map(dict(zip(keys, (v for _, v in pairs))))
