"""``offline_graph.write_episodes``: RLlib episodes from your own loop -> our episode files.

For logs of a real system (no env to record from): build RLlib ``SingleAgentEpisode``s or
``MultiAgentEpisode``s with RLlib's own ``add_env_reset`` / ``add_env_step`` (observations
in our graph dict layout ``{"x", "edge_index", "edge_attr", "action_mask"}`` or gymnasium
``GraphInstance``s; actions as Python or numpy ints), finish them (``terminated`` or
``truncated``) and write them. ``offline-graph inspect``, ``convert`` and ``train`` (and
``offline_graph.configure``) read the files like recorded ones.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import gymnasium as gym
import msgpack
import msgpack_numpy as mnp
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError
from offline_graph.data.store.format import episode_file_name, write_episode_file
from offline_graph.data.graphs.space_text import space_text
from offline_graph.rllib.offline.episodes import multi_agent_state, single_agent_state

logger = logging.getLogger(__name__)
_WHERE = "write_episodes"


def _space_texts(obs: Any, act: Any) -> dict[str, str]:
    if obs is None or act is None:
        return {}
    try:
        return {"observation_space": space_text(obs), "action_space": space_text(act)}
    except ConfigError:  # spaces without a text form: the file names none
        return {}


def _agent_space_texts(obs: Any, act: Any) -> dict[str, dict[str, str]]:
    """``{str(agent_id): {"observation_space", "action_space"}}`` of per-agent Dict spaces."""
    if not isinstance(obs, (gym.spaces.Dict, Mapping)) or not isinstance(act, (gym.spaces.Dict, Mapping)):
        return {}
    out = {}
    for aid in obs.keys():
        if aid in act.keys():
            texts = _space_texts(obs[aid], act[aid])
            if texts:
                out[str(aid)] = texts
    return out


def _row(index: int, episode: Any) -> tuple[bytes, bool]:
    """(item bytes, multi-agent?) of one finished episode."""
    if isinstance(episode, MultiAgentEpisode):
        state, multi = multi_agent_state(episode), True
    elif isinstance(episode, SingleAgentEpisode):
        state, multi = single_agent_state(episode), False
    else:
        raise ConfigError(
            f"{_WHERE}: episodes[{index}] must be a ray.rllib SingleAgentEpisode or "
            f"MultiAgentEpisode (found {type(episode).__name__}). Build episodes with RLlib's "
            "add_env_reset / add_env_step."
        )
    if not episode.is_done:
        raise ConfigError(
            f"{_WHERE}: episodes[{index}] (id {episode.id_!r}) must be finished (found "
            "is_terminated=False and is_truncated=False). Pass terminated=True or truncated=True "
            "(or terminateds/truncateds {'__all__': True}) to its last add_env_step."
        )
    try:
        return msgpack.packb(state, default=mnp.encode), multi
    except TypeError as err:
        raise ConfigError(
            f"{_WHERE}: episodes[{index}] (id {episode.id_!r}) must hold msgpack-serializable "
            f"observations, actions, rewards, infos and custom_data (found {err}). Use numpy "
            "arrays, numbers, strings, lists and dicts."
        ) from err


def write_episodes(
    path: str,
    episodes: Iterable[SingleAgentEpisode | MultiAgentEpisode],
    *,
    observation_space: gym.Space | None = None,
    action_space: gym.Space | None = None,
    episodes_per_file: int = 1000,
    **metadata: Any,
) -> list[str]:
    """Write finished RLlib episodes as Parquet episode files under directory ``path``
    (local or a URI such as ``s3://bucket/prefix``); returns the files written.

    One row per episode; files ``episodes-<first>-<last>.parquet`` of up to
    ``episodes_per_file`` episodes. All episodes must be single-agent or all multi-agent.
    Spaces: ``observation_space`` / ``action_space`` (for multi-agent data a ``Dict`` keyed by
    agent id), else the episodes' own spaces where set, are written into the file metadata
    (``inspect`` and ``configure`` read them); without any, ``configure`` infers them from
    the data. ``metadata``: extra JSON-serializable keys for the file metadata.
    """
    if int(episodes_per_file) < 1:
        raise ConfigError(f"{_WHERE}: episodes_per_file must be >= 1 (found {episodes_per_file!r}).")
    storage.makedirs(path)
    files: list[str] = []
    items: list[bytes] = []
    kind: bool | None = None
    first = 0
    spaces: tuple[Any, Any] = (observation_space, action_space)

    def flush(last: int) -> None:
        name = storage.join(path, episode_file_name(first, last))
        if kind:
            texts: dict[str, Any] = {"multi_agent": True}
            agent_texts = _agent_space_texts(*spaces)
            if agent_texts:
                texts["agent_spaces"] = agent_texts
        else:
            texts = _space_texts(*spaces)
        write_episode_file(name, items, source="write_episodes", **texts, **metadata)
        files.append(name)

    index = -1
    for index, episode in enumerate(episodes):
        item, multi = _row(index, episode)
        if kind is None:
            kind = multi
            if spaces == (None, None):
                spaces = (episode.observation_space, episode.action_space)
        elif multi != kind:
            raise ConfigError(
                f"{_WHERE}: episodes[{index}] must be a "
                f"{'MultiAgentEpisode' if kind else 'SingleAgentEpisode'} like episodes[0] (found "
                f"a {type(episode).__name__}). Write single- and multi-agent data to separate paths."
            )
        items.append(item)
        if len(items) == int(episodes_per_file):
            flush(index)
            items, first = [], index + 1
    if items:
        flush(index)
    if not files:
        raise ConfigError(f"{_WHERE}: episodes must hold at least one episode (found none).")
    logger.info("write_episodes: %d episode(s) in %d file(s) under %s", index + 1, len(files), path)
    return files
