"""estimate_value checked from the outside (continued from tests/test_ope_outside.py): behaviour
logs from ``offline-graph record`` (cloned behaviour), multi-agent episode files one module
at a time, and the errors on bad input."""

from __future__ import annotations

import math

import gymnasium as gym
import msgpack
import msgpack_numpy
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

import offline_graph
from offline_graph.data.errors import ConfigError, OfflineGraphError
from tests.ope_outside_data import (
    ACT,
    MU1,
    NodeCountPolicy,
    OBS,
    PI1,
    REWARD,
    bandit_episodes,
    bandit_true,
    graph,
    make_bandit_dir,
    policy,
    wis_by_hand,
)


@pytest.fixture(scope="module")
def bandit_dir(tmp_path_factory):
    return make_bandit_dir(tmp_path_factory)


# --- behaviour data from `offline-graph record` (no action_logp: the behaviour is cloned) ------


class BanditEnv(gym.Env):
    """Task 1 as a gymnasium env: a ring of 2-4 nodes, one step, reward ``REWARD[n][a]``."""

    observation_space = OBS
    action_space = ACT

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = int(self.np_random.integers(2, 5))
        return self._obs(), {}

    def _obs(self):
        g = graph(self.n)
        return gym.spaces.GraphInstance(nodes=g["x"], edges=None, edge_links=g["edge_index"].T.copy())

    def step(self, action):
        return self._obs(), REWARD[self.n][int(action)], True, False, {}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from offline_graph.cli import main

    out = str(tmp_path_factory.mktemp("rec") / "logs")
    argv = ["record", "--env", f"{__name__}:BanditEnv", "--policy", "random", "--episodes", "300"]
    assert main([*argv, "--seed", "0", "--output", out, "--no-progress"]) == 0
    rows = pq.read_table(out).column("item").to_pylist()
    logs = []
    for i, row in enumerate(rows):  # read back with RLlib's own API, as a user would
        ep = SingleAgentEpisode.from_state(msgpack.unpackb(row, object_hook=msgpack_numpy.decode))
        n = (
            len(offline_graph.graph_to_dict(ep.get_observations(0))["x"])
            if not isinstance(ep.get_observations(0), dict)
            else len(ep.get_observations(0)["x"])
        )
        logs.append((i, [n, n], [int(ep.get_actions(0))], [float(ep.get_rewards(0))], [math.log(0.5)]))
    return logs, out


def test_recorded_logs_without_action_logp_clone_the_behaviour(recorded):
    logs, path = recorded
    res = offline_graph.estimate_value(policy(PI1), [path], method="wis", gamma=1.0, explore=True)
    assert res["behaviour"] == "bc" and any("action_logp" in w for w in res["warnings"])
    exact_mu = wis_by_hand(logs, PI1)  # with the true uniform behaviour
    assert abs(res["value"] - exact_mu) <= 0.05 * 2.0, (res["value"], exact_mu)
    with pytest.raises(ConfigError, match="action_logp"):
        offline_graph.estimate_value(policy(PI1), [path], method="wis", gamma=1.0, behaviour="logged")


def test_recorded_logs_fqe_with_every_default(recorded):
    logs, path = recorded
    res = offline_graph.estimate_value(policy(PI1), [path], method="fqe", gamma=1.0, explore=True)
    true = bandit_true(logs, PI1)
    assert abs(res["value"] - true) <= 0.05 * 2.0, (res["value"], true)
    assert res["ci_low"] <= res["value"] <= res["ci_high"] and res["warnings"] == []


# --- multi-agent episode files: one module at a time (module_id=) -----------------------------


def test_multi_agent_files_one_module_with_an_outside_module(tmp_path):
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    rng = np.random.default_rng(7)
    eps, mine = [], []
    for i in range(40):
        n, m = int(rng.integers(2, 5)), int(rng.integers(2, 5))
        a, b = int(rng.random() < MU1[n]), int(rng.integers(0, 2))
        lp = math.log(MU1[n] if a else 1 - MU1[n])
        ep = MultiAgentEpisode(id_=f"ma-{i}")
        ep.add_env_reset(
            observations={"solo_0": graph(n), "crowd_0": graph(m)}, infos={"solo_0": {}, "crowd_0": {}}
        )
        ep.add_env_step(
            observations={"solo_0": graph(n), "crowd_0": graph(m)},
            actions={"solo_0": np.int64(a), "crowd_0": b},
            rewards={"solo_0": REWARD[n][a], "crowd_0": 5.0},
            terminateds={"__all__": True},
            extra_model_outputs={
                "solo_0": {"action_logp": np.float32(lp)},
                "crowd_0": {"action_logp": np.float32(math.log(0.5))},
            },
        )
        eps.append(ep)
        mine.append((i, [n, n], [a], [REWARD[n][a]], [lp]))
    path = str(tmp_path / "ma")
    spaces = (
        gym.spaces.Dict({"solo_0": OBS, "crowd_0": OBS}),
        gym.spaces.Dict({"solo_0": ACT, "crowd_0": ACT}),
    )
    offline_graph.write_episodes(path, eps, observation_space=spaces[0], action_space=spaces[1])

    def mapping(agent_id, episode, **kwargs):
        return agent_id.split("_")[0]

    res = offline_graph.estimate_value(
        policy(PI1),
        [path],
        method="wis",
        gamma=1.0,
        explore=True,
        module_id="solo",
        policy_mapping_fn=mapping,
    )
    assert res["episodes"] == 40 and res["behaviour"] == "logged"
    assert res["value"] == pytest.approx(wis_by_hand(mine, PI1), rel=1e-6)
    with pytest.raises(ConfigError, match="module_id"):
        offline_graph.estimate_value(policy(PI1), [path], method="wis", gamma=1.0)


# --- bad input: `<where>: <what> must be <expected> (found <actual>). <hint>` ------------------


def test_error_messages_on_bad_input(tmp_path, bandit_dir):
    logs, path = bandit_dir
    ev = offline_graph.estimate_value

    def error(fn, *parts):
        with pytest.raises(OfflineGraphError) as info:
            fn()
        text = str(info.value)
        assert " must " in text and "(found " in text, text
        for part in parts:
            assert part in text, (part, text)
        return text

    error(
        lambda: ev(NodeCountPolicy, [path], method="wis"),
        "module must be an RLModule instance",
        "class NodeCountPolicy",
        ".build()",
    )
    error(
        lambda: ev(torch.nn.Linear(2, 2), [path], method="wis"),
        "module must be an RLModule",
        "Linear without forward_inference",
    )
    error(lambda: ev(policy(PI1), [path], method="wiss"), "method must be one of", "'wiss'")
    wide = NodeCountPolicy(
        observation_space=OBS, action_space=gym.spaces.Discrete(3), model_config={"p1": PI1}
    )
    error(
        lambda: ev(wide, [path], method="wis"),
        "ACTION_DIST_INPUTS must be a tensor [",
        "Discrete(3)",
        "(found Tensor [300, 2])",
    )
    f4 = NodeCountPolicy(
        observation_space=offline_graph.graph_space(4), action_space=ACT, model_config={"p1": PI1}
    )
    error(
        lambda: ev(f4, [path], method="wis"),
        "observation space must be the data's",
        "graph:F=4 in the module, graph:F=3",
    )

    class NoDistInputs(NodeCountPolicy):
        def _forward(self, batch, **kwargs):
            return {"logits": torch.zeros(len(batch[Columns.OBS]["ptr"]) - 1, 2)}

    bad = NoDistInputs(observation_space=OBS, action_space=ACT, model_config={"p1": PI1})
    error(lambda: ev(bad, [path], method="wis"), "must hold ACTION_DIST_INPUTS", "['logits']")

    # action_logp that is no log-probability, named by file, episode and step
    for value in (0.7, float("nan")):
        broken = [list(x) for x in logs[:10]]
        broken[4][4] = [value]
        out = str(tmp_path / f"lp{value}")
        offline_graph.write_episodes(out, bandit_episodes(broken), observation_space=OBS, action_space=ACT)
        error(
            lambda out=out: ev(policy(PI1), [out], method="wis"),
            "episode 'ep-0004', step t=0",
            "action_logp must be a finite log-probability",
        )
    error(
        lambda: offline_graph.encode_episode(
            [graph(2), graph(2)],
            [0],
            [1.0],
            terminated=True,
            truncated=False,
            episode_id="e",
            action_logp=[-0.1, -0.2],
        ),
        "episode 'e' action_logp must hold one log-probability per action (found 2 for 1 actions)",
    )
    # some episodes without action_logp: cloned, and the warning says how many
    out = str(tmp_path / "some")
    eps = bandit_episodes(logs[:10]) + bandit_episodes(
        [(i + 10, ns, a, r, None) for i, ns, a, r, _ in logs[:3]]
    )
    offline_graph.write_episodes(out, eps, observation_space=OBS, action_space=ACT)
    res = ev(policy(PI1), [out], method="wis", bc_epochs=1, q_model={"hidden": 8, "layers": 1})
    assert res["behaviour"] == "bc" and "action_logp missing in 3 of 13 logged episodes" in res["warnings"][0]
    error(
        lambda: ev(policy(PI1), [out], method="wis", behaviour="logged"), "found 3 of 13 episodes without it"
    )
    # converted rows without the final observation (converted before final_*): no FQE
    from offline_graph.cli import main

    assert main(["convert", "--input", path, "--output", str(tmp_path / "rows")]) == 0
    rows = pq.read_table(str(tmp_path / "rows"))
    old = rows.drop_columns([c for c in rows.column_names if c.startswith("final_")])
    assert (
        ev(policy(MU1), old, method="wis", bc_epochs=1, q_model={"hidden": 8, "layers": 1})["behaviour"]
        == "bc"
    )
    error(
        lambda: ev(policy(PI1), old, method="fqe"),
        "data for method 'fqe' must hold each episode's final observation",
    )
