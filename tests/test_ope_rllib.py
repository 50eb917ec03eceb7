"""RLlib's offline evaluation API runs our estimators on graph configs (GraphOPERunner)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

import offline_graph
from offline_graph.data.errors import ConfigError
from offline_graph.data.logged import held_out_episodes, load_logged
from offline_graph.data.reader import spec_from_spaces
from offline_graph.rllib.gnn_module import GNNModule
from offline_graph.rllib.ope_runner import GraphOPERunner
from tests.test_ope import SPACE, logged_episodes

ACT = gym.spaces.Discrete(2)


def bc_config(data: str, kind: str, **options):
    config = (
        BCConfig()
        .environment(observation_space=SPACE, action_space=ACT)
        .offline_data(input_=[data], input_read_episodes=True, dataset_num_iters_per_learner=2)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={"hidden": 8}))
        .training(train_batch_size_per_learner=16, gamma=0.5)
        .evaluation(offline_evaluation_interval=1, offline_evaluation_type=kind, num_offline_eval_runners=0)
        .debugging(seed=0)
    )
    return offline_graph.configure(config, seed=0, holdout=0.4, offline_evaluation=options)


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
    config = bc_config(path, "dr", epochs=2)
    settings = config.learner_config_dict["offline_graph"]["offline_evaluation"]
    assert settings == {"method": "dr", "epochs": 2}
    assert (
        offline_graph.configure(config).learner_config_dict["offline_graph"]["offline_evaluation"] == settings
    )
