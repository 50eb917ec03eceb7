"""The prelearner's reading strategies (offline_graph.rllib.offline.reading), each on its own: which one
a config gets, what one call reads, accounts and emits."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pytest
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from offline_graph import GNNModule, GraphValidationError
from offline_graph.data.episodes.reader import spec_from_spaces
from offline_graph.rllib.offline.reading import (
    EpisodeTransitions,
    MemoryRuns,
    MultiAgentJointRows,
    RowTransitions,
    choose_reading,
)
from offline_graph.rllib.core.settings import GraphSettings
from tests.helpers import make_episode_item, two_episode_transitions, write_episode_file

F, D, K = 3, 2, 4
OBS = gym.spaces.Graph(
    node_space=gym.spaces.Box(-np.inf, np.inf, (F,), np.float32),
    edge_space=gym.spaces.Box(-np.inf, np.inf, (D,), np.float32),
)
SPEC = spec_from_spaces(OBS, gym.spaces.Discrete(K))
TOO_SHORT = make_episode_item(((2, 1),), [], [], episode_id="bad")


def config(batch: int = 4, episodes: bool = True) -> BCConfig:
    return (
        BCConfig()
        .environment(observation_space=OBS, action_space=gym.spaces.Discrete(K))
        .offline_data(input_=["unused"], input_read_episodes=episodes)
        .training(train_batch_size_per_learner=batch, gamma=0.5)
    )


def episode_rows() -> dict[str, np.ndarray]:
    """Two valid episodes (3 and 2 steps) and one without a step (rejected: ``length``)."""
    good = [
        make_episode_item(((3, 2), (4, 1), (2, 1), (3, 0)), [1, 2, 3], [1.0, 0.0, 2.0], episode_id="a"),
        make_episode_item(((2, 1), (2, 0), (5, 3)), [0, 1], [4.0, 4.0], episode_id="b", seed=1),
    ]
    return {"item": np.array(good + [TOO_SHORT], dtype=object)}


def test_choose_reading_picks_one_strategy_per_input_kind() -> None:
    plain = GraphSettings()
    assert type(choose_reading(config(), plain, SPEC)) is EpisodeTransitions
    assert type(choose_reading(config(episodes=False), plain, SPEC)) is RowTransitions
    runs = GraphSettings(seq_length=4, seq_context=1)
    assert type(choose_reading(config(), runs, SPEC)) is MemoryRuns
    assert type(choose_reading(config(episodes=False), runs, SPEC)) is MemoryRuns
    spec = MultiRLModuleSpec(
        rl_module_specs={
            "m": RLModuleSpec(
                module_class=GNNModule, observation_space=OBS, action_space=gym.spaces.Discrete(K)
            )
        }
    )
    ma = config().multi_agent(policies={"m"}, policy_mapping_fn=lambda aid, ep, **kw: "m")
    assert type(choose_reading(ma, plain, module_spec=spec)) is MultiAgentJointRows


def test_episodes_reads_accounts_and_samples_k_batches() -> None:
    reading = choose_reading(config(batch=4), GraphSettings(on_error="skip"), SPEC)
    assert reading.read(episode_rows()) == 5  # 3 + 2 transitions of the two valid episodes
    s = reading.stats
    assert (s.episodes_read, s.episodes_used, s.transitions_used) == (3, 2, 5)
    assert dict(s.rejected) == {"length": 1}
    assert reading.ready() and len(reading.buffer) == 5
    out = reading.rows(reading.sample(5))  # k = round(5 / 4) = 1 batch of exactly 4 rows
    assert out.num_rows == 4
    assert out.column_names == ["actions", "x", "edge_index", "edge_attr", "value_targets"]
    # value targets are the returns-to-go with gamma 0.5: a: 1 + 0.5*0 + 0.25*2 = 1.5, 1.0, 2.0;
    # b: 4 + 0.5*4 = 6.0, 4.0 (each sampled row is one of these, with its own action)
    pairs = {(a, v) for a, v in zip(out["actions"].to_pylist(), out["value_targets"].to_pylist())}
    assert pairs <= {(1, 1.5), (2, 1.0), (3, 2.0), (0, 6.0), (1, 4.0)}


def test_episodes_raise_mode_names_file_row_and_episode(tmp_path) -> None:
    reading = choose_reading(config(), GraphSettings(on_error="raise"), SPEC)
    rows = episode_rows()
    path = write_episode_file(tmp_path / "f.parquet", list(rows["item"]))
    with pytest.raises(GraphValidationError, match=r"f\.parquet, row 2, episode 'bad'"):
        reading.read(rows | {"path": np.array([path] * 3, dtype=object)})


def test_episodes_with_everything_rejected_emit_zero_rows_with_the_columns() -> None:
    reading = choose_reading(config(), GraphSettings(on_error="skip"), SPEC)
    only_bad = {"item": np.array([TOO_SHORT], dtype=object)}
    assert reading.read(only_bad) == 0 and not reading.ready()
    empty = reading.empty_table()
    assert empty.num_rows == 0
    assert set(empty.column_names) == {"actions", "x", "edge_index", "edge_attr", "value_targets"}


def converted_rows() -> pa.Table:
    """The two chain episodes of tests.helpers (A: 5 steps, B: 3) as converted rows."""
    return two_episode_transitions().to_arrow()


def test_rows_pass_through_without_bookkeeping_columns() -> None:
    reading = choose_reading(config(episodes=False), GraphSettings(), SPEC)
    table = converted_rows()
    assert reading.read(table) == 8 and reading.ready()
    out = reading.rows(reading.sample(8))
    assert "eps_id" in table.column_names and "eps_id" not in out.column_names
    assert out.num_rows == 8
    assert out["actions"].to_pylist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert out["x"].to_pylist() == table["x"].to_pylist()


def test_rows_drop_held_out_episodes_and_count_them() -> None:
    reading = choose_reading(config(episodes=False), GraphSettings(holdout=0.5, holdout_seed=3), SPEC)
    kept = reading.rows(reading.sample(reading.read(converted_rows())))
    s = reading.stats
    assert s.episodes_read == 2 and s.episodes_used + s.episodes_held_out == 2
    assert s.transitions_used == kept.num_rows
    assert s.transitions_used + s.transitions_held_out == 8
    # whole episodes only: 5 (A), 3 (B), both or none
    assert kept.num_rows in (0, 3, 5, 8)


def test_runs_from_converted_rows_rebuild_episodes_and_sample_k_batches() -> None:
    settings = GraphSettings(seq_length=2, seq_context=1)
    reading = choose_reading(config(batch=2, episodes=False), settings, SPEC)
    assert reading.read(converted_rows()) == 8
    assert len(reading.buffer) == 8
    out = reading.rows(reading.sample(8))
    # trained steps per run = min(2, 8 transitions / 2 episodes) = 2 -> k = round(8 / (2 * 2)) = 2
    assert out.num_rows == 4
    for steps, context in zip(out["actions"].to_pylist(), out["context"].to_pylist()):
        assert 1 <= len(steps) - context <= 2 and context <= 1
    assert reading.empty_table().column_names[-1] == "context"
