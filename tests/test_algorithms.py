"""GraphBC / GraphMARWIL: configure picks them; get_module, checkpoints and set_state work
without EnvRunners; what a config that skipped configure gets.

The Ray tests share one 2-CPU session and train on the shipped ``sample_data/expert``.
"""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest
from ray.rllib.algorithms.bc import BC, BCConfig
from ray.rllib.algorithms.marwil import MARWIL, MARWILConfig

import offline_graph
from offline_graph import ConfigError, GraphBC, GraphMARWIL
from tests.test_prelearner import make_config as unconfigured_config
from tests.test_train_pipeline import eval_observations
from tests.test_train_pipeline import make_config as expert_config

ray = pytest.importorskip("ray")

EXPERT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_data", "expert")


# --------------------------------------------------------------------------- configure
def test_configure_sets_the_graph_algorithm_class(tmp_path):
    bc = offline_graph.configure(unconfigured_config(tmp_path, cls=BCConfig))
    marwil = offline_graph.configure(unconfigured_config(tmp_path, cls=MARWILConfig, beta=1.0))
    assert bc.algo_class is GraphBC and marwil.algo_class is GraphMARWIL
    assert issubclass(GraphBC, BC) and issubclass(GraphMARWIL, MARWIL)
    # configure again: already graph-aware, kept; so is a user's subclass of GraphBC.
    assert offline_graph.configure(bc).algo_class is GraphBC

    class MyGraphBC(GraphBC):
        pass

    mine = unconfigured_config(tmp_path)
    mine.algo_class = MyGraphBC
    assert offline_graph.configure(mine).algo_class is MyGraphBC


def bare_bc() -> BCConfig:
    """BC on the expert data with neither spaces nor an rl_module() call (2 updates a train())."""
    data = BCConfig().offline_data(input_=[EXPERT], input_read_episodes=True, dataset_num_iters_per_learner=2)
    return data.training(train_batch_size_per_learner=32)


def test_configure_gives_a_config_without_a_module_class_gnnmodule():
    """RLlib's default BC module cannot read graphs (ValueError "No default encoder config for
    obs space=Graph" at build_algo): configure sets GNNModule where no class is set, keeps
    the model_config of a spec that names none, and keeps a class of the user's. A config
    without any rl_module() call gets GNNModule too: test_get_module_checkpoint_and_set_state
    builds and trains one."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    class MyModule(offline_graph.GNNModule):
        pass

    spec_only = offline_graph.configure(
        bare_bc().rl_module(rl_module_spec=RLModuleSpec(model_config={"hidden": 8}))
    )
    assert spec_only.rl_module_spec.module_class is offline_graph.GNNModule
    assert spec_only.rl_module_spec.model_config["hidden"] == 8
    mine = offline_graph.configure(bare_bc().rl_module(rl_module_spec=RLModuleSpec(module_class=MyModule)))
    assert mine.rl_module_spec.module_class is MyModule
    assert offline_graph.configure(bare_bc()).rl_module_spec.module_class is offline_graph.GNNModule


def test_configure_refuses_rllibs_own_prelearner(tmp_path):
    """RLlib's OfflinePreLearner (as RLlib's docs set it) cannot decode graph episodes: refused
    with or without an offline_data_class of the user's (the check ran only with one before)."""
    from ray.rllib.offline.offline_data import OfflineData
    from ray.rllib.offline.offline_prelearner import OfflinePreLearner

    for data_class in (None, OfflineData):
        cfg = unconfigured_config(tmp_path).offline_data(
            prelearner_class=OfflinePreLearner, offline_data_class=data_class
        )
        with pytest.raises(
            ConfigError, match=r"must be GraphOfflinePreLearner or a subclass \(found 'OfflinePreLearner'\)"
        ):
            offline_graph.configure(cfg)


def test_configure_refuses_other_algorithms(tmp_path):
    from ray.rllib.algorithms.dqn import DQNConfig

    with pytest.raises(ConfigError) as err:
        offline_graph.configure(DQNConfig())
    assert str(err.value) == (
        "configure: config.algo_class must be BC, MARWIL, IQL, CQL or a subclass of "
        "offline_graph.GraphBC / GraphMARWIL / GraphIQL / GraphCQL (found DQN). "
        "offline_graph.configure takes BCConfig, MARWILConfig, IQLConfig, CQLConfig (offline) "
        "and PPOConfig (online, in a graph env)."
    )

    class MyBC(BC):  # its overrides would be lost if configure swapped in GraphBC
        pass

    cfg = unconfigured_config(tmp_path)
    cfg.algo_class = MyBC
    with pytest.raises(
        ConfigError,
        match=r"\(found MyBC\)\. Derive MyBC from offline_graph\.GraphBC, not BC, to keep its overrides\.",
    ):
        offline_graph.configure(cfg)


# --------------------------------------------------------------------------- with Ray


def logits(module, obs, edge_dim):
    import torch
    from ray.rllib.core.columns import Columns

    from offline_graph.rllib.evaluation.evaluate import obs_batch

    with torch.no_grad():
        return module.forward_inference(obs_batch(obs, edge_dim))[Columns.ACTION_DIST_INPUTS]


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.slow
def test_get_module_checkpoint_and_set_state(ray_session, tmp_path, monkeypatch):
    """A trained GraphBC (configure's GNNModule, no spaces, no rl_module() call), one
    Algorithm.from_checkpoint of it and a fresh (untrained) build for set_state: RLlib's Learner
    takes a state's weights only if they are newer than its own (weights_seq_no), so set_state
    of the trained state must go to an algorithm that never trained. The deprecated
    restore_algorithm is checked to hand the path to Algorithm.from_checkpoint and return its
    algorithm (was one more build of the same checkpoint)."""
    import torch
    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.core import DEFAULT_MODULE_ID

    from offline_graph import GNNModule, data_report
    from offline_graph.rllib.offline import accounting

    obs, edge_dim = eval_observations(8)
    # no spaces and no rl_module() call at all: configure's GNNModule is built and trains
    algo = offline_graph.configure(bare_bc()).build_algo()
    try:
        assert type(algo) is GraphBC
        # RLlib rebuilds algo.config from a state without algo_class; GraphBC puts it back.
        assert algo.config.algo_class is GraphBC
        assert algo.env_runner_group is None  # offline: what RLlib's own get_module needs
        assert algo.train()["training_iteration"] == 1

        # get_module: a CPU copy of the learner's module, same logits, the learner's untouched.
        learner_module = algo.learner_group._learner.module[DEFAULT_MODULE_ID]
        module = algo.get_module()
        assert type(module) is GNNModule and module is not learner_module
        assert {p.device.type for p in module.parameters()} == {"cpu"}
        expected = logits(learner_module, obs, edge_dim)
        assert expected.shape == (8, 4)
        assert torch.equal(logits(module, obs, edge_dim), expected)
        with torch.no_grad():
            for p in module.parameters():
                p.add_(1.0)
        assert torch.equal(logits(learner_module, obs, edge_dim), expected)
        assert algo.get_module("no_such_module") is None

        # Checkpoint -> Algorithm.from_checkpoint: a GraphBC with exactly the saved weights.
        saved = algo.get_module().get_state()
        ckpt = str(tmp_path / "ckpt")
        algo.save_to_path(ckpt)
        # (a local learner's state holds numpy views of its live tensors: copy it)
        state = copy.deepcopy(algo.get_state())
        report = data_report(algo.config)
        run = algo.config.learner_config_dict["offline_graph"]["stats_name"]
        assert run in accounting.open_runs()
    finally:
        algo.stop()
    # the run's accounting is closed: the stats actor forgets it, data_report still has it
    assert run not in accounting.open_runs()
    assert data_report(algo.config) == report
    # materialize_mapped_data: the first train() maps every one of the 120 expert episodes
    assert report["episodes_read"] == report["episodes_used"] == 120
    assert report["rejected_by_reason"] == {}

    algo2 = Algorithm.from_checkpoint(ckpt)
    try:
        assert type(algo2) is GraphBC and algo2.config.algo_class is GraphBC
        assert algo2.iteration == 1
        assert_same_state(algo2.get_module().get_state(), saved)
        # the old helper names still work, through the same paths, with a warning
        from offline_graph.rllib.evaluation.evaluate import learner_module, restore_algorithm

        with pytest.warns(DeprecationWarning, match=r"algo.get_module\(\)"):
            assert_same_state(learner_module(algo2).get_state(), saved)
        # restore_algorithm(path) is Algorithm.from_checkpoint(path), checked just above
        paths = []

        def from_checkpoint(cls, path, *args, **kwargs):
            paths.append((cls, path, args, kwargs))
            return algo2

        monkeypatch.setattr(Algorithm, "from_checkpoint", classmethod(from_checkpoint))
        with pytest.warns(DeprecationWarning, match="Algorithm.from_checkpoint"):
            algo4 = restore_algorithm(ckpt)
        monkeypatch.undo()
        assert paths == [(Algorithm, ckpt, (), {})] and algo4 is algo2
        assert type(algo4) is GraphBC
        assert_same_state(algo4.get_module().get_state(), saved)
    finally:
        algo2.stop()

    # set_state on a fresh (untrained) algorithm: it takes the trained weights (RLlib's
    # BC.set_state raises here, syncing them to EnvRunners that do not exist).
    algo3 = offline_graph.configure(bare_bc()).build_algo()
    try:
        fresh = algo3.get_module().get_state()
        assert not np.array_equal(fresh["_encoder.inp.weight"], saved["_encoder.inp.weight"])
        algo3.set_state(state)
        assert_same_state(algo3.get_module().get_state(), saved)
        assert algo3.iteration == 1
    finally:
        algo3.stop()


@pytest.mark.slow
def test_skipping_configure_fails_late(ray_session):
    """What the user sees when the config names GraphOfflinePreLearner but skipped configure
    (so the algorithm is RLlib's own BC, which runs none of offline_graph's checks). About 20 s
    on the busy 2-core machine: an algorithm build, and a train() whose prelearner actor
    imports RLlib before its constructor raises."""
    from ray.exceptions import ActorDiedError

    from offline_graph.data.errors import find_project_error

    # num_learners=0 and dataset_num_iters_per_learner unset: RLlib's own validate() refuses.
    config = expert_config("bc", 0, EXPERT, configured=False).offline_data(dataset_num_iters_per_learner=None)
    assert config.algo_class is BC
    with pytest.raises(ValueError) as err:
        config.build_algo()
    assert type(err.value) is ValueError
    assert "`dataset_num_iters_per_learner`) has to be defined!" in str(err.value)

    # With it set, build_algo() succeeds; the first train() starts the prelearner actors,
    # whose constructor raises our ConfigError: Ray reports it as an ActorDiedError.
    algo = expert_config("bc", 0, EXPERT, configured=False).build_algo()
    try:
        assert type(algo) is BC
        with pytest.raises(ActorDiedError) as died:
            algo.train()
    finally:
        algo.stop()
    found = find_project_error(died.value)
    assert type(found) is ConfigError
    assert str(found).startswith(
        "GraphOfflinePreLearner config: learner_config_dict['offline_graph'] must be set by "
        "offline_graph.configure(config) (found it missing); offline_data(iter_batches_kwargs="
    )
    assert "CPU requests must leave one CPU for Ray Data's read tasks: prelearner actors 2 x 1.0" in str(
        found
    )
