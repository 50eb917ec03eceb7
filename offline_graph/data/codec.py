"""Episode rows: decode (the encoder, via RLlib's own episodes, is ``offline_graph.rllib.episodes``).

A row's ``item`` is ``msgpack.packb(SingleAgentEpisode.get_state(), default=msgpack_numpy.encode)``,
byte for byte what RLlib writes with ``output_write_episodes=True``; RLlib's
``SingleAgentEpisode.from_state`` reads our rows and :func:`decode_state` reads RLlib's.
Decoding does not build a ``SingleAgentEpisode``: it reads the state dict's buffers directly
and hands the observation list to :mod:`offline_graph.data.validation`.

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

from dataclasses import dataclass
from typing import Any

import msgpack
import msgpack_numpy as mnp
import numpy as np

from offline_graph.data.errors import DecodeError, where


MULTI_AGENT_FORMAT = "offline_graph.multi_agent_episode"
"""The ``format`` value of a multi-agent episode row (:mod:`offline_graph.data.multi_agent`)."""


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


def _decode_hook(obj: dict) -> Any:
    """msgpack_numpy's ``decode`` with a dtype cache: one dict lookup per array instead of
    re-parsing the dtype string (the hook runs once per array, ~3 per graph)."""
    if obj.get(b"nd") is True:
        descr = obj[b"type"]
        dtype = _DTYPES.get(descr) if isinstance(descr, str) else None
        if dtype is None:
            dtype = mnp._unpack_dtype(descr)
            if isinstance(descr, str):
                _DTYPES[descr] = dtype
        return np.ndarray(buffer=obj[b"data"], dtype=dtype, shape=obj[b"shape"])
    return mnp.decode(obj)


def _buffer_data(state: dict, key: str, ctx: str) -> tuple[Any, int]:
    """(data, lookback) of one ``InfiniteLookbackBuffer`` state."""
    buf = state.get(key)
    if not isinstance(buf, dict) or "data" not in buf:
        raise DecodeError(
            f"{ctx}, field {key!r}: episode state must hold an InfiniteLookbackBuffer dict "
            f"with 'data' (found {type(buf).__name__}). The row is not a "
            "SingleAgentEpisode.get_state() written by RLlib or offline_graph."
        )
    return buf["data"], int(buf.get("lookback") or 0)


def is_array(value: Any) -> bool:
    """An ndarray, or (raw decoding) its msgpack-numpy map."""
    return isinstance(value, np.ndarray) or (isinstance(value, dict) and value.get(b"nd") is True)


def map_array(value: Any) -> Any:
    """A raw msgpack-numpy array map as an ndarray (one ``frombuffer``); anything else as is."""
    if isinstance(value, dict) and value.get(b"nd") is True and isinstance(value.get(b"type"), str):
        try:
            return np.frombuffer(value[b"data"], dtype=value[b"type"]).reshape(value[b"shape"])
        except (KeyError, TypeError, ValueError):
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
    if not shape or shape[0] != count or not isinstance(leaf.get(b"type"), str):
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


def _unstacked(data: Any) -> Any:
    """``to_numpy()`` observations (a dict of stacked arrays, or ``[nodes, edges, edge_links]``
    of stacked arrays) as one observation per step; any other layout as is."""
    if isinstance(data, dict) and data and all(isinstance(k, str) for k in data):
        first = next((v for v in data.values() if v is not None), None)
        count = _leading(first)
        columns = {k: _steps(v, count) for k, v in data.items()} if count else {}
        if not columns or any(c is None for c in columns.values()):
            return data
        return [dict(zip(columns, values)) for values in zip(*columns.values())]  # type: ignore[call-overload]
    if isinstance(data, (list, tuple)) and len(data) == 3 and is_array(data[0]):
        count = _leading(data[0])
        parts = [_steps(v, count) for v in data] if count else [None]
        if any(p is None for p in parts):
            return data
        return list(zip(*parts))  # type: ignore[call-overload]
    return data


def _leading(leaf: Any) -> int:
    if isinstance(leaf, np.ndarray):
        return len(leaf) if leaf.ndim else 0
    shape = leaf.get(b"shape") if isinstance(leaf, dict) else None
    return int(shape[0]) if shape else 0


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
    b"data"}``) and msgpack arrays as tuples, for :mod:`offline_graph.data.fast_episode`, which
    joins each episode's array bytes at once instead of building one ndarray per array.
    """
    ctx = where(file=file, row=row, column="item")
    if not isinstance(item, (bytes, bytearray, memoryview)):
        raise DecodeError(
            f"{ctx}: value must be msgpack bytes (found {type(item).__name__}). "
            "Episode files hold one msgpack-encoded SingleAgentEpisode state per row."
        )
    try:
        hook = None if raw_arrays else _decode_hook
        # raw_arrays: msgpack arrays as tuples (faster to build; the fast path only reads them)
        state = msgpack.unpackb(item, object_hook=hook, strict_map_key=False, use_list=not raw_arrays)
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
    for key in ("observations", "actions", "rewards"):
        data, lookback = _buffer_data(state, key, ctx)
        if key == "observations":
            data = _unstacked(data)
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
        terminated=bool(state.get("is_terminated", False)),
        truncated=bool(state.get("is_truncated", False)),
        t_started=int(state.get("t_started") or 0),
    )


def unpack_item(item: bytes) -> dict:
    """The raw state dict of an ``item`` (for tools and tests)."""
    return msgpack.unpackb(item, object_hook=mnp.decode, strict_map_key=False)
