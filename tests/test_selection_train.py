"""Node / edge selection end to end: recording masks (any info key, user policies), MARWIL with
NodeAction and BC with EdgeAction (2 learners: tests/test_multi_agent.py), checkpoint round
trips, legal greedy actions."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")

B = 32
UPDATES = 2
ITERATIONS = 2
ENVS = {"node": "offline_graph/NextHop-v0", "edge": "offline_graph/GrowTree-v0"}


class RenamedMaskEnv(gym.Wrapper):
    """NextHop with its mask under ``info["mask"]`` (as some third-party packages name it)."""

    def __init__(self) -> None:
        super().__init__(gym.make("offline_graph/NextHop-v0"))

    @staticmethod
    def _rename(info: dict) -> dict:
        info = dict(info)
        info["mask"] = info.pop("action_mask")
        return info

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, self._rename(info)

    def step(self, action):
        obs, reward, term, trunc, info = self.env.step(action)
        return obs, reward, term, trunc, self._rename(info)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, str]:
    """Expert episodes of both tasks (~100-200 transitions each)."""
    from offline_graph.jobs.recording import plan_jobs, record

    out = {}
    for level, env in ENVS.items():
        path = str(tmp_path_factory.mktemp("sel") / level)
        jobs = plan_jobs(
            env=env,
            env_config=None,
            policy="expert",
            epsilon=0.0,
            seed=0,
            episodes=40 if level == "node" else 8,
            episodes_per_file=20,
            output=path,
        )
        list(record(jobs, show_progress=False))
        out[level] = path
    return out


def read_file(path: str, level: str):
    """The validated episodes of one episode file."""
    import pyarrow.parquet as pq

    from offline_graph.data.episodes.reader import read_episodes, spec_from_spaces
    from offline_graph.jobs.recording import make_env

    env = make_env(ENVS[level])
    spec = spec_from_spaces(env.observation_space, env.action_space)
    items = pq.read_table(path).column("item").to_pylist()
    return read_episodes(items, [path] * len(items), spec)


def test_recorded_masks_and_user_policy(tmp_path):
    """The mask under any info key becomes the observation's bool action_mask; a
    module:function policy records the same episodes as the env's named expert."""
    from offline_graph.jobs.recording import RecordJob, record_file

    named = str(tmp_path / "named.parquet")
    user = str(tmp_path / "user.parquet")
    renamed = str(tmp_path / "renamed.parquet")
    record_file(RecordJob(ENVS["node"], {}, "expert", 0.0, 5, 0, 3, named))
    record_file(
        RecordJob(ENVS["node"], {}, "offline_graph.env.selection_envs:next_hop_expert", 0.0, 5, 0, 3, user)
    )
    record_file(
        RecordJob(
            "tests.test_selection_train:RenamedMaskEnv", {}, "expert", 0.0, 5, 0, 3, renamed, mask_key="mask"
        )
    )
    by_file: dict[str, list] = {}
    for path in (named, user, renamed):
        for ep in read_file(path, "node"):
            by_file.setdefault(ep.id, []).append(ep)
    # 3 episodes per file, same ids (seed 5, episodes 0..2) in all three files
    assert sorted(by_file) == ["s5-e0000000", "s5-e0000001", "s5-e0000002"]
    for eps in by_file.values():
        assert len(eps) == 3
        first = eps[0]
        for other in eps[1:]:
            np.testing.assert_array_equal(other.actions, first.actions)
            np.testing.assert_array_equal(other.obs.node_mask, first.obs.node_mask)
        # every recorded action is allowed by its step's mask; one mask entry per node
        assert first.obs.node_mask.shape == (first.obs.x.shape[0],)
        starts = first.obs.node_ptr[:-1][: len(first.actions)]
        assert first.obs.node_mask[starts + first.actions].all()


def make_config(level: str, num_learners: int, path: str, algo: str = "bc"):
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.algorithms.marwil import MARWILConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import offline_graph
    from offline_graph import GNNModule, GraphOfflinePreLearner
    from offline_graph.jobs.recording import make_env

    env = make_env(ENVS[level])
    training = {"train_batch_size_per_learner": B, "lr": 1e-3}
    if algo == "marwil":
        training["beta"] = 1.0
    config = (
        (BCConfig if algo == "bc" else MARWILConfig)()
        .environment(observation_space=env.observation_space, action_space=env.action_space)
        .offline_data(
            input_=[path],
            input_read_episodes=True,
            prelearner_class=GraphOfflinePreLearner,
            dataset_num_iters_per_learner=UPDATES,
        )
        .training(**training)
        .learners(num_learners=num_learners)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={"hidden": 16, "layers": 2})
        )
        .debugging(seed=0)
    )
    return offline_graph.configure(config, seed=0), env


def eval_observations(env, n: int = 12):
    from offline_graph.data.graphs.graph import space_sizes
    from offline_graph.jobs.recording import observe

    _, edge_dim = space_sizes(env.observation_space)
    obs = []
    for i in range(n):
        o, info = env.reset(seed=2000 + i)
        obs.append(observe(o, info, edge_dim, "action_mask"))
    return obs, edge_dim


@pytest.mark.parametrize("level,algo_name", [("node", "marwil"), ("edge", "bc")])
def test_selection_trains_acts_and_restores(ray_session, data, tmp_path, level, algo_name):
    """One local-learner build per action type: MARWIL on node actions (its value head beside
    the node head; BC's loss is MARWIL's without it), BC on edge actions. The SelectionHead
    on 2 DDP learners (a different [B, M] layout on each, bit-identical weights after the
    updates): the NodeAction module "num" of tests/test_multi_agent.py."""
    from offline_graph import EdgeAction, NodeAction
    from offline_graph.rllib.evaluation.evaluate import greedy_actions, is_legal, restore_module

    config, env = make_config(level, 0, data[level], algo=algo_name)
    algo = config.build_algo()
    try:
        for _ in range(ITERATIONS):
            result = algo.train()
            mod = result["learners"]["default_policy"]
            assert math.isfinite(float(mod["policy_loss"]))
            if algo_name == "marwil":
                assert math.isfinite(float(mod["vf_loss"]))
            assert int(result["learners"]["__all_modules__"]["num_env_steps_trained"]) == UPDATES * B
        obs, edge_dim = eval_observations(env)
        module = algo.get_module()
        actions = greedy_actions(module, obs, edge_dim)
        assert all(is_legal(int(a), o, env.action_space) for a, o in zip(actions, obs))
        ckpt = str(tmp_path / "ckpt")
        algo.save_to_path(ckpt)
    finally:
        algo.stop()
    restored = restore_module(ckpt)
    assert type(restored.action_space) is (NodeAction if level == "node" else EdgeAction)
    assert restored.action_space == env.action_space
    np.testing.assert_array_equal(greedy_actions(restored, obs, edge_dim), actions)
    # one batched pass == one pass per graph (local indices, no cross-graph leakage)
    single = np.concatenate([greedy_actions(restored, [o], edge_dim) for o in obs])
    np.testing.assert_array_equal(single, actions)
    # the whole Algorithm through RLlib's Algorithm.from_checkpoint: the space survives
    from ray.rllib.algorithms.algorithm import Algorithm

    algo2 = Algorithm.from_checkpoint(ckpt)
    try:
        assert type(algo2.config.action_space) is type(env.action_space)
        module2 = algo2.get_module()
        assert module2.action_space == env.action_space
        np.testing.assert_array_equal(greedy_actions(module2, obs, edge_dim), actions)
    finally:
        algo2.stop()


def test_evaluate_cli_with_a_user_policy(tmp_path, capsys):
    """`offline-graph evaluate --policy module:function` on the node task: the expert function
    is legal everywhere, reaches every target, and scores 100 against the named baselines."""
    import json

    from offline_graph.cli import evaluate as evaluate_cli

    out = tmp_path / "eval.json"
    assert (
        evaluate_cli.main(
            [
                "--env",
                ENVS["node"],
                "--policy",
                "offline_graph.env.selection_envs:next_hop_expert",
                "--episodes",
                "6",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    assert res["module"]["illegal_actions"] == 0 and res["module"]["success_rate"] == 1.0
    assert res["module"]["returns"] == res["expert"]["returns"]  # same function, same episodes
    assert res["normalized_score"] == pytest.approx(100.0)
    assert res["random"]["mean_return"] < res["expert"]["mean_return"]
    assert "illegal actions 0/" in capsys.readouterr().out
