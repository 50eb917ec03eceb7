"""Online RL on graph envs through RLlib's own learner path: the graph-aware learner
connector (exact PyG offsets on hand-built episodes, GAE on the value head), minibatches
that re-batch graphs, PPO ``train()`` with 2 EnvRunners and with the local one (while
fine-tuning from a BC module's weights).

The learner tests build RLlib's learner in-process; the tests marked ``slow`` share one
2-CPU Ray session.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.evaluation.postprocessing import Postprocessing

import offline_graph
from offline_graph import ConfigError, GNNModule
from offline_graph.data.graphs.collate import collate
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.rllib.core.graph_minibatch import GraphMiniBatchIterator, select_graphs
from offline_graph.rllib.algorithms.online import configure_online, load_module_weights
from offline_graph.rllib.algorithms.ppo_learner import GraphPPOTorchLearner
from tests.helpers import make_graph

F, D = 3, 2
SPACE = gym.spaces.Graph(
    node_space=gym.spaces.Box(-np.inf, np.inf, (F,), np.float32),
    edge_space=gym.spaces.Box(-np.inf, np.inf, (D,), np.float32),
)
SMALL = {"hidden": 8, "layers": 1, "head_hidden": 8}


def graph_episode(sizes, seed, terminated=True) -> SingleAgentEpisode:
    graphs = [make_graph(n, e, F=F, D=D, seed=seed * 100 + i) for i, (n, e) in enumerate(sizes)]
    ep = SingleAgentEpisode(observation_space=None, action_space=gym.spaces.Discrete(4))
    ep.add_env_reset(observation=graphs[0], infos={})
    for t, g in enumerate(graphs[1:]):
        last = t == len(graphs) - 2
        ep.add_env_step(
            observation=g,
            action=t % 4,
            reward=1.0,
            infos={},
            terminated=last and terminated,
            truncated=last and not terminated,
            extra_model_outputs={
                Columns.ACTION_LOGP: np.float32(-1.386),
                Columns.ACTION_DIST_INPUTS: np.zeros(4, np.float32),
            },
        )
    return ep


def ppo_config() -> PPOConfig:
    return (
        PPOConfig()
        .environment(observation_space=SPACE, action_space=gym.spaces.Discrete(4))
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={**SMALL, "value_head": True})
        )
        .learners(learner_class=GraphPPOTorchLearner)
        .training(gamma=0.5, lambda_=1.0)
    )


def test_learner_connector_batches_graphs_with_exact_offsets_and_adds_gae():
    learner = ppo_config().build_learner()
    pieces = [type(p).__name__ for p in learner._learner_connector.connectors]
    assert "BatchIndividualItems" not in pieces and "LearnerBatchGraphObservations" in pieces
    assert pieces[0] == "AddOneTsToEpisodesAndTruncate" and pieces[-1] == "GeneralAdvantageEstimation"
    sizes_a, sizes_b = [(3, 2), (4, 0), (2, 1)], [(5, 6), (1, 0)]
    episodes = [graph_episode(sizes_a, 1), graph_episode(sizes_b, 2, terminated=False)]
    # rows: every step's observation plus the last one (AddOneTs' bootstrap row, loss_mask False)
    expected_graphs = [o for e in episodes for o in e.get_observations()]
    batch = learner._learner_connector(
        rl_module=learner.module, batch={}, episodes=episodes, shared_data={}, metrics=learner.metrics
    )["default_policy"]
    obs = batch[Columns.OBS]
    nodes, edges = [3, 4, 2, 5, 1], [2, 0, 1, 6, 0]
    assert obs["ptr"].tolist() == [0, 3, 7, 9, 14, 15]
    assert obs["batch"].tolist() == np.repeat(np.arange(5), nodes).tolist()
    want = collate(GraphColumns.from_graphs(expected_graphs, D, None))
    for key in ("x", "edge_index", "edge_attr"):
        np.testing.assert_array_equal(obs[key].numpy(), want[key])
    assert obs["edge_index"].shape == (2, sum(edges))
    assert batch[Columns.LOSS_MASK].tolist() == [True, True, False, True, False]
    assert batch[Columns.ACTIONS].shape == (5,)
    for col in (Postprocessing.ADVANTAGES, Postprocessing.VALUE_TARGETS):
        assert batch[col].shape == (5,) and torch.isfinite(batch[col]).all()
    values = learner.module["default_policy"].compute_values(batch).detach().numpy()
    # episode b is truncated: its target bootstraps from V(last obs); a is terminated.
    targets = batch[Postprocessing.VALUE_TARGETS].numpy()
    assert targets[1] == pytest.approx(1.0, abs=1e-5)
    assert targets[3] == pytest.approx(1.0 + 0.5 * values[4], abs=1e-5)


def test_minibatches_rebatch_graphs_like_collate():
    graphs = [
        make_graph(n, e, F=F, D=D, seed=i)
        for i, (n, e) in enumerate([(3, 2), (4, 0), (2, 3), (5, 6), (1, 0)])
    ]
    for g in graphs:
        g["action_mask"] = np.arange(g["x"].shape[0]) % 2 == 0
    full = {k: torch.as_tensor(v) for k, v in collate(GraphColumns.from_graphs(graphs, D, "node")).items()}
    idx = torch.tensor([3, 0, 4])
    got = select_graphs(full, idx, "node")
    want = collate(GraphColumns.from_graphs([graphs[i] for i in idx.tolist()], D, "node"))
    assert set(got) == set(want)
    for key, value in want.items():
        np.testing.assert_array_equal(got[key].numpy(), value)
    columns = {Columns.OBS: full, Columns.ACTIONS: torch.arange(5)}
    it = GraphMiniBatchIterator(
        {"default_policy": columns},
        num_epochs=2,
        minibatch_size=2,
        shuffle=True,
        seed=0,
        mask_levels={"default_policy": "node"},
    )
    seen = []
    for mb in it:
        sb = mb.policy_batches["default_policy"]
        assert len(sb) == sb[Columns.OBS]["ptr"].numel() - 1 == sb[Columns.ACTIONS].numel()
        seen.extend(sb[Columns.ACTIONS].tolist())
    assert sorted(seen) == sorted(list(range(5)) * 2)
    with pytest.raises(ConfigError, match="mask_level must be"):
        select_graphs(full, idx, None)


def test_configure_online_refuses_other_configs():
    with pytest.raises(ConfigError, match="must be a ray.rllib PPOConfig"):
        configure_online(BCConfig())
    with pytest.raises(ConfigError, match="config.env must be set"):
        configure_online(PPOConfig())
    with pytest.raises(ConfigError, match="GraphPPOTorchLearner or a subclass"):
        configure_online(PPOConfig().environment("offline_graph/Graph-v0").learners(learner_class=object))


def online_config(runners: int) -> PPOConfig:
    cfg = (
        PPOConfig()
        .environment("offline_graph/Graph-v0", env_config={"max_steps": 20})
        .env_runners(num_env_runners=runners, num_envs_per_env_runner=2)
        .training(train_batch_size_per_learner=200, minibatch_size=64, num_epochs=2)
        .rl_module(model_config=dict(SMALL))
    )
    # the one entry point: configure dispatches PPO configs to configure_online (the alias is
    # built by test_ppo_trains_node_and_edge_selection)
    return offline_graph.configure(cfg)


def check_result(result: dict) -> None:
    learner = result["learners"]["default_policy"]
    for key in ("policy_loss", "vf_loss", "entropy", "total_loss"):
        assert math.isfinite(float(learner[key])), key
    assert learner["num_module_steps_trained"] >= 200
    assert result["env_runners"]["num_env_steps_sampled"] >= 200


@pytest.mark.slow
def test_ppo_trains_gnn_module_on_graph_env_with_two_env_runners(ray_session):
    """2 remote EnvRunners sample, the learner trains, the new weights reach the runners for
    the second iteration. (0 EnvRunners, the local one: test_finetune_starts_from_bc_module_weights.)"""
    algo = online_config(2).build_algo()
    try:
        assert algo.env_runner_group.num_remote_env_runners() == 2
        for _ in range(2):
            check_result(algo.train())
    finally:
        algo.stop()


def test_selection_dist_inputs_are_padded_then_trimmed_per_minibatch():
    from offline_graph.rllib.core.graph_minibatch import select_transitions
    from offline_graph.rllib.algorithms.ppo_learner import pad_choices

    low = np.finfo(np.float32).min
    padded = pad_choices({("a",): [np.zeros(3), np.zeros(1)], ("b",): [np.zeros(2)]})
    assert padded.shape == (3, 3) and padded.dtype == np.float32
    assert (padded[1, 1:] == low).all() and (padded[2, 2] == low) and padded[0].max() == 0
    graphs = [make_graph(n, 1, F=F, D=D, seed=n) for n in (3, 1, 2)]
    obs = {k: torch.as_tensor(v) for k, v in collate(GraphColumns.from_graphs(graphs, D, None)).items()}
    columns = {Columns.OBS: obs, Columns.ACTION_DIST_INPUTS: torch.as_tensor(padded)}
    got = select_transitions(columns, torch.tensor([2, 1]), "node")
    assert got[Columns.ACTION_DIST_INPUTS].shape == (2, 2)  # the most nodes of graphs 2, 1


@pytest.mark.slow
@pytest.mark.parametrize("env", ["offline_graph/NextHop-v0", "offline_graph/GrowTree-v0"])
def test_ppo_trains_node_and_edge_selection(ray_session, env):
    cfg = (
        PPOConfig()
        .environment(env)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
        .training(train_batch_size_per_learner=200, minibatch_size=64, num_epochs=2)
        .rl_module(model_config=dict(SMALL))
    )
    algo = configure_online(cfg).build_algo()
    try:
        check_result(algo.train())
    finally:
        algo.stop()


@pytest.mark.slow
def test_finetune_starts_from_bc_module_weights(ray_session):
    env = gym.make("offline_graph/Graph-v0")
    bc_module = RLModuleSpec(
        module_class=GNNModule,
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config={**SMALL, "value_head": False},
    ).build()
    algo = online_config(0).build_algo()
    try:
        assert algo.env_runner_group.num_remote_env_runners() == 0  # the local EnvRunner samples
        missing = load_module_weights(algo, bc_module)
        assert missing and all(name.startswith("_vf_head") for name in missing)
        runner_module = algo.env_runner_group.local_env_runner.module
        for name, value in bc_module.state_dict().items():
            torch.testing.assert_close(runner_module.state_dict()[name], value)
        for _ in range(2):
            check_result(algo.train())
    finally:
        algo.stop()


def test_padded_box_env_of_the_sampling_bench_holds_the_whole_graph():
    from offline_graph.bench.case_sampling import PaddedGraphEnv
    from offline_graph.env import GraphEnv

    padded, plain = PaddedGraphEnv(), GraphEnv()
    obs, _ = padded.reset(seed=3)
    graph, _ = plain.reset(seed=3)
    n, e, f = len(graph.nodes), len(graph.edge_links), padded.f
    assert obs.shape == padded.observation_space.shape and obs in padded.observation_space
    np.testing.assert_array_equal(obs[: n * f].reshape(n, f), graph.nodes)
    assert obs[padded.n_max * f : padded.n_max * (f + 1)].sum() == n
    base = padded.n_max * (f + 1)
    np.testing.assert_array_equal(obs[base : base + 2 * e].reshape(e, 2), graph.edge_links)


def test_finetune_cli_arguments(tmp_path):
    from offline_graph.cli.finetune import parse_args

    (tmp_path / "summary.json").write_text('{"config": {"env_config": {"max_steps": 9}}}')
    cfg = parse_args(["--checkpoint", str(tmp_path), "--iterations", "3"])
    assert (cfg.algo, cfg.iterations, cfg.env_config) == ("ppo", 3, {"max_steps": 9})
    with pytest.raises(SystemExit):
        parse_args(["--checkpoint", str(tmp_path), "--algo", "appo"])
    with pytest.raises(SystemExit):
        parse_args(["--checkpoint", str(tmp_path / "missing")])


def test_configure_is_the_one_entry_point_for_ppo_too():
    import offline_graph
    from offline_graph.rllib.env.env_runner import GraphEnvRunner

    config = offline_graph.configure(PPOConfig().environment("offline_graph/Graph-v0"))
    assert config.learner_class is GraphPPOTorchLearner
    assert config.env_runner_cls is GraphEnvRunner
    assert config.rl_module_spec.module_class is GNNModule
    # the same as the alias configure_online (kept for existing code)
    alias = configure_online(PPOConfig().environment("offline_graph/Graph-v0"))
    assert (alias.learner_class, alias.env_runner_cls) == (config.learner_class, config.env_runner_cls)
    with pytest.raises(ConfigError, match="config.env must be set"):
        offline_graph.configure(PPOConfig())
