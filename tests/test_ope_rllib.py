"""RLlib's offline evaluation API runs our estimators on graph configs (GraphOPERunner)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

import offline_graph
from offline_graph.data.errors import ConfigError
from offline_graph.data.episodes.logged import held_out_episodes, load_logged
from offline_graph.data.episodes.reader import spec_from_spaces
from offline_graph.rllib.core.gnn_module import GNNModule
from offline_graph.rllib.ope.ope_runner import GraphOPERunner, late_offline_evaluation
from tests.test_ope import SPACE, logged_episodes

ACT = gym.spaces.Discrete(2)


def bc_config(data: str, kind: str, spaces=(SPACE, ACT), runners: int = 0, holdout: float = 0.4, **options):
    """A configured BC config on ``data`` with offline evaluation ``kind`` every iteration
    (``runners`` remote runners; gamma 0.5 with the toy spaces, 0.9 otherwise)."""
    toy = spaces == (SPACE, ACT)
    config = (
        BCConfig()
        .environment(observation_space=spaces[0], action_space=spaces[1])
        .offline_data(input_=[data], input_read_episodes=True, dataset_num_iters_per_learner=2)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={"hidden": 8 if toy else 16})
        )
        .training(train_batch_size_per_learner=16 if toy else 64, gamma=0.5 if toy else 0.9)
        .evaluation(
            offline_evaluation_interval=1, offline_evaluation_type=kind, num_offline_eval_runners=runners
        )
        .debugging(seed=0)
    )
    return offline_graph.configure(config, seed=0, holdout=holdout, offline_evaluation=options)


@pytest.mark.slow
def test_rllib_offline_evaluation_reports_our_estimate(ray_session, tmp_path) -> None:
    path, _ = logged_episodes(tmp_path / "logs.parquet")
    config = bc_config(path, "is", n_boot=30)  # RLlib's "is" runs our per-episode WIS
    assert (
        config.offline_eval_runner_class is GraphOPERunner and config.offline_evaluation_type == "eval_loss"
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        ope = result["evaluation"]["offline_eval_runners"]["default_policy"]
        module = algo.get_module()
        logged = load_logged(path, spec_from_spaces(SPACE, ACT))
        held = held_out_episodes(logged, 0.4, 0)
        expected = offline_graph.estimate_value(module, held, method="wis", gamma=0.5, n_boot=30)
        assert ope["ope_episodes"] == held.episodes == expected["episodes"] > 0
        assert ope["ope_value"] == pytest.approx(expected["value"], abs=1e-9)
        assert ope["ope_ci_low"] <= ope["ope_value"] <= ope["ope_ci_high"] and np.isfinite(ope["ope_ess"])
    finally:
        algo.stop()


def test_offline_evaluation_options_are_checked(tmp_path) -> None:
    path, _ = logged_episodes(tmp_path / "logs.parquet", episodes=4)
    with pytest.raises(ConfigError, match="must not set \\['gamma'\\]"):
        bc_config(path, "fqe", gamma=0.3)
    # a typo or a value out of range fails when the config is made, not at the first evaluation
    with pytest.raises(
        ConfigError, match=r"offline_evaluation keys must be estimate_value keywords \(found \['epoch'\]"
    ):
        bc_config(path, "fqe", epoch=2)
    with pytest.raises(ConfigError, match=r"must not set \['module_id'\]"):
        bc_config(path, "fqe", module_id="p0")
    with pytest.raises(ConfigError, match=r"configure: horizon must be an int >= 1 or None \(found 0\)"):
        bc_config(path, "fqe", horizon=0)
    config = bc_config(path, "dr", epochs=2)
    # GraphOPERunner reads its episodes itself: RLlib's evaluation data is left unmapped
    assert config.evaluation_config == {"materialize_mapped_data": False}
    theirs = BCConfig().evaluation(evaluation_config={"materialize_mapped_data": True, "explore": False})
    theirs.evaluation(offline_evaluation_interval=1, offline_evaluation_type="wis")
    kept = offline_graph.configure(theirs.offline_data(input_=[path], input_read_episodes=True))
    assert kept.evaluation_config == {"materialize_mapped_data": True, "explore": False}
    settings = config.learner_config_dict["offline_graph"]["offline_evaluation"]
    assert settings == {"method": "dr", "epochs": 2}
    assert (
        offline_graph.configure(config).learner_config_dict["offline_graph"]["offline_evaluation"] == settings
    )
    # options given before the type are kept for it; the type set after configure is mapped
    # when the algorithm is built, also from the dict a Tune trial gets
    late = bc_config(path, "eval_loss", epochs=3).evaluation(
        offline_evaluation_type="fqe", num_offline_eval_runners=1
    )
    small = late.map_batches_kwargs["num_cpus"] == 0.25  # configure's plan for a small machine (2 CPUs)
    assert late.num_cpus_per_offline_eval_runner == 1
    assert late.learner_config_dict["offline_graph"]["offline_evaluation"] == {"epochs": 3}
    as_dict = late.to_dict()
    late_offline_evaluation(as_dict)
    assert as_dict["offline_evaluation_type"] == "eval_loss"
    assert as_dict["offline_eval_runner_class"] is GraphOPERunner
    assert as_dict["learner_config_dict"]["offline_graph"]["offline_evaluation"] == {
        "method": "fqe",
        "epochs": 3,
    }
    late_offline_evaluation(late)
    assert (late.offline_evaluation_type, late.offline_eval_runner_class) == ("eval_loss", GraphOPERunner)
    assert late.num_cpus_per_offline_eval_runner == (0.25 if small else 1)  # the small plan's share
    assert late.learner_config_dict["offline_graph"]["offline_evaluation"] == {"method": "fqe", "epochs": 3}


MIXED = str(Path(__file__).resolve().parents[1] / "sample_data" / "mixed")
FQE_OPTIONS = {"epochs": 2, "n_boot": 50, "q_model": {"hidden": 16, "layers": 1}}  # cheap


@pytest.mark.slow
@pytest.mark.parametrize("kind, runners", [("fqe", 0), ("dr", 1)])
def test_fqe_and_dr_in_rllib_offline_evaluation_local_and_remote(ray_session, kind, runners) -> None:
    from offline_graph.env.making import make_env

    env = make_env("offline_graph/Graph-v0")
    obs_space, act_space = env.observation_space, env.action_space
    config = bc_config(MIXED, kind, (obs_space, act_space), runners, holdout=0.1, **FQE_OPTIONS)
    # 2 CPUs (ray_session): a remote runner of RLlib's 1 CPU left none for the reads (a hang)
    assert config.num_cpus_per_offline_eval_runner == (0.25 if runners else 1)
    algo = config.build_algo()
    try:
        result = algo.train()
        ope = result["evaluation"]["offline_eval_runners"]["default_policy"]
        keys = {"value", "ci_low", "ci_high", "episodes", "transitions", "fqe_loss"}
        keys |= {"ess", "clipped"} if kind == "dr" else set()
        assert set(ope) == {f"ope_{k}" for k in keys}
        # The same estimate by hand: the trained module, the held-out episodes, gamma, seed 0.
        held = held_out_episodes(load_logged(MIXED, spec_from_spaces(obs_space, act_space)), 0.1, 0)
        expected = offline_graph.estimate_value(
            algo.get_module(), held, method=kind, gamma=0.9, **FQE_OPTIONS
        )
        assert ope["ope_episodes"] == held.episodes == expected["episodes"] > 0
        assert ope["ope_transitions"] == expected["transitions"]
        # Same weights, data and seed, torch on one CPU thread: the FQE fit repeats bit for
        # bit, also in the remote runner's process (measured: difference 0.0 in both cases);
        # 1e-6 only allows for another float summation order (the interval is ~0.1 wide).
        for key in ("value", "ci_low", "ci_high", "fqe_loss"):
            assert ope[f"ope_{key}"] == pytest.approx(expected[key], abs=1e-6), key
        if runners:
            assert result["evaluation"]["num_healthy_offline_eval_runners"] == 1
        later = algo.train()  # training goes on, and so does the evaluation
        assert algo.iteration == 2 and np.isfinite(later["learners"]["default_policy"]["policy_loss"])
        assert np.isfinite(later["evaluation"]["offline_eval_runners"]["default_policy"]["ope_value"])
    finally:
        algo.stop()
