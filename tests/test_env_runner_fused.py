"""GraphEnvRunner's fused connector pipelines (:mod:`offline_graph.rllib.env.env_to_module`,
:mod:`offline_graph.rllib.env.module_to_env`) record exactly what the pieces they stand for
record, one by one; user pieces keep the pipelines as they are. RLlib in-process, no Ray."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

from offline_graph import GNNModule, NodeAction
from offline_graph.rllib.env.env_connectors import graph_env_runner
from offline_graph.rllib.env.env_runner import GraphEnvRunner
from offline_graph.rllib.env.env_setup import configure_env
from tests.test_env_runner import SPACE, configured_runner, runner_config


class StockPiecesRunner(GraphEnvRunner):
    """GraphEnvRunner with its edited pipelines run piece by piece (not fused)."""

    def __init__(self, *, config, **kwargs):
        SingleAgentEnvRunner.__init__(self, config=config, **kwargs)
        graph_env_runner(self)
        self.module.train()  # as RLlib leaves it (GraphEnvRunner: eval mode)


def recorded(episode) -> dict:
    """What an episode records (its id aside)."""
    extra = {key: episode.get_extra_model_outputs(key) for key in episode.extra_model_outputs}
    return {
        "obs": episode.get_observations(),
        "infos": episode.get_infos(),
        "actions": episode.get_actions(),
        "rewards": episode.get_rewards(),
        "extra": extra,
        "end": (episode.t_started, episode.is_terminated, episode.is_truncated),
    }


def assert_identical(a, b, where="") -> None:
    """Equal values, types, dtypes and shapes, all the way down."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b), (where, list(a), list(b))
        for key in a:
            assert_identical(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (where, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert_identical(list(a), list(b), where)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert (a.dtype, np.shape(a)) == (b.dtype, np.shape(b)), where
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, (where, a, b)


@pytest.mark.parametrize(
    ("env", "model"),
    [
        ("offline_graph/Graph-v0", {"hidden": 8}),  # Discrete
        ("offline_graph/NextHop-v0", {"hidden": 8}),  # node selection with masks
        ("offline_graph/Channel-v0", {"hidden": 8}),  # Dict observations with graph-level parts
        ("offline_graph/Recall-v0", {"hidden": 8, "layers": 1, "max_seq_len": 4, "memory": "node_gru"}),
    ],
)
def test_fused_pipelines_record_what_the_pieces_record(env, model):
    """The runner's pipelines (default pieces fused) against the same pieces one by one: the same
    episodes, greedy and exploring, by timesteps and by episodes."""
    config = runner_config(env, 3).rl_module(
        rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config=model)
    )
    configure_env(config)
    fused, stock = GraphEnvRunner(config=config), StockPiecesRunner(config=config)
    try:
        assert [type(p).__name__ for p in fused._env_to_module.connectors] == ["GraphEnvToModule"]
        assert [type(p).__name__ for p in fused._module_to_env.connectors] == ["GraphModuleToEnv"]
        assert not fused.module.training  # left in eval mode: forward_inference does not switch back
        for i, call in enumerate(
            [{"num_timesteps": 25, "explore": False}, {"num_timesteps": 15, "explore": True}]
            + [{"num_timesteps": 10, "explore": False}, {"num_episodes": 3, "explore": False}]
        ):
            sampled = []
            for runner in (fused, stock):
                torch.manual_seed(i)  # exploring draws from torch's generator
                sampled.append([recorded(ep) for ep in runner.sample(**call)])
            assert_identical(*sampled, where=str(call))
    finally:
        fused.stop()
        stock.stop()


def test_user_pieces_keep_the_pipelines_piece_by_piece():
    from ray.rllib.connectors.connector_v2 import ConnectorV2

    class Nothing(ConnectorV2):
        def __call__(self, *, batch, **kwargs):
            return batch

    config = runner_config("offline_graph/Graph-v0", 2).env_runners(
        env_to_module_connector=lambda env, spaces, device: [Nothing()],
        module_to_env_connector=lambda env, spaces: [Nothing()],
    )
    runner = configured_runner(config)
    try:
        e2m = [type(p).__name__ for p in runner._env_to_module.connectors]
        m2e = [type(p).__name__ for p in runner._module_to_env.connectors]
        assert e2m[:2] == ["GraphObservationsToDicts", "Nothing"] and "BatchGraphObservations" in e2m
        assert "Nothing" in m2e and "GetActions" in m2e and "GraphModuleToEnv" not in m2e
        assert sum(len(ep) for ep in runner.sample(num_timesteps=8, explore=False)) >= 8
    finally:
        runner.stop()


@pytest.mark.parametrize("space", [gym.spaces.Discrete(4), NodeAction(8)])
def test_greedy_shortcut_is_the_distributions_mode(space):
    """``GetActions`` without building the distribution: its deterministic sample and logp."""
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from offline_graph.rllib.env.module_to_env import _greedy_actions, argmax_is_greedy

    module = RLModuleSpec(
        module_class=GNNModule, observation_space=SPACE, action_space=space, model_config={"hidden": 8}
    ).build()
    cls = module.get_inference_action_dist_cls()
    assert argmax_is_greedy(cls)
    logits = torch.randn(5, 4)  # 5 rows of 4 actions / choices
    logits[1, 0] = torch.finfo(torch.float32).min  # a masked choice
    dist = cls.from_logits(logits).to_deterministic()
    want = dist.sample()
    batch = {Columns.ACTION_DIST_INPUTS: logits}
    assert _greedy_actions(module, batch, [SingleAgentEpisode()], explore=False)
    for got, expected in ((batch[Columns.ACTIONS], want), (batch[Columns.ACTION_LOGP], dist.logp(want))):
        assert got.dtype == expected.dtype and torch.equal(got, expected)
    assert not _greedy_actions(module, {Columns.ACTION_DIST_INPUTS: logits}, [SingleAgentEpisode()], True)

    class OwnMode(TorchCategorical):
        def to_deterministic(self):
            return super().to_deterministic()

    assert not argmax_is_greedy(OwnMode)


def test_cpu_tensors_are_what_numpy_to_tensor_makes():
    from ray.rllib.connectors.common.numpy_to_tensor import NumpyToTensor
    from ray.rllib.core.columns import Columns

    from offline_graph.rllib.env.env_to_module import _cpu_tensors

    module = RLModuleSpec(
        module_class=GNNModule,
        observation_space=SPACE,
        action_space=NodeAction(8),
        model_config={"hidden": 8},
    ).build()
    obs = {
        "x": np.arange(6, dtype=np.float32).reshape(3, 2),
        "edge_index": np.array([[0, 2], [1, 0]]),
        "edge_attr": np.array([[0.5], [1.5]]),  # float64: made float32
        "action_mask": np.array([True, False, True]),
    }
    piece = NumpyToTensor()
    ours = _cpu_tensors(piece, module, obs)
    theirs = piece(rl_module=module, batch={Columns.OBS: dict(obs)}, episodes=[])[Columns.OBS]
    assert ours is not None and list(ours) == list(theirs)
    for key in obs:
        assert ours[key].dtype == theirs[key].dtype and torch.equal(ours[key], theirs[key]), key
    assert _cpu_tensors(NumpyToTensor(device="meta"), module, obs) is None  # not the CPU: the piece


def test_episode_callbacks_still_run_when_registered():
    """The runner skips only episode callbacks nothing is registered for."""
    from ray.rllib.callbacks.callbacks import RLlibCallback

    calls = {"object": 0, "function": 0, "start": 0}

    class Counting(RLlibCallback):
        def on_episode_step(self, **kwargs):
            calls["object"] += 1

    def started(**kwargs):
        calls["start"] += 1

    def stepped(**kwargs):
        calls["function"] += 1

    config = runner_config("offline_graph/Graph-v0", 2).callbacks(
        callbacks_class=Counting, on_episode_step=stepped, on_episode_start=started
    )
    runner = configured_runner(config)
    try:
        episodes = runner.sample(num_timesteps=20, explore=False)
    finally:
        runner.stop()
    steps = sum(len(ep) for ep in episodes)
    assert calls["object"] == calls["function"] == steps  # one per env step
    assert calls["start"] == len({ep.id_ for ep in episodes})  # one per episode begun


def test_gnn_module_acts_in_eval_mode_without_the_mode_walk():
    """GNNModule's forward_inference / forward_exploration: in eval mode, no ``train()`` /
    ``eval()`` call (the walk over submodules), the same outputs as from train mode, where
    TorchRLModule's switch is kept (eval for the call, train again after it)."""
    from ray.rllib.core.columns import Columns

    from offline_graph.env import GraphEnv
    from offline_graph.rllib.evaluation.acting import obs_batch
    from offline_graph.data.graphs.spaces import selection_level
    from offline_graph.data.graphs.graph import graph_to_dict

    env = GraphEnv()
    env.reset(seed=0)
    module = RLModuleSpec(
        module_class=GNNModule,
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config={"hidden": 8},
    ).build()
    graphs = [graph_to_dict(env.step(0)[0], env.edge_dim) for _ in range(3)]
    batch = obs_batch(graphs, env.edge_dim, None, selection_level(env.action_space))
    calls: list[str] = []
    for name in ("train", "eval"):
        method = getattr(module, name)
        setattr(module, name, lambda *a, _m=method, _n=name: (calls.append(_n), _m(*a))[1])
    module.eval()
    calls.clear()
    for forward in (module.forward_inference, module.forward_exploration):
        module.eval()
        calls.clear()
        quiet = forward(batch)[Columns.ACTION_DIST_INPUTS]
        assert calls == [] and not module.training
        module.train()
        calls.clear()
        switched = forward(batch)[Columns.ACTION_DIST_INPUTS]
        assert calls == ["eval", "train", "train"] and module.training  # eval() is train(False)
        assert torch.equal(quiet, switched)
