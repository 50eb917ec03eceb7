"""Logged episodes for off-policy evaluation: whole single-agent episodes as
:class:`~offline_graph.data.learning.transitions.Transitions` (episodes contiguous, steps in order) and,
where the logs carry them, the behaviour policy's log-probabilities (pure numpy / pyarrow).

Sources: episode files or directories (local or URIs), converted transition rows (files, or a
``pyarrow.Table``), or :class:`Transitions`. Behaviour log-probabilities are read from each
episode row's ``extra_model_outputs["action_logp"]`` (where RLlib's EnvRunners record them,
lookback dropped like the other buffers); they are used only when every episode has them.
Converted rows carry none.

Multi-agent episode files are read per module (:func:`load_logged` with a ``route``, as the
multi-agent prelearner routes agents): every agent whose steps go to the module is one
logged episode (its own observations, actions, rewards and end), the other agents part of
the environment, acting as they were logged; each agent's ``action_logp`` is read from its
own ``extra_model_outputs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from offline_graph.data.store import storage
from offline_graph.data.episodes.codec import unpack_item
from offline_graph.data.graphs.columns import concat_ranges, counts_to_ptr
from offline_graph.data.errors import ConfigError, DecodeError, OfflineGraphError
from offline_graph.data.store.files import input_location, scan_input
from offline_graph.data.episodes.holdout import held_out
from offline_graph.data.episodes.multi_agent import Route, read_agent_episodes
from offline_graph.data.episodes.reader import read_transitions
from offline_graph.data.graphs.space_text import space_text
from offline_graph.data.episodes.spec import EpisodeSpec
from offline_graph.data.learning.transitions import Transitions

LOGP_KEY = "action_logp"
"""RLlib's ``Columns.ACTION_LOGP``: the key EnvRunners record in ``extra_model_outputs``."""


@dataclass
class Logged:
    """Whole episodes, contiguous (``ptr``), and the behaviour's ``log mu(a | s)`` per step
    (None when the logs do not carry them)."""

    trans: Transitions
    ptr: np.ndarray
    behaviour_logp: np.ndarray | None
    without_logp: int = 0
    """Logged episodes (rows) that carry no ``action_logp`` (only counted where some do)."""
    incomplete: dict[str, list[str]] = field(default_factory=dict)
    """The ids of the episodes left out, by why (:func:`whole_episodes`): ``"without_end"``,
    ``"without_start"``; and ``"repeated"``: those read once though logged more than once."""

    @property
    def episodes(self) -> int:
        return len(self.ptr) - 1

    @property
    def left_out(self) -> int:
        """Episodes left out, not whole (without their end or first step)."""
        return sum(len(self.incomplete.get(k, [])) for k in ("without_end", "without_start"))


def _state_logp(state: dict) -> np.ndarray | None:
    buf = (state.get("extra_model_outputs") or {}).get(LOGP_KEY)
    if not isinstance(buf, dict) or buf.get("data") is None:
        return None
    data = np.asarray(buf["data"], np.float64).reshape(-1)
    return data[int(buf.get("lookback") or 0) :]


def item_logp(item: bytes) -> np.ndarray | None:
    """The ``action_logp`` of one episode row's steps (None when it has none)."""
    if LOGP_KEY.encode() not in bytes(item):  # cheap test before a full decode
        return None
    return _state_logp(unpack_item(item))


def agent_logps(item: bytes) -> dict[str, np.ndarray | None]:
    """Per agent (``str(agent_id)``) of a multi-agent row: its steps' ``action_logp``."""
    if LOGP_KEY.encode() not in bytes(item):
        return {}
    state = unpack_item(item)
    agents = state.get("agents")
    entries: list = agents if isinstance(agents, list) else [state]
    return {
        str("agent0" if e.get("agent_id") is None else e["agent_id"]): _state_logp(e.get("episode", e))
        for e in entries
        if isinstance(e, dict)
    }


MULTI_AGENT_HINT = "Evaluate one module of multi-agent episode files with estimate_value(..., module_id=...)."


def whole_episodes(
    trans: Transitions, where: str, keys: list[Any] | None = None, *, drop_incomplete: bool = False
) -> tuple[Transitions, np.ndarray, np.ndarray, dict[str, list[str]]]:
    """``(trans with each episode's steps contiguous and in order, the episodes' ptr, the
    original row of each new row, the episodes left out)``. Entries of ``trans.episode_ids``
    with the same key (``keys``, default the episode id; per agent for multi-agent data) are
    one episode (RLlib's chunks of one episode), ordered by ``t``. ConfigError for multi-agent
    rows and an episode with missing or repeated steps between its first and its last.

    An episode without its end (the recording stopped in the middle of it: RLlib writes each
    ``sample()`` call's unfinished episodes as chunks) or without its first step (a chunk whose
    earlier steps are not in the data) is left out with ``drop_incomplete`` (its id listed
    under ``"without_end"`` / ``"without_start"``), else a ConfigError too; with it, steps
    logged more than once with the same action and reward are used once (the episode's id
    under ``"repeated"``)."""
    if trans.agent_ids is not None:
        raise ConfigError(
            f"{where}: data must be single-agent episodes (found multi-agent rows). " + MULTI_AGENT_HINT
        )
    if not len(trans):
        raise ConfigError(f"{where}: data must hold at least one step (found 0 transitions).")
    index: dict[Any, int] = {}
    group = np.fromiter(
        (index.setdefault(k, len(index)) for k in (trans.episode_ids if keys is None else keys)),
        np.int64,
        len(trans.episode_ids),
    )
    row_group = group[trans.episode_index]
    order = np.lexsort((trans.t, row_group))
    if not np.array_equal(order, np.arange(len(trans))):
        trans = trans.take(order)
    row_group = row_group[order]
    repeated: list[str] = []
    again = np.flatnonzero((np.diff(row_group) == 0) & (np.diff(trans.t) == 0)) + 1
    a, r = trans.actions, trans.rewards
    if drop_incomplete and len(again) and ((a[again] == a[again - 1]) & (r[again] == r[again - 1])).all():
        # the same steps logged twice: used once (different ones stay "repeated steps" below)
        repeated = sorted({trans.episode_ids[i] for i in trans.episode_index[again]}, key=str)
        rows = np.delete(np.arange(len(trans)), again)
        trans, row_group, order = trans.take(rows), row_group[rows], order[rows]
    counts = np.bincount(row_group, minlength=len(index))
    keep = np.flatnonzero(counts)  # the episodes that have rows
    ptr = counts_to_ptr(counts[keep])
    if len(keep) != len(trans.episode_ids) or not np.array_equal(trans.episode_index, row_group):
        last_entry = trans.episode_index[ptr[1:] - 1]  # the chunk that ends each episode
        trans.episode_ids = [trans.episode_ids[i] for i in last_entry]
        if trans.final_obs is not None:
            trans.final_obs = trans.final_obs.take(last_entry)
        trans.episode_index = np.repeat(np.arange(len(keep), dtype=np.int32), np.diff(ptr))
    last = ptr[1:] - 1
    ended = trans.terminateds[last] | trans.truncateds[last]
    gaps = np.diff(trans.t) != 1
    gaps[ptr[1:-1] - 1] = False
    broken = np.add.reduceat(np.append(gaps, False), ptr[:-1]).astype(bool)
    cut = ~ended | (trans.t[ptr[:-1]] != 0)
    bad = np.flatnonzero(broken | (cut & (not drop_incomplete)))
    if len(bad):
        raise ConfigError(
            f"{where}: every episode must be whole, its steps from the first to its end (found "
            f"episode {trans.episode_ids[int(bad[0])]!r} "
            + ("with missing or repeated steps" if broken[bad[0]] else "without its end or first step")
            + "). Evaluate on whole episode files (every chunk of a cut episode) or on all the "
            "rows an episode was converted to."
        )
    ids = trans.episode_ids
    dropped = {
        "without_end": [ids[i] for i in np.flatnonzero(~ended)],
        "without_start": [ids[i] for i in np.flatnonzero(cut & ended)],
        "repeated": repeated,
    }
    if not cut.any():
        return trans, ptr, order, dropped
    keep = np.flatnonzero(~cut)
    if not len(keep):
        raise ConfigError(
            f"{where}: data must hold at least one whole episode, from its first step to its end "
            f"(found {len(dropped['without_end'])} episodes without their end, "
            f"{len(dropped['without_start'])} without their first step, e.g. {ids[0]!r}). Record "
            "whole episodes (RLlib: sample(num_episodes=...)), or give every file of a recording."
        )
    rows = concat_ranges(ptr[:-1][keep], ptr[1:][keep])
    kept = replace(
        trans.take(rows),
        episode_ids=[ids[i] for i in keep],
        episode_index=np.repeat(np.arange(len(keep), dtype=np.int32), np.diff(ptr)[keep]),
        final_obs=None if trans.final_obs is None else trans.final_obs.take(keep),
    )
    return kept, counts_to_ptr(np.diff(ptr)[keep]), order[rows], dropped


def incomplete_warning(logged: Logged) -> list[str]:
    """The warnings that say which episodes :func:`whole_episodes` left out or read once though
    logged more than once (none: [])."""
    out = []
    if logged.incomplete.get("repeated"):
        again = logged.incomplete["repeated"]
        out.append(
            f"{len(again)} logged episodes hold steps logged more than once, the same action and "
            f"reward each time (e.g. {again[0]!r}; RLlib 2.60's recorder without "
            "output_max_rows_per_file writes every earlier sample() call's episodes again): each "
            "step is used once."
        )
    if not logged.left_out:
        return out
    end, start = logged.incomplete["without_end"], logged.incomplete["without_start"]
    return out + [
        f"{logged.left_out} logged episodes were left out, not whole: {len(end)} without their end "
        f"(the recording stopped in them; RLlib writes each sample() call's unfinished episodes as "
        f"chunks), {len(start)} without their first step (their earlier chunks are not in the data); "
        f"e.g. {(end + start)[0]!r}. The estimate uses the {logged.episodes} whole ones; long episodes are "
        "the likelier to be cut, so record whole episodes (sample(num_episodes=...)) or give "
        "every file of the recording."
    ]


def _combine(
    parts: list[Transitions], logps: list[np.ndarray | None], where: str, keys: list[Any] | None = None
) -> Logged:
    """Whole episodes of ``parts`` and, when every episode has them, its log-probabilities."""
    whole = Transitions.concat(parts)
    trans, ptr, order, dropped = whole_episodes(whole, where, keys, drop_incomplete=True)
    have = [v for v in logps if v is not None]
    logp = None
    if len(have) == len(logps) and sum(len(v) for v in have) == len(whole):
        logp = (np.concatenate(have) if have else np.zeros(0))[order]
    return Logged(trans, ptr, logp, len(logps) - len(have) if have else 0, dropped)


LOGP_MAX = 1e-5
"""The largest ``action_logp`` read as a log-probability (0 plus float32 rounding)."""


def check_logps(
    parts: list[Transitions], logps: list[np.ndarray | None], paths: list[str], where: str
) -> None:
    """ConfigError naming the file, episode and step unless every row's ``action_logp`` holds
    one finite log-probability (<= 0) per step of its row (``parts``: the rows' transitions,
    one episode entry per row, in row order)."""
    entries = [(p, i) for p in parts for i in range(len(p.episode_ids))]
    if len(entries) != len(logps) and any(v is not None for v in logps):
        raise ConfigError(
            f"{where}: the rows read must each give one episode to align action_logp with (found "
            f"{len(entries)} episodes from {len(logps)} rows in {sorted(set(paths))[:3]}). Evaluate "
            "on whole episode files, one episode per row, or leave action_logp out (behaviour='bc')."
        )
    for (part, i), logp, path in zip(entries, logps, paths):
        if logp is None:
            continue
        rows = np.flatnonzero(part.episode_index == i)
        at = f"{where}: file {path}, episode {part.episode_ids[i]!r}"
        if len(logp) != len(rows):
            raise ConfigError(
                f"{at}: extra_model_outputs['action_logp'] must hold one log-probability per step "
                f"(found {len(logp)} for {len(rows)} steps). Record it with every add_env_step, or "
                "leave it out of every episode to clone the behaviour (behaviour='bc')."
            )
        bad = np.flatnonzero(~np.isfinite(logp) | (logp > LOGP_MAX))
        if len(bad):
            raise ConfigError(
                f"{at}, step t={int(part.t[rows[bad[0]]])}: action_logp must be a finite "
                f"log-probability <= 0 (found {float(logp[bad[0]])}). It is log mu(a_t | s_t), the "
                "behaviour's log-probability of the logged action (RLlib's Columns.ACTION_LOGP), not "
                "a probability or a logit."
            )


def load_agents(data: Any, route: Route, module_id: str, where: str = "estimate_value") -> Logged:
    """The steps of the agents that ``route`` sends to ``module_id`` in the multi-agent (or
    single-agent) episode files of ``data``, one logged episode per agent (module doc)."""
    scan = scan_input(data)  # an input resolved already is not listed again
    if scan.kind != "episodes" or not scan.files:
        raise ConfigError(
            f"{where}: data must hold episode files for module_id={module_id!r} (found "
            f"{scan.kind or 'no'} files in {input_location(data)!r}). Converted rows carry no "
            "module; evaluate a module on the multi-agent episode files."
        )
    parts: list[Transitions] = []
    logps: list[np.ndarray | None] = []
    keys: list[tuple[str, str]] = []
    paths: list[str] = []
    seen: set[str] = set()

    def to_module(agent_id: Any, recorded: str | None, episode_id: str) -> Any:
        target = route(agent_id, recorded, episode_id)
        if target is not None:
            seen.add(target[0])
        if target is None or target[0] != module_id:
            return None
        return target[0], replace(target[1], unfinished=True)  # RLlib's chunks are joined

    for path in scan.files:
        items = pq.read_table(storage.open_input_file(path), columns=["item"]).column("item").to_pylist()
        for item, agents in zip(items, map(agent_logps, items)):
            for part in read_agent_episodes([item], [path], to_module):
                parts.append(Transitions.from_episodes([part.episode], 1.0))
                keys.append((part.episode.id, str(part.agent_id)))
                logp = agents.get(str(part.agent_id))
                logps.append(logp)
                paths.append(path)
    if not parts:
        raise ConfigError(
            f"{where}: module_id must be a module that agents of the data map to (found "
            f"{module_id!r}; the agents map to {sorted(seen)}). Check the policy mapping."
        )
    check_logps(parts, logps, paths, where)
    return _combine(parts, logps, where, keys)


def check_metadata_space(scan: Any, observation_space: Any, where: str) -> None:
    """ConfigError when the files' metadata names another observation space than the module's
    (before every step is rejected for the module's node / edge feature sizes)."""
    text = (scan.metadata or {}).get("observation_space")
    if text and observation_space is not None and str(text) != space_text(observation_space):
        raise ConfigError(
            f"{where}: the module's observation space must be the data's (found "
            f"{space_text(observation_space)} in the module, {text} in the file metadata of "
            f"{scan.files[0]}). Evaluate a module built for these logs (its observation_space: "
            f"offline_graph.parse_space({str(text)!r}, 'observation'))."
        )


def load_logged(
    data: Any, spec: EpisodeSpec, where: str = "estimate_value", observation_space: Any = None
) -> Logged:
    """Episodes of ``data`` (module doc) checked against ``spec`` (the module's spaces) and,
    when given, the files' metadata against the module's ``observation_space``."""
    if isinstance(data, Logged):
        return data
    if isinstance(data, (Transitions, pa.Table)):
        trans = data if isinstance(data, Transitions) else Transitions.from_table(data)
        return _combine([trans], [None], where)
    scan = scan_input(data)  # an input resolved already is not listed again
    if not scan.files:
        raise ConfigError(
            f"{where}: data must hold Parquet files (found none in {input_location(data)!r}). Pass "
            "episode files or directories: a path, or a list of them."
        )
    check_metadata_space(scan, observation_space, where)
    if scan.kind == "transitions":
        tables = [pq.read_table(storage.open_input_file(f)) for f in scan.files]
        return load_logged(pa.concat_tables(tables, promote_options="default"), spec, where)
    parts: list[Transitions] = []
    logps: list[np.ndarray | None] = []
    paths: list[str] = []
    spec = replace(spec, unfinished=True)  # RLlib's chunks of an episode are joined
    for path in scan.files:
        items = pq.read_table(storage.open_input_file(path), columns=["item"]).column("item").to_pylist()
        try:
            parts += _read_rows(items, path, spec)
        except DecodeError as err:
            if err.reason == "multi_agent":
                raise ConfigError(
                    f"{where}: data must be single-agent episodes (found multi-agent rows in "
                    f"{path}). " + MULTI_AGENT_HINT
                ) from None
            raise
        logps += [item_logp(i) for i in items]
        paths += [path] * len(items)
    check_logps(parts, logps, paths, where)
    return _combine(parts, logps, where)


def _read_rows(items: list, path: str, spec: EpisodeSpec) -> list[Transitions]:
    """The transitions of one file's episode rows; row by row when two rows share an episode
    id (chunks of one episode: RLlib's recorder with ``output_max_rows_per_file``), which one
    read refuses as duplicates."""
    try:
        return read_transitions(items, [path] * len(items), spec, 1.0)
    except OfflineGraphError as err:
        if err.reason != "duplicate_id":
            raise
    return [part for item in items for part in read_transitions([item], [path], spec, 1.0)]


def held_out_episodes(logged: Logged, fraction: float, seed: int) -> Logged:
    """The episodes of ``logged`` that training holds out (:mod:`offline_graph.data.episodes.holdout`)."""
    mask = held_out(logged.trans.episode_ids, fraction, seed)[logged.trans.episode_index]
    rows = np.flatnonzero(mask)
    if not rows.size:
        raise ConfigError(
            f"offline evaluation: the held-out episodes must not be empty (found none of "
            f"{logged.episodes} held out with holdout={fraction}). Raise configure(holdout=...)."
        )
    trans, ptr, order, _ = whole_episodes(logged.trans.take(rows), "offline evaluation")
    logp = None if logged.behaviour_logp is None else logged.behaviour_logp[rows][order]
    return Logged(trans, ptr, logp, logged.without_logp, logged.incomplete)
