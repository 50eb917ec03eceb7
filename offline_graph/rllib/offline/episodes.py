"""Episode rows from RLlib's own episodes: ``SingleAgentEpisode.get_state`` (the encoder of
``data.codec``) and multi-agent rows (format in :mod:`offline_graph.data.episodes.multi_agent`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import msgpack
import msgpack_numpy as mnp
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from offline_graph.data.episodes.codec import MULTI_AGENT_FORMAT
from offline_graph.data.errors import ConfigError, DecodeError, where
from offline_graph.data.graphs.graph import GraphDict
from offline_graph.data.episodes.multi_agent import MULTI_AGENT_VERSION, agent_entries, is_multi_agent, unpack


def encode_episode(
    observations: Sequence[GraphDict],
    actions: Sequence[int],
    rewards: Sequence[float],
    *,
    terminated: bool,
    truncated: bool,
    episode_id: str,
    infos: Sequence[dict] | None = None,
    action_logp: Sequence[float] | None = None,
) -> bytes:
    """One finished episode -> the ``item`` bytes RLlib writes (``len(obs) == len(actions)+1``);
    ``action_logp``: the behaviour's log-probability of each action, stored where RLlib's
    EnvRunners put it (``extra_model_outputs["action_logp"]``; read by off-policy evaluation)."""
    if len(observations) != len(actions) + 1 or len(rewards) != len(actions):
        raise ConfigError(
            f"encode_episode: episode {episode_id!r} must have one more observation than actions and "
            f"one reward per action (found {len(observations)} observations, {len(actions)} "
            f"actions, {len(rewards)} rewards). The last observation is the one after the last action."
        )
    if action_logp is not None and len(action_logp) != len(actions):
        raise ConfigError(
            f"encode_episode: episode {episode_id!r} action_logp must hold one log-probability per "
            f"action (found {len(action_logp)} for {len(actions)} actions)."
        )
    extra = None if action_logp is None else {"action_logp": [float(v) for v in action_logp]}
    episode = SingleAgentEpisode(
        id_=episode_id,
        observations=list(observations),
        infos=list(infos) if infos is not None else [{} for _ in observations],
        actions=[int(a) for a in actions],
        rewards=[float(r) for r in rewards],
        terminated=terminated,
        truncated=truncated,
        extra_model_outputs=extra,
        len_lookback_buffer=0,
    )
    return msgpack.packb(episode.get_state(), default=mnp.encode)


def single_agent_state(episode: SingleAgentEpisode) -> dict:
    """``episode.get_state()`` without its spaces (RLlib cannot serialize ``spaces.Graph``;
    the spaces live in the file metadata and the config). The episode is left unchanged."""
    spaces = episode.observation_space, episode.action_space
    try:
        episode.observation_space = episode.action_space = None
        return episode.get_state()
    finally:
        episode.observation_space, episode.action_space = spaces


def _agent_env_steps(episode: MultiAgentEpisode, agent_id: Any, sa: SingleAgentEpisode) -> list[int]:
    """The env step of each of the agent's observations (after its lookback)."""
    buf = episode.env_t_to_agent_t[agent_id]
    first = int(episode.env_t_started) - int(buf.lookback)
    skip = MultiAgentEpisode.SKIP_ENV_TS_TAG
    return [first + k for k, v in enumerate(buf.data) if v != skip and int(v) >= int(sa.t_started)]


def multi_agent_state(episode: MultiAgentEpisode) -> dict:
    """The msgpack-safe state of ``episode`` (format in :mod:`offline_graph.data.episodes.multi_agent`)."""
    agents = []
    for agent_id, sa in episode.agent_episodes.items():
        buf = episode.env_t_to_agent_t[agent_id].get_state()
        buf["space"] = None
        buf["data"] = list(buf["data"])
        agents.append(
            {
                "agent_id": agent_id,
                "module_id": episode._agent_to_module_mapping.get(agent_id) or sa.module_id,
                "env_t": _agent_env_steps(episode, agent_id, sa),
                "agent_t_started": int(episode.agent_t_started.get(agent_id, 0)),
                "episode": single_agent_state(sa),
                "env_t_to_agent_t": buf,
                "hanging": {
                    "actions_end": episode._hanging_actions_end.get(agent_id),
                    "extra_model_outputs_end": episode._hanging_extra_model_outputs_end.get(agent_id),
                    "rewards_end": episode._hanging_rewards_end.get(agent_id),
                    "rewards_begin": episode._hanging_rewards_begin.get(agent_id),
                },
            }
        )
    return {
        "format": MULTI_AGENT_FORMAT,
        "format_version": MULTI_AGENT_VERSION,
        "id_": episode.id_,
        "env_t_started": int(episode.env_t_started),
        "env_t": int(episode.env_t),
        "is_terminated": bool(episode.is_terminated),
        "is_truncated": bool(episode.is_truncated),
        "agents": agents,
        "custom_data": dict(episode.custom_data),
    }


def encode_multi_agent_episode(episode: MultiAgentEpisode) -> bytes:
    """One ``MultiAgentEpisode`` -> the ``item`` bytes of a multi-agent episode row."""
    return msgpack.packb(multi_agent_state(episode), default=mnp.encode)


def to_multi_agent_episode(item: bytes) -> MultiAgentEpisode:
    """A multi-agent episode row -> RLlib's ``MultiAgentEpisode`` (via its ``from_state``).

    The mapping function is RLlib's default (it is never stored; mappings recorded per agent
    are kept) and the spaces are None (they live in the file metadata)."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer

    state = unpack(item)
    if not is_multi_agent(state):
        raise DecodeError(
            f"{where(episode_id=str(state['id_']))}: row must be a multi-agent episode (found a "
            "single-agent episode state). Read it with SingleAgentEpisode.from_state.",
            reason="decode",
        )
    entries = agent_entries(state)

    def per_agent(key: str, default: Any = None) -> dict:
        return {
            e["agent_id"]: e["hanging"].get(key, default)
            for e in entries
            if e["hanging"].get(key) is not None
        }

    rllib_state = {
        "id_": state["id_"],
        "agent_to_module_mapping_fn": AlgorithmConfig.DEFAULT_AGENT_TO_MODULE_MAPPING_FN,
        "_agent_to_module_mapping": {e["agent_id"]: e["module_id"] for e in entries if e["module_id"]},
        "observation_space": None,
        "action_space": None,
        "env_t_started": state["env_t_started"],
        "env_t": state["env_t"],
        "agent_t_started": defaultdict(int, {e["agent_id"]: e["agent_t_started"] for e in entries}),
        "env_t_to_agent_t": defaultdict(
            InfiniteLookbackBuffer,
            {e["agent_id"]: InfiniteLookbackBuffer.from_state(e["env_t_to_agent_t"]) for e in entries},
        ),
        "_hanging_actions_end": per_agent("actions_end"),
        "_hanging_extra_model_outputs_end": defaultdict(dict, per_agent("extra_model_outputs_end")),
        "_hanging_rewards_end": defaultdict(float, per_agent("rewards_end")),
        "_hanging_rewards_begin": defaultdict(float, per_agent("rewards_begin")),
        "is_terminated": state["is_terminated"],
        "is_truncated": state["is_truncated"],
        "agent_episodes": [(e["agent_id"], dict(e["episode"])) for e in entries],
        "_start_time": None,
        "_last_step_time": None,
        "custom_data": state.get("custom_data") or {},
    }
    return MultiAgentEpisode.from_state(rllib_state)
