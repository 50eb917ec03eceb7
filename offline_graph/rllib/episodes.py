"""Episode rows from RLlib's own ``SingleAgentEpisode.get_state`` (the encoder of ``data.codec``)."""

from __future__ import annotations

from typing import Sequence

import msgpack
import msgpack_numpy as mnp
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from offline_graph.data.graph import GraphDict


def encode_episode(
    observations: Sequence[GraphDict],
    actions: Sequence[int],
    rewards: Sequence[float],
    *,
    terminated: bool,
    truncated: bool,
    episode_id: str,
    infos: Sequence[dict] | None = None,
) -> bytes:
    """One finished episode -> the ``item`` bytes RLlib writes (``len(obs) == len(actions)+1``)."""
    episode = SingleAgentEpisode(
        id_=episode_id,
        observations=list(observations),
        infos=list(infos) if infos is not None else [{} for _ in observations],
        actions=[int(a) for a in actions],
        rewards=[float(r) for r in rewards],
        terminated=terminated,
        truncated=truncated,
        len_lookback_buffer=0,
    )
    return msgpack.packb(episode.get_state(), default=mnp.encode)
