"""estimate_value checked from the outside, second round (continued from
tests/test_ope_outside2.py): the data as a file / list / directory / converted rows, multi-agent
episodes whose agents join late or act once, behaviour logs recorded by RLlib's own recording
EnvRunner on an outside env."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

import offline_graph
from offline_graph.data.errors import ConfigError

from tests.ope_outside2_data import (
    ACT2,
    OBS1,
    OBS2,
    PI2,
    chain_episodes,
    edgeless,
    ev,
    make_chain,
    outside,
    rule2,
    sizes,
    wis_pdis_by_hand,
    write,
)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return make_chain(tmp_path_factory)


# --- 4. the data as one file, a list of files, a directory, converted rows ----------------------


# ray_session: the convert CLI below uses the module's Ray (without it the CLI started and stopped
# a Ray of its own, and the recording tests started another)
def test_file_list_directory_and_converted_rows_agree(ray_session, chain, tmp_path):
    import glob

    from offline_graph.cli import main

    logs, _ = chain
    path = write(tmp_path, "split", chain_episodes(logs), OBS2, ACT2, episodes_per_file=70)
    files = sorted(glob.glob(f"{path}/*.parquet"))
    assert len(files) == 3
    module = outside(OBS2, ACT2, rule2)
    whole = wis_pdis_by_hand(logs, PI2)[0]
    from pathlib import Path

    for data in (path, [path], files, list(reversed(files)), tuple(files), Path(path), (f for f in files)):
        assert ev(module, data, method="wis", gamma=1.0, explore=True)["value"] == pytest.approx(
            whole, rel=1e-6
        )
    with pytest.raises(
        ConfigError, match=r"input: data must be a path, a URI or a list of them \(found int 5\)"
    ):
        ev(module, 5, method="wis")
    for f in files:  # one file alone: its own episodes, episodes-<first>-<last>.parquet
        first, last = (int(i) for i in f.rsplit("/", 1)[1][len("episodes-") : -len(".parquet")].split("-"))
        mine = logs[first : last + 1]
        res = ev(module, f, method="pdis", gamma=1.0, explore=True)
        assert res["episodes"] == len(mine) and res["value"] == pytest.approx(
            wis_pdis_by_hand(mine, PI2)[1], rel=1e-6
        )
    # converted rows carry no action_logp: the behaviour is cloned, the same clone as on the
    # episode files given behaviour="bc" (the same transitions in the same order)
    assert main(["convert", "--input", path, "--output", str(tmp_path / "rows")]) == 0
    rows = ev(module, [str(tmp_path / "rows")], method="pdis", gamma=1.0, explore=True)
    eps = ev(module, [path], method="pdis", gamma=1.0, explore=True, behaviour="bc")
    assert rows["behaviour"] == eps["behaviour"] == "bc" and rows["transitions"] == eps["transitions"]
    assert rows["value"] == pytest.approx(eps["value"], rel=1e-6)


# --- 5. multi-agent: an agent that joins late, an agent that acts once --------------------------
# Per env episode: "a" acts 3 times; "b" gets its first observation after step 1 (no reward
# then) and acts twice; "c" acts once and terminates. The context is the node count n of an
# edgeless graph; reward a * n; every agent maps to module "m".

MU5, PI5 = {1: 0.5, 2: 0.4, 3: 0.6}, {1: 0.2, 2: 0.7, 3: 0.5}


def rule5(obs):
    p = torch.tensor([PI5[n] for n in sizes(obs)], dtype=torch.float64)
    return torch.stack([torch.log1p(-p), torch.log(p)], 1).float()


def test_multi_agent_late_joining_and_one_step_agents(tmp_path):
    rng = np.random.default_rng(17)
    eps, agent_eps = [], []
    for i in range(60):
        ns = {k: [int(v) for v in rng.integers(1, 4, 4)] for k in "abc"}
        act = {k: [int(rng.random() < MU5[n]) for n in ns[k]] for k in "abc"}
        steps = {"a": [0, 1, 2], "b": [1, 2], "c": [0]}  # env steps at which each agent acts
        ep = MultiAgentEpisode(id_=f"ma-{i}")
        ep.add_env_reset(observations={"a": edgeless(ns["a"][0]), "c": edgeless(ns["c"][0])},
                         infos={"a": {}, "c": {}})  # fmt: skip
        for t in range(3):
            acting = [k for k in "abc" if t in steps[k]]
            idx = {k: steps[k].index(t) for k in acting}
            nxt = {k: ns[k][idx[k] + 1] for k in acting if t < 2 or k == "a"}
            if t == 0:
                nxt["b"] = ns["b"][0]  # b's first observation, without a reward
            ep.add_env_step(
                observations={k: edgeless(n) for k, n in nxt.items()},
                actions={k: act[k][idx[k]] for k in acting},
                rewards={k: float(act[k][idx[k]] * ns[k][idx[k]]) for k in acting},
                terminateds={"c": t == 0, "__all__": t == 2, **({"a": True, "b": True} if t == 2 else {})},
                extra_model_outputs={k: {"action_logp": np.float32(math.log(
                    MU5[ns[k][idx[k]]] if act[k][idx[k]] else 1 - MU5[ns[k][idx[k]]]))} for k in acting},
            )  # fmt: skip
        eps.append(ep)
        for k in "abc":
            k_ns, k_act = ns[k][: len(steps[k])], act[k][: len(steps[k])]
            agent_eps.append((k_ns, k_act))
    spaces = (gym.spaces.Dict({k: OBS1 for k in "abc"}), gym.spaces.Dict({k: ACT2 for k in "abc"}))
    path = write(tmp_path, "ma", eps, *spaces)
    num = den = 0.0
    for k_ns, k_act in agent_eps:
        w = 1.0
        for n, a in zip(k_ns, k_act):
            w *= (PI5[n] if a else 1 - PI5[n]) / math.exp(
                float(np.float32(math.log(MU5[n] if a else 1 - MU5[n])))
            )
        num, den = num + w * sum(a * n for n, a in zip(k_ns, k_act)), den + w
    res = ev(outside(OBS1, ACT2, rule5), [path], method="wis", gamma=1.0, explore=True,
             module_id="m", policy_mapping_fn=lambda agent_id, episode, **kw: "m")  # fmt: skip
    assert (res["episodes"], res["transitions"], res["behaviour"]) == (180, 360, "logged")
    assert res["value"] == pytest.approx(num / den, rel=1e-6)


# --- 6. behaviour logs recorded by RLlib's own recording EnvRunner on an outside env ------------


class ContextEnv(gym.Env):
    """A gymnasium env with a ``spaces.Graph`` observation: an edgeless graph of n = 1..3 nodes,
    Discrete(2), one step, reward a * n."""

    observation_space = OBS1
    action_space = ACT2

    def __init__(self, config=None):  # RLlib builds env classes with the env_config
        super().__init__()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = int(self.np_random.integers(1, 4))
        return gym.spaces.GraphInstance(nodes=edgeless(self.n)["x"], edges=None, edge_links=None), {}

    def step(self, action):
        obs = gym.spaces.GraphInstance(nodes=edgeless(self.n)["x"], edges=None, edge_links=None)
        return obs, float(int(action) * self.n), True, False, {}


@pytest.mark.slow
def test_rllib_recorded_logs_of_an_outside_env(ray_session, tmp_path):
    """PPOConfig + configure_online + offline_data(output=..., output_write_episodes=True): the
    EnvRunner samples with the (untrained) GNNModule and records action_logp; the outside
    target's WIS on the written files equals the hand computation from the sampled episodes."""
    from ray.rllib.algorithms.ppo import PPOConfig

    config = offline_graph.configure_online(
        PPOConfig()
        .environment(ContextEnv)
        .offline_data(output=str(tmp_path / "rec"), output_write_episodes=True)
        .env_runners(num_env_runners=0)  # the local runner then has the env
        .debugging(seed=0)
    )  # fmt: skip
    runner = config.env_runner_cls(config=config, worker_index=0)
    try:
        sampled = runner.sample(num_episodes=40, explore=True)
    finally:
        runner.stop()
    num = den = 0.0
    for ep in sampled:
        n = len(ep.get_observations(0)["x"])
        a = int(ep.get_actions(0))
        w = (PI5[n] if a else 1 - PI5[n]) / math.exp(float(ep.get_extra_model_outputs("action_logp", 0)))
        num, den = num + w * float(ep.get_rewards(0)), den + w
    res = ev(outside(OBS1, ACT2, rule5), [str(tmp_path / "rec")], method="wis", gamma=1.0, explore=True)
    assert (res["episodes"], res["behaviour"]) == (len(sampled), "logged")
    assert res["value"] == pytest.approx(num / den, rel=1e-6)


@pytest.mark.slow
def test_rllib_recorder_chunks_are_joined_repeats_used_once_and_the_unfinished_left_out(
    ray_session, tmp_path
):
    """RLlib 2.60's recorder as an RLlib user runs it: sample(num_timesteps=...) three times
    with output_write_episodes. Each call writes its unfinished episode as a chunk (continued
    in the next call) and, without output_max_rows_per_file, every earlier call's episodes
    again. The sampling module as the target (explore=True) weighs every step 1, so WIS is the
    mean return of the whole episodes, each counted once; the last call's unfinished episode is
    left out, and both are said."""
    from ray.rllib.algorithms.ppo import PPOConfig

    config = offline_graph.configure_online(
        PPOConfig()
        .environment("offline_graph/Graph-v0")
        .offline_data(output=str(tmp_path / "rec"), output_write_episodes=True)
        .env_runners(num_env_runners=0)
        .debugging(seed=0)
    )  # fmt: skip
    runner = config.env_runner_cls(config=config, worker_index=0)
    try:
        chunks = [ep for _ in range(3) for ep in runner.sample(num_timesteps=40, explore=True)]
    finally:
        runner.stop()
    returns: dict[str, float] = {}
    for ep in chunks:
        returns[ep.id_] = returns.get(ep.id_, 0.0) + float(sum(ep.get_rewards()))
    unfinished = {ep.id_ for ep in chunks} - {ep.id_ for ep in chunks if ep.is_done}
    assert len(unfinished) == 1 and len(chunks) > len(returns)  # some episode spans two calls
    whole = [r for eid, r in returns.items() if eid not in unfinished]
    res = ev(runner.module, [str(tmp_path / "rec")], method="wis", gamma=1.0, explore=True, n_boot=20)
    assert (res["episodes"], res["episodes_left_out"]) == (len(whole), 1)
    assert res["value"] == pytest.approx(np.mean(whole), rel=1e-5)
    assert any("steps logged more than once" in w for w in res["warnings"])
    (cut,) = unfinished
    assert any("left out, not whole: 1 without their end" in w and cut in w for w in res["warnings"])
