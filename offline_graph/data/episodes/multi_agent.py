"""Multi-agent episode rows (format version 1): decode, validate per agent, group per module.

A multi-agent episode file is an ordinary ``episodes`` file (column ``item``, our Parquet
metadata with ``"multi_agent": true``); each row is ``msgpack.packb(state,
default=msgpack_numpy.encode)`` of::

    {
      "format": "offline_graph.multi_agent_episode", "format_version": 1,
      "id_": str,                      # the MultiAgentEpisode's id
      "env_t_started": int, "env_t": int, "is_terminated": bool, "is_truncated": bool,
      "agents": [                      # a list, not a map: int agent ids survive msgpack
        {"agent_id": str | int,
         "module_id": str | None,      # the module the recording mapped it to (if any)
         "env_t": [int, ...],          # the env step of each of the agent's observations
         "agent_t_started": int,
         "episode": SingleAgentEpisode.get_state() of the agent's steps (spaces None),
         "env_t_to_agent_t": InfiniteLookbackBuffer.get_state() (space None),
         "hanging": {"actions_end", "extra_model_outputs_end", "rewards_end",
                     "rewards_begin"}},  # RLlib's per-agent caches, as they were
        ...],
      "custom_data": dict,
    }

Everything in it is what ``MultiAgentEpisode.get_state()`` holds, minus what msgpack cannot
carry (the mapping function, lookback-buffer objects, spaces, maps keyed by int ids), so
``offline_graph.rllib.offline.episodes.to_multi_agent_episode`` rebuilds the episode with RLlib's
own ``MultiAgentEpisode.from_state``. Each agent's steps are an ordinary single-agent
episode state, decoded and validated exactly like a single-agent row
(:mod:`offline_graph.data.episodes.codec`, :mod:`offline_graph.data.episodes.validation`) against the spaces
of the module the agent maps to. Rewards, returns-to-go and ``t`` are each agent's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from offline_graph.data.episodes.codec import (
    MULTI_AGENT_FORMAT,
    RawEpisode,
    flag,
    integer,
    raw_from_state,
    unpack_item,
)
from offline_graph.data.errors import ConfigError, DecodeError, OfflineGraphError, where
from offline_graph.data.episodes.reader import OnError, ReadStats, reject, unique_digest
from offline_graph.data.learning.transitions import Transitions
from offline_graph.data.episodes.validation import Episode, EpisodeSpec, validate_episode

MULTI_AGENT_VERSION = 1
__all__ = ["MULTI_AGENT_FORMAT", "MULTI_AGENT_VERSION", "AgentSteps", "MultiAgentRaw", "Route"]

Route = Callable[[Any, "str | None", str], "tuple[str, EpisodeSpec] | None"]
"""``route(agent_id, recorded_module_id, episode_id) -> (module_id, spec)`` or None (the
agent's steps are not used: its module is not trained)."""


@dataclass
class AgentSteps:
    """One agent's part of a multi-agent episode (not yet validated)."""

    agent_id: Any
    module_id: str | None
    env_t: np.ndarray
    raw: RawEpisode


@dataclass
class MultiAgentRaw:
    """A decoded multi-agent episode row."""

    id: str
    terminated: bool
    truncated: bool
    agents: list[AgentSteps]


def unpack(item: Any, file: str | None = None) -> dict:
    """``item`` bytes -> the state dict (arrays as ndarrays); DecodeError naming the file."""
    ctx = where(file=file, column="item")
    if not isinstance(item, (bytes, bytearray, memoryview)):
        raise DecodeError(
            f"{ctx}: value must be msgpack bytes (found {type(item).__name__}). "
            "Episode files hold one msgpack-encoded episode state per row."
        )
    try:
        state = unpack_item(item)
    except Exception as err:  # msgpack raises many types on garbage
        raise DecodeError(
            f"{ctx}: value must be a msgpack-encoded episode state (found {len(item)} "
            f"undecodable bytes: {type(err).__name__}: {err}). The row is corrupt.",
            reason="decode",
        ) from err
    if not isinstance(state, dict) or "id_" not in state:
        raise DecodeError(
            f"{ctx}: value must decode to an episode state dict with 'id_' (found "
            f"{type(state).__name__}). Write rows with offline_graph.write_episodes.",
            reason="decode",
        )
    return state


def is_multi_agent(state: dict) -> bool:
    return state.get("format") == MULTI_AGENT_FORMAT


def agent_entries(state: dict, file: str | None = None) -> list[dict]:
    """The checked agent entries of a multi-agent state (format version, entry layout)."""
    ctx = where(file=file, episode_id=str(state["id_"]))
    version = state.get("format_version")
    if version != MULTI_AGENT_VERSION:
        raise DecodeError(
            f"{ctx}: format_version must be {MULTI_AGENT_VERSION} (found {version!r}). "
            "Written by a newer offline_graph; upgrade, or run offline-graph migrate.",
            reason="version",
        )
    entries = state.get("agents")
    if not isinstance(entries, list):
        raise DecodeError(
            f"{ctx}, field 'agents': value must be a list of agent entries (found "
            f"{type(entries).__name__}). Write rows with offline_graph.write_episodes.",
            reason="decode",
        )
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("episode"), dict):
            raise DecodeError(
                f"{ctx}, field 'agents': each entry must be a dict with 'agent_id' and 'episode' "
                f"(found {type(entry).__name__}). Write rows with offline_graph.write_episodes.",
                reason="decode",
            )
    return entries


def decode_multi_agent(state: dict, file: str | None = None) -> MultiAgentRaw:
    """A decoded row -> :class:`MultiAgentRaw`. A single-agent episode state is read as a
    multi-agent episode with one agent (its ``agent_id``, else ``"agent0"``)."""
    eid = str(state["id_"])
    if not is_multi_agent(state):
        raw = raw_from_state(state, file=file)
        n_obs = len(raw.observations) if isinstance(raw.observations, (list, tuple)) else 0
        aid = state.get("agent_id")
        agent = AgentSteps(
            "agent0" if aid is None else aid, state.get("module_id"), np.arange(n_obs) + raw.t_started, raw
        )
        return MultiAgentRaw(eid, raw.terminated, raw.truncated, [agent])
    agents = []
    for entry in agent_entries(state, file):
        aid = entry.get("agent_id")
        sa_state = dict(entry["episode"], id_=eid)
        raw = raw_from_state(sa_state, file=file)
        env_t = env_steps(entry.get("env_t"), where(file=file, episode_id=eid))
        agents.append(AgentSteps(aid, entry.get("module_id"), env_t, raw))
    ctx = where(file=file, episode_id=eid)
    ends = [flag(state.get(k), f"{ctx}, field {k!r}") for k in ("is_terminated", "is_truncated")]
    return MultiAgentRaw(eid, ends[0], ends[1], agents)


def env_steps(value: Any, ctx: str) -> np.ndarray:
    """An agent entry's ``env_t``: a list of non-negative integers (None: none)."""
    if value is None:
        return np.zeros(0, np.int64)
    if isinstance(value, list):
        try:
            return np.fromiter((integer(v, ctx) for v in value), np.int64, len(value))
        except (DecodeError, OverflowError):
            pass
    raise DecodeError(
        f"{ctx}, field 'env_t': value must be a list of non-negative integers (found "
        f"{str(value)[:60]}). Write rows with offline_graph.write_episodes.",
        reason="decode",
    )


def _agent_error(err: OfflineGraphError, eid: str, aid: Any, module_id: str) -> OfflineGraphError:
    """``err`` with the agent and module named after the episode id."""
    msg = str(err)
    tag = f"episode {eid!r}"
    named = f"{tag}, agent {aid!r}" + (f" (module {module_id!r})" if module_id != str(aid) else "")
    msg = msg.replace(tag, named, 1) if tag in msg else f"{named}: {msg}"
    return type(err)(msg, reason=err.reason)


@dataclass
class AgentEpisode:
    """A validated agent part, with the module it trains."""

    module_id: str
    agent_id: Any
    env_t: np.ndarray
    episode: Episode


def read_agent_episodes(
    items: Sequence[Any],
    paths: Sequence[str | None],
    route: Route,
    *,
    on_error: OnError = "raise",
    seen_ids: dict[str, bytes] | None = None,
    stats: ReadStats | None = None,
) -> list[AgentEpisode]:
    """Decode episode rows (multi- or single-agent) and validate each agent's steps against
    its module's spec. A bad agent rejects its whole episode (reasons as for single-agent
    rows; the message names the agent and module). Agents routed to None are counted in
    ``stats.agent_steps_unused``."""
    stats = stats if stats is not None else ReadStats()
    seen = seen_ids if seen_ids is not None else {}
    in_call: set[str] = set()
    out: list[AgentEpisode] = []
    for item, path in zip(items, paths):
        stats.episodes_read += 1
        try:
            ma = decode_multi_agent(unpack(item, path), path)
            digest = unique_digest(ma.id, item, path, seen_ids, in_call)
            parts = _validate_agents(ma, route, path, stats)
        except ConfigError:
            raise  # a mapping to an unknown module is the config's problem, not the row's
        except OfflineGraphError as err:
            reject(err, item, path, on_error, stats)
            continue
        seen[ma.id] = digest
        in_call.add(ma.id)
        stats.episodes_used += 1
        for part in parts:
            stats.transitions_used += len(part.episode)
            stats.transitions_by_module[part.module_id] += len(part.episode)
        out.extend(parts)
    return out


def _validate_agents(
    ma: MultiAgentRaw, route: Route, path: str | None, stats: ReadStats
) -> list[AgentEpisode]:
    parts = []
    unused = 0
    for agent in ma.agents:
        target = route(agent.agent_id, agent.module_id, ma.id)
        n_steps = len(agent.raw.actions) if hasattr(agent.raw.actions, "__len__") else 0
        if target is None:
            unused += n_steps
            continue
        module_id, spec = target
        try:
            episode = validate_episode(agent.raw, spec, file=path)
        except OfflineGraphError as err:
            raise _agent_error(err, ma.id, agent.agent_id, module_id) from err
        env_t = agent.env_t
        if len(env_t) < len(episode):
            env_t = np.arange(len(episode) + 1, dtype=np.int64) + episode.t_started
        parts.append(AgentEpisode(module_id, agent.agent_id, env_t, episode))
    stats.agent_steps_unused += unused
    return parts


def transitions_by_module(parts: Sequence[AgentEpisode], gamma: float) -> dict[str, Transitions]:
    """The agents' transitions grouped by module (agent ids and env steps kept)."""
    grouped: dict[str, list[AgentEpisode]] = {}
    for part in parts:
        grouped.setdefault(part.module_id, []).append(part)
    return {
        mid: Transitions.from_episodes(
            [p.episode for p in group], gamma, [p.agent_id for p in group], [p.env_t for p in group]
        )
        for mid, group in grouped.items()
    }
