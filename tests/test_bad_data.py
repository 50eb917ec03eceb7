"""The bad-input corpus (16 kinds), each in raise and skip mode, through the prelearner and
through the conversion job. Nothing is dropped without being counted."""

import os

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

import offline_graph
from offline_graph import GNNModule, GraphOfflinePreLearner, OfflineGraphError
from offline_graph.jobs.convert import ConvertConfig, convert
from offline_graph.data.episodes.validation import EpisodeSpec
from tests.bad_data import D, F, FILE_DAMAGE, K, ROW_DAMAGE, good, write_items

OBS = gym.spaces.Graph(
    node_space=gym.spaces.Box(-np.inf, np.inf, (F,), np.float32),
    edge_space=gym.spaces.Box(-np.inf, np.inf, (D,), np.float32),
)
ACT = gym.spaces.Discrete(K)
SPEC = EpisodeSpec(F, D, K)
ROW_KINDS = sorted(ROW_DAMAGE) + ["duplicate_id"]


def bad_rows(kind):
    """(rows, the damaged row's index): two good episodes (3 steps each) around the damage."""
    if kind == "duplicate_id":
        return [good("g0"), good("g1"), good("g0")], 2
    return [good("g0"), ROW_DAMAGE[kind][0]("bad"), good("g1")], 1


def config(input_dir, on_error):
    cfg = (
        BCConfig()
        .environment(observation_space=OBS, action_space=ACT)
        .offline_data(
            input_=[str(input_dir)], input_read_episodes=True, prelearner_class=GraphOfflinePreLearner
        )
        .training(train_batch_size_per_learner=3)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={"hidden": 4, "layers": 1})
        )
    )
    return offline_graph.configure(cfg, on_error=on_error)


def prelearner_batch(tmp_path, kind):
    rows, bad_index = bad_rows(kind)
    path = str(tmp_path / "data" / "rows.parquet")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_items(path, rows)
    batch = {"item": np.array(rows, dtype=object), "path": np.array([path] * 3, dtype=object)}
    return batch, path, bad_index


def expected_texts(kind, path, bad_index):
    texts = [f"file {path}, row {bad_index}"]
    if kind == "duplicate_id":
        return texts + ["episode 'g0'", "must be unique"]
    _, step, text = ROW_DAMAGE[kind]
    texts.append(text)
    if kind != "decode":
        texts.append("episode 'bad'")
    if step is not None:
        texts.append(f"step t={step}")
    return texts


@pytest.mark.parametrize("kind", ROW_KINDS)
def test_prelearner_raise_names_file_row_episode_step(tmp_path, kind):
    batch, path, bad_index = prelearner_batch(tmp_path, kind)
    pre = GraphOfflinePreLearner(config=config(tmp_path / "data", "raise"), spaces=(OBS, ACT))
    with pytest.raises(OfflineGraphError) as err:
        pre(batch)
    assert err.value.reason == kind
    for text in expected_texts(kind, path, bad_index):
        assert text in str(err.value), (text, str(err.value))


@pytest.mark.parametrize("kind", ROW_KINDS)
def test_prelearner_skip_counts_every_rejection(tmp_path, kind):
    batch, _, _ = prelearner_batch(tmp_path, kind)
    pre = GraphOfflinePreLearner(config=config(tmp_path / "data", "skip"), spaces=(OBS, ACT))
    out = pre(batch)
    assert out.num_rows == 6  # 2 good episodes x 3 steps = 2 batches of 3
    report = pre.stats.as_dict()
    assert report["rejected_by_reason"] == {kind: 1}
    assert report["episodes_read"] == 3 == report["episodes_used"] + report["episodes_rejected"]
    assert report["transitions_used"] == 6


@pytest.mark.parametrize("kind", sorted(FILE_DAMAGE))
def test_damaged_files_raise_or_are_counted_before_reading(tmp_path, kind):
    write, text = FILE_DAMAGE[kind]
    data = tmp_path / "data"
    data.mkdir()
    write_items(str(data / "a_good.parquet"), [good("g0")])
    write(str(data / "b_bad.parquet"))
    with pytest.raises(OfflineGraphError) as err:
        config(data, "raise")
    assert f"file {data / 'b_bad.parquet'}" in str(err.value) and text in str(err.value)
    cfg = config(data, "skip")
    assert cfg.input_ == [str(data / "a_good.parquet")]
    report = cfg.learner_config_dict["offline_graph"]
    assert report["files_rejected"] == {kind: 1}
    assert text in report["file_errors"][kind]


@pytest.mark.slow
def test_conversion_skip_mode_counts_every_kind(tmp_path, ray_session):
    data = tmp_path / "data"
    data.mkdir()
    rows = [good("g0"), good("g1")] + [ROW_DAMAGE[k][0](f"bad-{k}") for k in sorted(ROW_DAMAGE)]
    rows.append(good("g0"))  # duplicate id within the block
    write_items(str(data / "rows.parquet"), rows)
    for kind, (write, _) in FILE_DAMAGE.items():
        write(str(data / f"z_{kind}.parquet"))
    report = convert(
        ConvertConfig(
            input=str(data),
            output=str(tmp_path / "out"),
            spec=SPEC,
            on_error="skip",
            episodes_per_batch=len(rows),
        )
    )
    assert report["rejected_by_reason"] == {k: 1 for k in ROW_KINDS}
    assert report["files_rejected_by_reason"] == {k: 1 for k in FILE_DAMAGE}
    assert report["episodes_in"] == len(rows) == report["episodes_used"] + report["episodes_rejected"]
    assert report["episodes_used"] == 2 and report["transitions_out"] == 6


@pytest.mark.slow
@pytest.mark.parametrize("kind", ROW_KINDS)
def test_conversion_raise_mode_names_the_bad_row(tmp_path, ray_session, kind):
    data = tmp_path / "data"
    data.mkdir()
    rows, bad_index = bad_rows(kind)
    path = str(data / "rows.parquet")
    write_items(path, rows)
    with pytest.raises(OfflineGraphError) as err:
        convert(ConvertConfig(input=str(data), output=str(tmp_path / "out"), spec=SPEC))
    assert err.value.reason == kind
    for text in expected_texts(kind, path, bad_index):
        assert text in str(err.value), (text, str(err.value))


@pytest.mark.parametrize("kind", sorted(FILE_DAMAGE))
def test_conversion_raise_mode_names_the_bad_file(tmp_path, kind):
    write, text = FILE_DAMAGE[kind]
    data = tmp_path / "data"
    data.mkdir()
    write(str(data / "bad.parquet"))
    with pytest.raises(OfflineGraphError) as err:
        convert(ConvertConfig(input=str(data), output=str(tmp_path / "out"), spec=SPEC))
    assert f"file {data / 'bad.parquet'}" in str(err.value) and text in str(err.value)
