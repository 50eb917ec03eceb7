"""Episode rows: decode (the encoder, via RLlib's own episodes, is ``offline_graph.rllib.episodes``).

A row's ``item`` is ``msgpack.packb(SingleAgentEpisode.get_state(), default=msgpack_numpy.encode)``,
byte for byte what RLlib writes with ``output_write_episodes=True``; RLlib's
``SingleAgentEpisode.from_state`` reads our rows and :func:`decode_state` reads RLlib's.
Decoding does not build a ``SingleAgentEpisode``: it reads the state dict's buffers directly
and hands the observation list to :mod:`offline_graph.data.validation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import msgpack_numpy as mnp
import numpy as np

from offline_graph.data.errors import DecodeError, where


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


def _buffer_data(state: dict, key: str, ctx: str) -> Any:
    buf = state.get(key)
    if not isinstance(buf, dict) or "data" not in buf:
        raise DecodeError(
            f"{ctx}, field {key!r}: episode state must hold an InfiniteLookbackBuffer dict "
            f"with 'data' (found {type(buf).__name__}). The row is not a "
            "SingleAgentEpisode.get_state() written by RLlib or offline_graph."
        )
    data = buf["data"]
    lookback = int(buf.get("lookback") or 0)
    return data[lookback:] if lookback else data


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
    ctx = where(file=file, row=row, episode_id=str(state["id_"]))
    return RawEpisode(
        id=str(state["id_"]),
        observations=_buffer_data(state, "observations", ctx),
        actions=_buffer_data(state, "actions", ctx),
        rewards=_buffer_data(state, "rewards", ctx),
        terminated=bool(state.get("is_terminated", False)),
        truncated=bool(state.get("is_truncated", False)),
        t_started=int(state.get("t_started") or 0),
    )


def unpack_item(item: bytes) -> dict:
    """The raw state dict of an ``item`` (for tools and tests)."""
    return msgpack.unpackb(item, object_hook=mnp.decode, strict_map_key=False)
