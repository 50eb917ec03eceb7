"""Logged episodes for off-policy evaluation: whole single-agent episodes as
:class:`~offline_graph.data.transitions.Transitions` (episodes contiguous, steps in order) and,
where the logs carry them, the behaviour policy's log-probabilities (pure numpy / pyarrow).

Sources: episode files or directories (local or URIs), converted transition rows (files, or a
``pyarrow.Table``), or :class:`Transitions`. Behaviour log-probabilities are read from each
episode row's ``extra_model_outputs["action_logp"]`` (where RLlib's EnvRunners record them,
lookback dropped like the other buffers); they are used only when every episode has them.
Converted rows carry none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from offline_graph.data import storage
from offline_graph.data.codec import unpack_item
from offline_graph.data.columns import counts_to_ptr
from offline_graph.data.errors import ConfigError, DecodeError
from offline_graph.data.files import scan_files
from offline_graph.data.holdout import held_out
from offline_graph.data.reader import read_transitions
from offline_graph.data.spec import EpisodeSpec
from offline_graph.data.transitions import Transitions

LOGP_KEY = "action_logp"
"""RLlib's ``Columns.ACTION_LOGP``: the key EnvRunners record in ``extra_model_outputs``."""


@dataclass
class Logged:
    """Whole episodes, contiguous (``ptr``), and the behaviour's ``log mu(a | s)`` per step
    (None when the logs do not carry them)."""

    trans: Transitions
    ptr: np.ndarray
    behaviour_logp: np.ndarray | None

    @property
    def episodes(self) -> int:
        return len(self.ptr) - 1


def item_logp(item: bytes) -> np.ndarray | None:
    """The ``action_logp`` of one episode row's steps (None when it has none)."""
    if LOGP_KEY.encode() not in bytes(item):  # cheap test before a full decode
        return None
    state = unpack_item(item)
    buf = (state.get("extra_model_outputs") or {}).get(LOGP_KEY)
    if not isinstance(buf, dict) or buf.get("data") is None:
        return None
    data = np.asarray(buf["data"], np.float64).reshape(-1)
    return data[int(buf.get("lookback") or 0) :]


def whole_episodes(trans: Transitions, where: str) -> tuple[Transitions, np.ndarray]:
    """``trans`` with each episode's steps contiguous and in order, and the episodes' ptr;
    ConfigError for multi-agent data or an episode without its end or its first step."""
    if trans.agent_ids is not None:
        raise ConfigError(
            f"{where}: data must be single-agent episodes (found multi-agent rows). Off-policy "
            "evaluation per module of multi-agent data is not supported; evaluate a module on "
            "single-agent logs."
        )
    order = np.lexsort((trans.t, trans.episode_index))
    if not np.array_equal(order, np.arange(len(trans))):
        trans = trans.take(order)
    counts = np.bincount(trans.episode_index, minlength=len(trans.episode_ids))
    if (counts == 0).any():  # keep only the episodes that have rows
        keep = np.flatnonzero(counts)
        remap = np.full(len(counts), -1, np.int64)
        remap[keep] = np.arange(len(keep))
        trans.episode_index = remap[trans.episode_index].astype(np.int32)
        trans.episode_ids = [trans.episode_ids[i] for i in keep]
        if trans.final_obs is not None:
            trans.final_obs = trans.final_obs.take(keep)
        counts = counts[keep]
    ptr = counts_to_ptr(counts)
    last = ptr[1:] - 1
    ended = trans.terminateds[last] | trans.truncateds[last]
    gaps = np.diff(trans.t) != 1
    gaps[ptr[1:-1] - 1] = False
    if not ended.all() or gaps.any() or (len(trans) and (trans.t[ptr[:-1]] != 0).any()):
        bad = trans.episode_ids[int(np.flatnonzero(~ended)[0])] if not ended.all() else "?"
        raise ConfigError(
            f"{where}: every episode must be whole, its steps from the first to its end (found "
            f"episode {bad!r} incomplete). Evaluate on whole episode files or on all the rows "
            "an episode was converted to."
        )
    return trans, ptr


def load_logged(data: Any, spec: EpisodeSpec, where: str = "estimate_value") -> Logged:
    """Episodes of ``data`` (module doc) checked against ``spec`` (the module's spaces)."""
    if isinstance(data, Logged):
        return data
    if isinstance(data, Transitions):
        trans, ptr = whole_episodes(data, where)
        return Logged(trans, ptr, None)
    if isinstance(data, pa.Table):
        trans, ptr = whole_episodes(Transitions.from_table(data), where)
        return Logged(trans, ptr, None)
    scan = scan_files(data)
    if not scan.files:
        raise ConfigError(f"{where}: data must hold Parquet files (found none in {data!r}).")
    if scan.kind == "transitions":
        tables = [pq.read_table(storage.open_input_file(f)) for f in scan.files]
        return load_logged(pa.concat_tables(tables, promote_options="default"), spec, where)
    parts: list[Transitions] = []
    logps: list[np.ndarray | None] = []
    for path in scan.files:
        items = pq.read_table(storage.open_input_file(path), columns=["item"]).column("item").to_pylist()
        try:
            parts += read_transitions(items, [path] * len(items), spec, 1.0)
        except DecodeError as err:
            if err.reason == "multi_agent":
                raise ConfigError(
                    f"{where}: data must be single-agent episodes (found multi-agent rows in "
                    f"{path}). Off-policy evaluation per module of multi-agent data is not supported."
                ) from None
            raise
        logps += [item_logp(i) for i in items]
    trans, ptr = whole_episodes(Transitions.concat(parts), where)
    have = [v for v in logps if v is not None]
    logp = None
    if len(have) == len(logps) and sum(len(v) for v in have) == len(trans):
        logp = np.concatenate(have) if have else np.zeros(0)
    return Logged(trans, ptr, logp)


def held_out_episodes(logged: Logged, fraction: float, seed: int) -> Logged:
    """The episodes of ``logged`` that training holds out (:mod:`offline_graph.data.holdout`)."""
    mask = held_out(logged.trans.episode_ids, fraction, seed)[logged.trans.episode_index]
    rows = np.flatnonzero(mask)
    if not rows.size:
        raise ConfigError(
            f"offline evaluation: the held-out episodes must not be empty (found none of "
            f"{logged.episodes} held out with holdout={fraction}). Raise configure(holdout=...)."
        )
    trans, ptr = whole_episodes(logged.trans.take(rows), "offline evaluation")
    logp = None if logged.behaviour_logp is None else logged.behaviour_logp[rows]
    return Logged(trans, ptr, logp)
