"""GraphOfflinePreLearner in-process: exact batch sizes, user connector pieces, errors."""

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pytest
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.algorithms.marwil import MARWILConfig
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

import offline_graph
from offline_graph import ConfigError, GNNModule, GraphOfflinePreLearner, GraphValidationError
from offline_graph.rllib.offline.episodes import encode_episode

F, D, K = 3, 1, 2
OBS_SPACE = gym.spaces.Graph(
    node_space=gym.spaces.Box(-np.inf, np.inf, (F,), np.float32),
    edge_space=gym.spaces.Box(-np.inf, np.inf, (D,), np.float32),
)
ACT_SPACE = gym.spaces.Discrete(K)


def graph(n, e, rng):
    return {
        "x": rng.normal(size=(n, F)).astype(np.float32),
        "edge_index": rng.integers(0, n, (2, e)),
        "edge_attr": rng.normal(size=(e, D)).astype(np.float32),
    }


def items(num_episodes, length, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(num_episodes):
        obs = [graph(int(rng.integers(1, 6)), int(rng.integers(0, 5)), rng) for _ in range(length + 1)]
        out.append(
            encode_episode(
                obs,
                [i % K] * length,
                [1.0] * length,
                terminated=True,
                truncated=False,
                episode_id=f"ep{seed}-{i}",
            )
        )
    return out


def make_config(tmp_path, cls=BCConfig, batch=8, **kw):
    config = (
        cls()
        .environment(observation_space=OBS_SPACE, action_space=ACT_SPACE)
        .offline_data(
            input_=[str(tmp_path)], input_read_episodes=True, prelearner_class=GraphOfflinePreLearner
        )
        .training(train_batch_size_per_learner=batch, **kw)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={"hidden": 8, "layers": 1})
        )
    )
    return config


def build(config):
    return GraphOfflinePreLearner(config=config, spaces=(OBS_SPACE, ACT_SPACE))


def test_emits_exact_multiples_of_the_batch_size(tmp_path):
    pre = build(offline_graph.configure(make_config(tmp_path, batch=8)))
    # 4 episodes x 6 steps = 24 new transitions -> round(24/8) = 3 batches of exactly 8 rows.
    out = pre({"item": np.array(items(4, 6), dtype=object)})
    assert isinstance(out, pa.Table)
    assert out.num_rows == 24
    assert out.column_names == ["actions", "x", "edge_index", "edge_attr", "value_targets"]
    # 1 episode x 2 steps: fewer than a batch still yields one full batch from the buffer.
    out2 = pre({"item": np.array(items(1, 2, seed=1), dtype=object)})
    assert out2.num_rows == 8
    assert pre.stats.episodes_used == 5 and pre.stats.transitions_used == 26


def test_unconfigured_config_names_every_missing_setting_in_the_prelearner(tmp_path):
    # Where a stock BC / MARWIL (configure skipped) first runs offline_graph code.
    with pytest.raises(ConfigError) as err:
        build(make_config(tmp_path))
    msg = str(err.value)
    assert msg.startswith(
        "GraphOfflinePreLearner config: learner_config_dict['offline_graph'] "
        "must be set by offline_graph.configure(config) (found it missing); "
    )
    for part in (
        "GraphCollateFn() (found None)",
        "dataset_num_iters_per_learner=...) must be an int >= 2 with num_learners=0, "
        "or >= 1 with remote learners (found None)",
        "`config = offline_graph.configure(config)`",
    ):
        assert part in msg, part


def test_configure_names_conflicting_settings(tmp_path):
    cfg = make_config(tmp_path).offline_data(
        dataset_num_iters_per_learner=1, iter_batches_kwargs={"collate_fn": object()}
    )
    with pytest.raises(ConfigError) as err:
        offline_graph.configure(cfg)
    msg = str(err.value)
    assert "dataset_num_iters_per_learner" in msg and "found 1" in msg
    assert "collate_fn" in msg and "GraphCollateFn" in msg


def test_configure_sets_value_head_only_for_marwil(tmp_path):
    bc = offline_graph.configure(make_config(tmp_path))
    marwil = offline_graph.configure(make_config(tmp_path, cls=MARWILConfig, beta=1.0))
    assert bc._rl_module_spec.model_config["value_head"] is False
    assert marwil._rl_module_spec.model_config["value_head"] is True


class DoubleValueTargets(ConnectorV2):
    """A user's learner piece: works on the graph batch written by the prelearner."""

    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        mb = batch["default_policy"]
        mb["value_targets"] = mb["value_targets"] * 2.0
        mb["weights"] = np.full(len(mb["actions"]), 0.5, np.float32)
        return batch


def test_user_connector_pieces_run(tmp_path):
    cfg = make_config(
        tmp_path,
        cls=MARWILConfig,
        batch=4,
        gamma=1.0,
        learner_connector=lambda obs, act: DoubleValueTargets(),
    )
    pre = build(offline_graph.configure(cfg))
    out = pre({"item": np.array(items(1, 4), dtype=object)})
    assert out.num_rows == 4
    # rewards are all 1 over 4 steps, gamma 1: returns-to-go in {4,3,2,1}, doubled by the piece
    assert set(out.column("value_targets").to_pylist()) <= {8.0, 6.0, 4.0, 2.0}
    assert out.column("weights").to_pylist() == [0.5] * 4


def test_raise_and_skip_modes(tmp_path):
    good = items(2, 3)
    rng = np.random.default_rng(5)
    obs = [graph(2, 1, rng) for _ in range(4)]
    obs[2]["edge_index"] = np.array([[0], [7]])  # node 7 of a 2-node graph
    bad = encode_episode(
        obs, [0, 1, 0], [0.0, 0.0, 0.0], terminated=True, truncated=False, episode_id="broken"
    )
    batch = {
        "item": np.array([good[0], bad, good[1]], dtype=object),
        "path": np.array(["f.parquet"] * 3, dtype=object),
    }
    pre = build(offline_graph.configure(make_config(tmp_path, batch=3)))
    with pytest.raises(GraphValidationError) as err:
        pre(batch)
    msg = str(err.value)
    for part in ("file f.parquet", "episode 'broken'", "step t=2", "edge_index", "0..N-1", "N=2", "[0, 7]"):
        assert part in msg
    pre = build(offline_graph.configure(make_config(tmp_path, batch=3), on_error="skip"))
    out = pre(batch)
    assert out.num_rows == 6
    assert pre.stats.as_dict()["rejected_by_reason"] == {"edge_index_range": 1}
    assert pre.stats.episodes_read == 3 and pre.stats.episodes_used == 2


def test_converted_rows_pass_through(tmp_path):
    from offline_graph.data.episodes.reader import read_episodes, spec_from_spaces
    from offline_graph.data.learning.transitions import Transitions

    eps = read_episodes(items(2, 3), [None, None], spec_from_spaces(OBS_SPACE, ACT_SPACE))
    table = Transitions.from_episodes(eps, 0.99).to_arrow()
    cfg = make_config(tmp_path, batch=3).offline_data(input_read_episodes=False)
    cfg.input_ = []  # no files to inspect; rows are passed in directly
    pre = build(offline_graph.configure(cfg))
    out = pre(table)
    assert out.column_names == ["actions", "x", "edge_index", "edge_attr", "value_targets"]
    assert out.column("x").equals(table.column("x"))


def test_second_epoch_is_not_a_duplicate_but_a_changed_episode_is(tmp_path):
    pre = build(offline_graph.configure(make_config(tmp_path, batch=4)))
    rows = items(2, 2)
    assert pre({"item": np.array(rows, dtype=object)}).num_rows == 4
    # The same rows again (the next epoch over the data set): accepted, counted as read again.
    assert pre({"item": np.array(rows, dtype=object)}).num_rows == 4
    assert pre.stats.episodes_read == 4 and pre.stats.episodes_used == 4
    # A different episode under an id seen before is a real duplicate.
    rng = np.random.default_rng(1)
    obs = [graph(2, 1, rng) for _ in range(3)]
    changed = encode_episode(obs, [0, 1], [0.0, 0.0], terminated=True, truncated=False, episode_id="ep0-0")
    with pytest.raises(offline_graph.OfflineGraphError, match="episode 'ep0-0'.*must be unique"):
        pre({"item": np.array([changed], dtype=object)})


def test_graph_algorithm_build_names_every_missing_setting(tmp_path):
    """GraphBC's setup runs the config check before RLlib sets anything up (no Ray needed)."""
    from offline_graph import GraphBC
    from offline_graph.rllib.offline.checks import graph_config_problems

    # algo_class GraphBC without configure (dataset_num_iters_per_learner=1: RLlib's own
    # validate() lets it pass, ours does not).
    cfg = make_config(tmp_path).learners(num_learners=0).offline_data(dataset_num_iters_per_learner=1)
    cfg.algo_class = GraphBC
    with pytest.raises(ConfigError) as err:
        cfg.build_algo()
    msg = str(err.value)
    for part in (
        "learner_config_dict['offline_graph'] must be set",
        "GraphCollateFn() (found None)",
        "dataset_num_iters_per_learner=...) must be an int >= 2 with num_learners=0, "
        "or >= 1 with remote learners (found 1)",
        "offline_graph.configure(config)",
    ):
        assert part in msg, part
    # A configured config passes the same check; changing a setting after configure fails it.
    configured = offline_graph.configure(make_config(tmp_path))
    assert configured.algo_class is GraphBC
    assert graph_config_problems(configured) == []
    configured.offline_data(iter_batches_kwargs={"drop_last": True})
    with pytest.raises(ConfigError) as err:
        configured.build_algo()
    assert str(err.value).startswith(
        "GraphOfflinePreLearner config: offline_data(iter_batches_kwargs={'collate_fn': ...}) "
        "must be offline_graph.GraphCollateFn() (found None): the stock collate cannot batch "
        "ragged graph columns. Call `config = offline_graph.configure(config)`"
    )


def test_marwil_gamma_must_match_the_converted_rows(tmp_path):
    import pyarrow.parquet as pq

    from offline_graph.data.store.format import make_metadata
    from offline_graph.data.episodes.reader import read_episodes, spec_from_spaces
    from offline_graph.data.learning.transitions import Transitions

    eps = read_episodes(items(1, 2), [None], spec_from_spaces(OBS_SPACE, ACT_SPACE))
    table = Transitions.from_episodes(eps, 0.5).to_arrow()
    pq.write_table(
        table.replace_schema_metadata(make_metadata("transitions", gamma=0.5)), tmp_path / "rows.parquet"
    )
    cfg = make_config(tmp_path, cls=MARWILConfig, gamma=0.99).offline_data(input_read_episodes=False)
    with pytest.raises(ConfigError, match=r"gamma the rows were converted with, 0.5 \(found 0.99\)"):
        offline_graph.configure(cfg)
    ok = make_config(tmp_path, cls=MARWILConfig, gamma=0.5).offline_data(input_read_episodes=False)
    assert offline_graph.configure(ok).input_read_episodes is False
