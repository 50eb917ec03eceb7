"""Multi-agent episodes in chunks (``MultiAgentEpisode.cut()``, written the way
``write_episodes`` encodes episodes): ``estimate_value(..., module_id=...)`` joins each agent's
chunks by episode id, as it does for single-agent chunks (tests/test_ope_chunks.py), and gives
the hand-computed WIS of the whole agent-episodes."""

from __future__ import annotations

import math

import gymnasium as gym
import msgpack
import msgpack_numpy as mnp
import numpy as np
import pytest
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

import offline_graph
from offline_graph.data.store.format import write_episode_file
from offline_graph.rllib.offline.episodes import multi_agent_state
from tests.ope_outside2_data import ACT2, OBS1, edgeless, outside, sizes

MU, PI = {1: 0.5, 2: 0.4, 3: 0.6}, {1: 0.2, 2: 0.7, 3: 0.5}  # P(action 1 | n nodes)
STEPS, CUT = 4, 2  # every episode has 4 env steps; the chunks are steps 0-1 and 2-3


def rule(obs):
    import torch

    p = torch.tensor([PI[n] for n in sizes(obs)], dtype=torch.float64)
    return torch.stack([torch.log1p(-p), torch.log(p)], 1).float()


def logp(n: int, a: int) -> np.float32:
    return np.float32(math.log(MU[n] if a else 1 - MU[n]))


def episode(i: int, ns: dict, acts: dict, cut: bool) -> list[MultiAgentEpisode]:
    """Episode ``i``: agents a and b act at every step (reward action * nodes), all
    terminated at the last; with ``cut`` its two chunks, else the whole episode."""
    ep = MultiAgentEpisode(id_=f"ma-{i}")
    ep.add_env_reset(observations={k: edgeless(ns[k][0]) for k in "ab"}, infos={k: {} for k in "ab"})
    out = [ep]
    for t in range(STEPS):
        if cut and t == CUT:
            ep = ep.cut()
            out.append(ep)
        last = t == STEPS - 1
        ep.add_env_step(
            observations={k: edgeless(ns[k][t + 1]) for k in "ab"},
            actions={k: acts[k][t] for k in "ab"},
            rewards={k: float(acts[k][t] * ns[k][t]) for k in "ab"},
            terminateds={"__all__": last, "a": last, "b": last},
            extra_model_outputs={k: {"action_logp": logp(ns[k][t], acts[k][t])} for k in "ab"},
        )
    return out


def write_rows(path: str, episodes: list[MultiAgentEpisode]) -> None:
    """Episode rows as ``write_episodes`` encodes them, chunks included (it refuses those)."""
    items = [msgpack.packb(multi_agent_state(e), default=mnp.encode) for e in episodes]
    write_episode_file(path, items, source="test", multi_agent=True)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    rng = np.random.default_rng(11)
    data = []
    for _ in range(40):
        ns = {k: [int(v) for v in rng.integers(1, 4, STEPS + 1)] for k in "ab"}
        data.append((ns, {k: [int(rng.random() < MU[n]) for n in ns[k][:STEPS]] for k in "ab"}))
    root = tmp_path_factory.mktemp("ma_chunks")
    whole = str(root / "whole")
    offline_graph.write_episodes(
        whole, [episode(i, *d, cut=False)[0] for i, d in enumerate(data)],
        observation_space=gym.spaces.Dict({k: OBS1 for k in "ab"}),
        action_space=gym.spaces.Dict({k: ACT2 for k in "ab"}),
    )  # fmt: skip
    chunks = [episode(i, *d, cut=True) for i, d in enumerate(data)]
    (root / "chunks").mkdir()
    write_rows(str(root / "chunks" / "first.parquet"), [c[0] for c in chunks])
    write_rows(str(root / "chunks" / "second.parquet"), [c[1] for c in chunks])
    # two more episodes whose recording stopped after their first chunk
    stopped = [episode(40 + i, *data[i], cut=True)[0] for i in range(2)]
    write_rows(str(root / "chunks" / "stopped.parquet"), stopped)
    return data, whole, str(root / "chunks")


def wis_by_hand(data: list) -> float:
    num = den = 0.0
    for ns, acts in data:
        for k in "ab":
            w = 1.0
            for n, a in zip(ns[k][:STEPS], acts[k]):
                w *= (PI[n] if a else 1 - PI[n]) / math.exp(float(logp(n, a)))
            num += w * sum(a * n for n, a in zip(ns[k], acts[k]))
            den += w
    return num / den


def ev(path: str) -> dict:
    return offline_graph.estimate_value(
        outside(OBS1, ACT2, rule), [path], method="wis", gamma=1.0, explore=True, module_id="m",
        policy_mapping_fn=lambda agent_id, episode, **kw: "m",
    )  # fmt: skip


def test_multi_agent_chunks_are_joined_per_agent_and_give_the_whole_episodes_wis(logs):
    data, whole, chunks = logs
    want = wis_by_hand(data)
    got_whole, got_chunks = ev(whole), ev(chunks)
    for res in (got_whole, got_chunks):  # 40 episodes x 2 agents, 4 steps each
        assert (res["episodes"], res["transitions"], res["behaviour"]) == (80, 320, "logged")
        assert res["value"] == pytest.approx(want, rel=1e-6)
    # the 2 episodes without their end: both agents of each left out, with a warning
    assert got_chunks["episodes_left_out"] == 4 and got_whole["episodes_left_out"] == 0
    assert any("ma-4" in w and "end" in w for w in got_chunks["warnings"])
