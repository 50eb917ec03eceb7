"""Memory modules (frame_stack / gru / node_gru) in RLlib's EnvRunner (GraphEnvRunner, as RLlib's
evaluation builds it): STATE_IN / STATE_OUT threaded through the connector pipelines, with the
ragged node_gru state, give at every step exactly the action-distribution inputs that the
stepwise path of evaluate_module (StepStates + greedy_actions) computes on the same
observations. Two sub-envs per runner, so states of different episodes share each batch; on
Recall-v0 a graph keeps its node count within an episode, so node_gru states carry over."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import offline_graph
from offline_graph.cli import record
from offline_graph.data.graphs.graph import space_sizes
from offline_graph.rllib.env.env_runner import GraphEnvRunner
from offline_graph.rllib.core.stepwise import StepStates

pytestmark = pytest.mark.slow

ENV = "offline_graph/Recall-v0"


@pytest.fixture(scope="module")
def recall_data(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("recall") / "expert")
    record.run(record.Config(output=out, env=ENV, policy="expert", episodes=4, seed=0, progress=False))
    return out


def runner_for(data: str, model_config: dict) -> GraphEnvRunner:
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    config = (
        BCConfig()
        .environment(ENV)
        .offline_data(input_=[data], input_read_episodes=True, dataset_num_iters_per_learner=2)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=offline_graph.GNNModule, model_config=model_config)
        )
        .env_runners(num_envs_per_env_runner=2)
        .evaluation(evaluation_interval=1, evaluation_num_env_runners=0)
        .debugging(seed=0)
    )
    config = offline_graph.configure(config, seed=0)
    return config.env_runner_cls(config=config.get_evaluation_config_object())


@pytest.mark.parametrize("memory", [{"memory": "gru"}, {"frame_stack": 3}, {"memory": "node_gru"}])
def test_runner_states_match_stepwise_evaluation(ray_session, recall_data, memory):
    from ray.rllib.core.columns import Columns

    runner = runner_for(recall_data, {"hidden": 16, "layers": 1, "max_seq_len": 8, **memory})
    try:
        episodes = runner.sample(num_episodes=6, explore=False)
        module = runner.module
        edge_dim = space_sizes(module.observation_space)[1]
        assert module.is_stateful() and len(episodes) >= 6
        steps = 0
        for ep in episodes:
            observations, carried = ep.get_observations(), None
            for t, action in enumerate(ep.get_actions()):
                theirs = np.asarray(ep.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS, t))
                ours, carried = logits_of(module, observations[t], edge_dim, carried)
                np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-5)
                assert int(action) == int(np.argmax(ours))  # greedy (explore=False)
                steps += 1
        assert steps > len(episodes)  # multi-step episodes: the state was carried
    finally:
        runner.stop()


def logits_of(module, obs, edge_dim, state):
    """One stepwise forward of ``obs`` with ``state`` (None: the initial state)."""
    from ray.rllib.core.columns import Columns

    from offline_graph.rllib.evaluation.acting import obs_batch

    states = StepStates(module)
    states.reset(0)
    if state is not None:
        states.states[0] = state
    batch = obs_batch([obs], edge_dim)
    batch[Columns.STATE_IN] = states.batch([0], [obs], torch.device("cpu"))
    with torch.no_grad():
        out = module.forward_inference(batch)
    states.update([0], [obs], out[Columns.STATE_OUT])
    return out[Columns.ACTION_DIST_INPUTS][0].numpy(), states.states[0]
