"""offline-graph migrate: padded RLlib Repeated recordings -> ragged episode files, lossless.

The recordings (tests/migrate_data.py) are made the way an RLlib user had them: random graphs
padded by RLlib's own preprocessor, written as row-per-transition Parquet, as JSON lines and
as RLlib's own JsonWriter SampleBatch lines (plain and lz4-compressed).
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import Box
from ray.rllib.models.preprocessors import get_preprocessor

from offline_graph.data.errors import ConfigError, GraphValidationError, SchemaError
from offline_graph.data.store.format import read_file_metadata
from offline_graph.data.migration.migrate import layout_from_space, unpad
from offline_graph.jobs.migrate import REPORT_NAME
from tests.migrate_data import (
    BAD,
    D,
    E_MAX,
    F,
    K,
    N_MAX,
    NO_ATTR_SPACE,
    OBS_SPACE,
    OFF_ATTR,
    OFF_EI,
    OFF_X,
    SIZE,
    assert_lossless,
    corrupt,
    make_recording,
    pad,
    payload,
    run,
    sorted_recording,
    write_json_batches,
    write_json_rows,
    write_parquet,
)


# --------------------------------------------------------------------------- layout
def test_layout_is_rllibs_preprocessor_layout():
    layout = layout_from_space(OBS_SPACE)
    prep = get_preprocessor(OBS_SPACE)(OBS_SPACE)
    assert layout.size == prep.size == SIZE
    assert [(s.key, s.offset, s.max_len, s.child) for s in layout.segments] == [
        ("edge_attr", OFF_ATTR, E_MAX, D),
        ("edge_index", OFF_EI, E_MAX, 2),
        ("x", OFF_X, N_MAX, F),
    ]
    g = {
        "x": np.array([[1, 2, 3], [4, 5, 6]], np.float32),
        "edge_index": np.array([[0, 1], [1, 0]]),
        "edge_attr": np.array([[7, 8], [9, 10]], np.float32),
    }
    vec = pad(prep, g)
    assert vec.dtype == np.float32
    expected = np.zeros(SIZE, np.float32)  # [len, elements..., zero padding] per key
    expected[OFF_ATTR : OFF_ATTR + 5] = [2, 7, 8, 9, 10]
    expected[OFF_EI : OFF_EI + 5] = [2, 0, 1, 1, 0]  # (source, target) of edge 0, then edge 1
    expected[OFF_X : OFF_X + 7] = [2, 1, 2, 3, 4, 5, 6]
    np.testing.assert_array_equal(vec, expected)
    back = unpad(vec[None], layout).graphs[0]
    assert back is not None and back["edge_index"].dtype == np.int64
    for key in g:
        np.testing.assert_array_equal(back[key], g[key])


def test_space_must_be_a_dict_of_repeated():
    with pytest.raises(ConfigError, match=r"Dict keys must be 'x', 'edge_index' and optionally"):
        layout_from_space(gym.spaces.Dict({"x": OBS_SPACE["x"]}))
    with pytest.raises(ConfigError, match=r"space\['x'\] must be Repeated\(Box of one dimension"):
        layout_from_space(gym.spaces.Dict({"x": Box(0, 1, (3,)), "edge_index": OBS_SPACE["edge_index"]}))


# --------------------------------------------------------------------------- lossless
def test_parquet_rows_migrate_losslessly_with_exact_report(tmp_path):
    eps, rows = make_recording(seed=1, episodes=8)
    (tmp_path / "old").mkdir()
    half = len(rows) // 2  # episodes straddle the two files
    files = [
        write_parquet(rows[:half], tmp_path / "old" / "part-0.parquet"),
        write_parquet(rows[half:], tmp_path / "old" / "part-1.parquet"),
    ]
    out = tmp_path / "new"
    report = run(tmp_path / "old", out, action_space=gym.spaces.Discrete(K), episodes_per_file=3)
    assert_lossless(eps, out)
    outputs = sorted(str(out / f) for f in os.listdir(out) if f.endswith(".parquet"))
    assert [os.path.basename(f) for f in outputs] == [
        "episodes-0000000-0000002.parquet",
        "episodes-0000003-0000005.parquet",
        "episodes-0000006-0000007.parquet",
    ]
    counts = (
        "episodes",
        "transitions",
        "observations",
        "terminated",
        "truncated",
        "rows_read",
        "episodes_rejected",
        "transitions_rejected",
        "files_in",
        "files_out",
    )
    assert {k: report[k] for k in counts} == {
        "episodes": 8,
        "transitions": len(rows),
        "observations": len(rows) + 8,
        "terminated": 4,
        "truncated": 4,
        "rows_read": len(rows),
        "episodes_rejected": 0,
        "transitions_rejected": 0,
        "files_in": 2,
        "files_out": 3,
    }
    padded, unpadded = payload(eps)
    assert report["padded_payload_bytes"] == padded == (len(rows) + 8) * SIZE * 4
    assert report["unpadded_payload_bytes"] == unpadded
    assert report["padding_factor"] == pytest.approx(padded / unpadded)
    assert report["bytes_before"] == sum(os.path.getsize(f) for f in files)
    assert report["bytes_after"] == sum(os.path.getsize(f) for f in outputs)
    assert report["rejected_by_reason"] == {} and report["files_rejected_by_reason"] == {}
    assert (report["observation_space"], report["action_space"]) == ("graph:F=3,D=2", "discrete:4")
    assert report["layout"]["size"] == SIZE and report["layout"]["order"] == ["edge_attr", "edge_index", "x"]
    assert json.loads((out / REPORT_NAME).read_text()) == report
    meta = read_file_metadata(outputs[0])
    assert (meta["kind"], meta["observation_space"], meta["action_space"]) == (
        "episodes",
        "graph:F=3,D=2",
        "discrete:4",
    )


@pytest.mark.parametrize("writer", ["json_rows", "json_batches"])
def test_json_lines_migrate_losslessly(tmp_path, writer):
    eps, rows = make_recording(seed=2, episodes=5)
    (tmp_path / "old").mkdir()
    if writer == "json_rows":
        write_json_rows(rows, tmp_path / "old" / "rows.jsonl")
    else:  # RLlib's JsonWriter: each episode's rows in order, one SampleBatch per line
        ordered = sorted(rows, key=lambda r: (str(r["eps_id"]), r["t"]))
        write_json_batches(ordered, tmp_path / "old" / "output-2020-01-01_00-00-00_worker-1_0.json")
    report = run(tmp_path / "old", tmp_path / "new", batch_rows=3)  # episodes span batches
    assert_lossless(eps, tmp_path / "new")
    assert (report["episodes"], report["transitions"]) == (5, len(rows))
    assert report["action_space"] == f"discrete:{max(a for e in eps for a in e[2]) + 1}"


def test_graphs_without_edge_attr_and_the_old_dones_column(tmp_path):
    eps, rows = make_recording(seed=3, episodes=4, space=NO_ATTR_SPACE)
    for r in rows:
        r["dones"] = r.pop("terminateds") or r.pop("truncateds")
    write_parquet(rows, tmp_path / "old.parquet")
    report = run(tmp_path / "old.parquet", tmp_path / "new", space=NO_ATTR_SPACE)
    # dones cannot tell a time limit from a terminal state: every episode comes back terminated
    assert_lossless([(i, g, a, r, True, False) for i, g, a, r, _, _ in eps], tmp_path / "new")
    size = (1 + N_MAX * F) + (1 + E_MAX * 2)
    assert (report["padded_payload_bytes"], report["unpadded_payload_bytes"]) == payload(eps, size, 0)
    assert report["observation_space"] == "graph:F=3"


def test_compressed_values_are_numpy_arrays_only_and_need_lz4(monkeypatch):
    from offline_graph.jobs.old_rows import _NumpyOnly, unpack_array

    with pytest.raises(pickle.UnpicklingError, match=r"(posix|os)\.system is not a numpy array part"):
        _NumpyOnly(io.BytesIO(pickle.dumps(os.system))).load()
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(_NumpyOnly(io.BytesIO(pickle.dumps(arr))).load(), arr)
    monkeypatch.setitem(sys.modules, "lz4", None)
    monkeypatch.setitem(sys.modules, "lz4.frame", None)
    with pytest.raises(
        ConfigError,
        match=r"^file f, column 'obs': compressed observations must be "
        r"decoded with the lz4 package .*`pip install lz4`",
    ):
        unpack_array("BCJNGGBAgg==", "file f, column 'obs'")


def test_compressed_columns(tmp_path):
    pytest.importorskip("lz4")  # ray[rllib] installs it; RLlib then compresses obs by default
    from ray.rllib.utils import compression

    assert compression.LZ4_ENABLED
    eps, rows = make_recording(seed=4, episodes=3)
    (tmp_path / "old").mkdir()
    ordered = sorted(rows, key=lambda r: (str(r["eps_id"]), r["t"]))
    write_json_batches(ordered, tmp_path / "old" / "b.json", compress=("obs", "new_obs"))
    assert '"obs": "' in (tmp_path / "old" / "b.json").read_text()  # base64(lz4(pickle)) strings
    packed = [dict(r, obs=compression.pack(r["obs"]), new_obs=compression.pack(r["new_obs"])) for r in rows]
    write_parquet(packed, tmp_path / "old" / "rows.parquet")
    report = run(tmp_path / "old", tmp_path / "new", on_error="skip")
    # b.json has every episode; rows.parquet has the same ones again: counted, dropped
    assert report["rejected_by_reason"] == {"duplicate_episode": 3}
    assert report["transitions_rejected"] == len(rows) and report["transitions"] == len(rows)
    assert_lossless(eps, tmp_path / "new")


# --------------------------------------------------------------------------- bad rows
@pytest.mark.parametrize("kind", BAD)
def test_bad_row_raises_naming_file_row_episode_step_and_column(tmp_path, kind):
    _, rows = sorted_recording(5)
    i, column, reason, text = corrupt(rows, kind)
    path = write_parquet(rows, tmp_path / "old.parquet")
    with pytest.raises(GraphValidationError) as err:
        run(path, tmp_path / "new")
    assert err.value.reason == reason
    location = f"file {path}, row {i}, episode '{rows[i]['eps_id']}', step t={rows[i]['t']}"
    assert str(err.value).startswith(f"{location}, column '{column}': {text}"), str(err.value)
    assert not (tmp_path / "new").exists()  # a failed run leaves no partial output behind


def test_missing_column_raises_and_skip_counts_the_file(tmp_path):
    _, rows = make_recording(seed=6, episodes=2)
    path = write_parquet(rows, tmp_path / "old.parquet", drop=("t",))
    with pytest.raises(
        SchemaError,
        match=rf"^file {path}, column 't': column must be present \(found "
        r"columns \['eps_id', 'obs', 'new_obs'",
    ):
        run(path, tmp_path / "a")
    report = run(path, tmp_path / "b", on_error="skip")
    assert report["files_rejected_by_reason"] == {"missing_column": 1} and report["episodes"] == 0
    assert "column 't': column must be present" in report["first_error_by_reason"]["missing_column"]


def test_skip_drops_whole_episodes_and_counts_each_reason(tmp_path):
    (tmp_path / "old").mkdir()
    good = []
    for n, kind in enumerate(BAD):
        eps, rows = sorted_recording(10 + n, episodes=3)
        corrupt(rows, kind)
        good += [e for e in eps if e[0] != str(rows[0]["eps_id"])]
        write_parquet(rows, tmp_path / "old" / f"{n}-{kind}.parquet")
    report = run(tmp_path / "old", tmp_path / "new", on_error="skip")
    assert report["rejected_by_reason"] == {
        "edge_index_range": 1,
        "edge_index_value": 1,
        "length_field": 2,
        "padding": 1,
        "t_gap": 1,
        "unfinished": 1,
        "vector_length": 1,
        "t_duplicate": 1,
        "done_before_end": 1,
        "new_obs_mismatch": 1,
    }
    assert report["episodes_rejected"] == len(BAD) and report["episodes"] == len(good)
    assert report["rows_read"] == report["transitions"] + report["transitions_rejected"]
    assert set(report["first_error_by_reason"]) == set(report["rejected_by_reason"])
    assert_lossless(good, tmp_path / "new")


# --------------------------------------------------------------------------- CLI, training
def test_cli_migrate_then_inspect(tmp_path, capsys, monkeypatch):
    from offline_graph.cli import main

    _, rows = make_recording(seed=7, episodes=5)
    path = write_parquet(rows, tmp_path / "old.parquet")
    out = str(tmp_path / "new")
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    space = "tests.migrate_data:OBS_SPACE"
    argv = ["migrate", "--input", path, "--output", out, "--observation-space", space]
    assert main([*argv, "--action-space", "discrete:4"]) == 0
    printed = capsys.readouterr().out
    assert "episodes     5 (3 terminated, 2 truncated)" in printed
    assert f"report       {out}/_migration_report.json" in printed
    assert main(["inspect", out, "--json", "--strict"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 5 and summary["transitions"] == len(rows)
    assert main([*argv[:-1], "nope"]) == 2
    assert "--observation-space must be module:NAME (found 'nope')" in capsys.readouterr().err
    assert main(argv) == 2  # the output is no longer empty
    assert "--output must be a new or empty directory" in capsys.readouterr().err


def test_migrated_episodes_give_learner_batches_the_module_trains_on(tmp_path):
    """The migrated files through what a BC learner gets from them: configure's prelearner reads
    every migrated episode (none rejected), its rows collate into one PyG batch per learner
    batch, and the GNNModule's BC loss on it is finite and has gradients. It was a BC
    ``algo.train()`` (~20 s in the suite: Ray Data's read tasks and a prelearner actor); RLlib's
    reading of our episode files and its training loop are the same for any episode file and
    are tested end to end elsewhere (tests/test_env_runner.py, tests/test_train_pipeline.py)."""
    import pyarrow.parquet as pq
    import torch
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.utils import unflatten_dict

    import offline_graph
    from offline_graph import GNNModule, GraphOfflinePreLearner
    from offline_graph.data.graphs.space_text import graph_space
    from offline_graph.rllib.offline.collate_fn import GraphCollateFn

    _, rows = make_recording(seed=8, episodes=12)
    run(write_parquet(rows, tmp_path / "old.parquet"), tmp_path / "new", action_space=gym.spaces.Discrete(K))
    spaces = (graph_space(F, D), gym.spaces.Discrete(K))
    config = (
        BCConfig()
        .environment(observation_space=spaces[0], action_space=spaces[1])
        .offline_data(
            input_=[str(tmp_path / "new")], input_read_episodes=True, prelearner_class=GraphOfflinePreLearner
        )
        .training(train_batch_size_per_learner=8)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={"hidden": 8, "layers": 1})
        )
    )
    config = offline_graph.configure(config)
    files = sorted((tmp_path / "new").glob("*.parquet"))
    items = [item for f in files for item in pq.read_table(f).column("item").to_pylist()]
    pre = GraphOfflinePreLearner(config=config, spaces=spaces)
    table = pre({"item": np.array(items, dtype=object)})
    assert pre.stats.episodes_used == 12 and not pre.stats.rejected
    assert table.num_rows > 0 and table.num_rows % 8 == 0
    batch = unflatten_dict(GraphCollateFn()(table.slice(0, 8)))["default_policy"]
    module = config.get_rl_module_spec().build()  # as the learner builds it
    logits = module.forward_train(batch)[Columns.ACTION_DIST_INPUTS]
    loss = torch.nn.functional.cross_entropy(logits, batch[Columns.ACTIONS].long())
    loss.backward()
    assert logits.shape == (8, K) and math.isfinite(loss.item())
    assert all(p.grad is not None for p in module.parameters())
