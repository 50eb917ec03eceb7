"""IQL / CQL through RLlib's own configs: ``IQLConfig`` / ``CQLConfig`` + ``offline_graph.configure``
-> GraphIQL / GraphCQL; training, get_module, greedy actions, checkpoints, RLlib EnvRunner
evaluation, and the configs refused with a ConfigError."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.cql import CQLConfig
from ray.rllib.algorithms.iql import IQLConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

import offline_graph
from offline_graph import ConfigError, GNNModule, GraphOfflinePreLearner, NodeAction
from offline_graph.data.graphs.space_text import graph_space
from offline_graph.env import STITCH_ID
from offline_graph.rllib.algorithms.offline_algorithms import _close_iterators
from offline_graph.rllib.ope.ope_runner import GraphOPERunner
from offline_graph.rllib.algorithms.value_algorithms import GraphCQL, GraphIQL

OBS = graph_space(7, 1)  # Stitch-v0: 5 flag features + 2 noise features, a constant edge feature
ACT = NodeAction(20)


@pytest.fixture(scope="module")
def stitch_logs(tmp_path_factory) -> str:
    from offline_graph.jobs.recording import plan_jobs, record

    out = str(tmp_path_factory.mktemp("stitch_logs"))
    jobs = plan_jobs(
        env=STITCH_ID,
        env_config={"hub_start_prob": 0.5},
        policy="stitch",
        epsilon=0.15,
        episodes=60,
        seed=0,
        output=out,
        episodes_per_file=30,
    )
    list(record(jobs, workers=1, show_progress=False))
    return out


def value_config(cls, data: str, learners: int = 0, **training):
    config = (
        cls()
        .environment(observation_space=OBS, action_space=ACT)
        .offline_data(
            input_=[data],
            input_read_episodes=True,
            prelearner_class=GraphOfflinePreLearner,
            dataset_num_iters_per_learner=2,
        )
        .learners(num_learners=learners)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={"hidden": 16}))
        .training(train_batch_size_per_learner=16, gamma=0.9, tau=0.5, **training)
        .debugging(seed=0)
    )
    return offline_graph.configure(config, seed=0)


FQE = {"n_boot": 20, "epochs": 1, "fqe_heads": 0, "q_model": {"hidden": 8, "layers": 1}}
"""configure's offline_evaluation options of the IQL build (small)."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "cls,algo_cls,training",
    [
        (IQLConfig, GraphIQL, {"beta": 3.0, "expectile": 0.8, "actor_lr": 1e-3, "critic_lr": 1e-3}),
        (CQLConfig, GraphCQL, {"min_q_weight": 1.0, "critic_lr": 1e-3}),
    ],
)
def test_rllib_config_trains_acts_and_restores(ray_session, stitch_logs, tmp_path, cls, algo_cls, training):
    """One build per algorithm. IQL also gets evaluation(offline_evaluation_type="fqe"), a type
    RLlib's validate does not know, set on the already configured config (with configure's
    offline_evaluation options): built as configure maps it, the reported value is our FQE of
    the trained module on every episode (holdout 0). The IQL case can take over 20 s: the
    FQE fit twice (RLlib's evaluation, then by hand) beside the build, training, 5 evaluation
    episodes and the checkpoint round trip, one build fewer than as two tests."""
    config = value_config(cls, stitch_logs, **training)
    if cls is IQLConfig:
        config = offline_graph.configure(config, seed=0, offline_evaluation=FQE)
        config.evaluation(offline_evaluation_interval=1, offline_evaluation_type="fqe")
    algo = config.build_algo()
    try:
        assert type(algo) is algo_cls
        result = algo.train()
        stats = result["learners"]["default_policy"]
        assert math.isfinite(float(stats["qf_loss"])) and math.isfinite(float(stats["total_loss"]))
        if cls is IQLConfig:
            assert algo.config.offline_eval_runner_class is GraphOPERunner
            ope = result["evaluation"]["offline_eval_runners"]["default_policy"]
            expected = offline_graph.estimate_value(
                algo.get_module(), stitch_logs, method="fqe", gamma=0.9, **FQE
            )
            assert ope["ope_episodes"] == expected["episodes"] == 60
            assert ope["ope_value"] == pytest.approx(expected["value"], abs=1e-9)
            assert ope["ope_ci_low"] == pytest.approx(expected["ci_low"], abs=1e-9)
        module = algo.get_module()
        assert isinstance(module, GNNModule)
        kind = "iql" if cls is IQLConfig else "cql"
        assert module.gnn_config["value_based"] == kind
        # RLlib's inference path: greedy actions are legal node indices of each step's graph
        res = offline_graph.evaluate_module(module, STITCH_ID, episodes=5, seed=3)
        assert res["illegal_actions"] == 0 and res["episodes"] == 5
        path = algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(path)
    try:
        assert type(restored) is algo_cls
        again = restored.get_module()
        for k, v in module.get_state().items():
            np.testing.assert_array_equal(np.asarray(again.get_state()[k]), np.asarray(v))
    finally:
        restored.stop()


@pytest.mark.slow
def test_iql_beta_above_one_two_ddp_learners_and_env_runner_evaluation(ray_session, stitch_logs):
    """One IQL algorithm (a build costs seconds): beta 10 (> 1) is kept, two DDP learners train,
    and RLlib's EnvRunner evaluation plays the IQL module on Stitch-v0. Over 20 s: its 2
    remote learner actors (~15 s on a 2-CPU machine)."""
    config = (
        IQLConfig()
        .environment(STITCH_ID)
        .offline_data(input_=[stitch_logs], input_read_episodes=True, dataset_num_iters_per_learner=2)
        .learners(num_learners=2)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={"hidden": 16}))
        .training(train_batch_size_per_learner=16, beta=10.0)
        .evaluation(evaluation_interval=1, evaluation_num_env_runners=0, evaluation_duration=6)
    )
    algo = offline_graph.configure(config, seed=0).build_algo()
    try:
        assert algo.config.beta == 10.0 and algo.config.num_learners == 2
        result = algo.train()
        assert math.isfinite(float(result["learners"]["default_policy"]["policy_loss"]))
        env_runners = result["evaluation"]["env_runners"]
        assert int(env_runners["num_episodes"]) >= 6
        # Stitch-v0 returns lie in {0, 0.25, 1} (or a small illegal-action penalty: never here)
        assert 0.0 <= float(env_runners["episode_return_mean"]) <= 1.0
        # what stop() runs first: each remote Learner's batch iterator is closed while Ray runs
        # (left open, its finalizer started a new local Ray in the Learner's exiting process)
        opened = algo.learner_group.foreach_learner(lambda learner: learner.iterator is not None)
        assert [r.get() for r in opened] == [True, True]
        _close_iterators(algo)
        closed = algo.learner_group.foreach_learner(lambda learner: learner.iterator is None)
        assert [r.get() for r in closed] == [True, True]
    finally:
        algo.stop()


def test_multi_agent_iql_is_refused_with_a_config_error(stitch_logs):
    config = (
        IQLConfig()
        .environment(observation_space=OBS, action_space=ACT)
        .offline_data(input_=[stitch_logs], input_read_episodes=True)
        .multi_agent(policies={"a"}, policy_mapping_fn=lambda aid, ep, **kw: "a")
        .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule))
    )
    with pytest.raises(ConfigError, match="multi_agent.*must not be set for IQL"):
        offline_graph.configure(config)


def test_gnn_module_refuses_memory_with_value_based() -> None:
    spec = RLModuleSpec(
        module_class=GNNModule,
        observation_space=OBS,
        action_space=ACT,
        model_config={"value_based": "iql", "memory": "gru"},
    )
    with pytest.raises(ConfigError, match="'memory', 'frame_stack' > 1 and 'value_head' must be unset"):
        spec.build()


def test_cql_module_acts_by_the_masked_argmax_of_q() -> None:
    spec = RLModuleSpec(
        module_class=GNNModule, observation_space=OBS, action_space=ACT, model_config={"value_based": "cql"}
    )
    module = spec.build()
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.normal(size=(5, 7)), dtype=torch.float32)
    obs = {
        "x": x,
        "edge_index": torch.tensor([[0, 1, 2], [1, 2, 3]]),
        "edge_attr": torch.ones(3, 1),
        "batch": torch.zeros(5, dtype=torch.long),
        "ptr": torch.tensor([0, 5]),
        "action_mask": torch.tensor([True, False, True, True, False]),
    }
    out = module.forward_inference({"obs": obs})
    q = out["action_dist_inputs"][0]
    enc = module._q.encoder(obs)
    raw = module._q.q_heads[0].choice.scores(enc, obs).detach()
    legal = [0, 2, 3]
    assert torch.allclose(q[legal], raw[legal])
    assert (q[[1, 4]] == torch.finfo(torch.float32).min).all()
    action = module.get_inference_action_dist_cls().from_logits(out["action_dist_inputs"])
    assert int(action.to_deterministic().sample()[0]) == legal[int(raw[legal].argmax())]


@pytest.mark.slow
def test_train_cli_iql_holdout_metrics_then_evaluate_cli_on_its_checkpoint(
    ray_session, stitch_logs, tmp_path
):
    """``offline-graph train --algo iql --holdout``: the held-out episodes are the documented
    hash's and never trained on; ``offline-graph evaluate`` on the checkpoint plays the same
    greedy episodes as train's own evaluation of the trained module."""
    from offline_graph.cli import evaluate, train
    from offline_graph.data.store.files import read_episode_table, scan_files
    from offline_graph.data.episodes.holdout import held_out
    from offline_graph.data.episodes.reader import read_episodes, spec_from_spaces

    episodes = []
    for path in scan_files(stitch_logs, "raise").files:
        _, table = read_episode_table(path)
        items = table.column("item").to_pylist()
        episodes += read_episodes(items, [path] * len(items), spec_from_spaces(OBS, ACT))
    held = held_out([ep.id for ep in episodes], 0.3, 4)
    held_steps = sum(len(ep) for ep, h in zip(episodes, held) if h)
    assert 0 < held.sum() < len(episodes)

    ckpt = str(tmp_path / "iql")
    argv = ["--algo", "iql", "--data", stitch_logs, "--checkpoint", ckpt, "--iterations", "1"]
    argv += ["--updates-per-iteration", "2", "--batch-size", "16", "--hidden", "16"]
    argv += ["--beta", "5", "--expectile", "0.7", "--holdout", "0.3", "--holdout-seed", "4"]
    argv += ["--env", STITCH_ID, "--eval-episodes", "6", "--eval-seed", "11"]
    summary = train.run(train.parse_args(argv))
    m, report = summary["offline_metrics"], summary["data"]["report"]
    assert (m["episodes"], m["transitions"]) == (int(held.sum()), held_steps)
    assert (report["episodes_held_out"], report["transitions_held_out"]) == (int(held.sum()), held_steps)
    assert m["action_agreement"] == m["agreeing"] / held_steps and m["mean_log_likelihood"] <= 0.0

    res = evaluate.run(evaluate.parse_args(["--checkpoint", ckpt, "--episodes", "6", "--seed", "11"]))
    trained = summary["evaluation"]["module"]
    assert res["module"]["returns"] == trained["returns"] and res["module"]["illegal_actions"] == 0
    assert res["normalized_score"] == pytest.approx(summary["normalized_score"])
