"""The conversion job: exact rows, exactly once under a killed worker, parity with episodes."""

import json
import os

import gymnasium as gym
import msgpack
import msgpack_numpy as mnp
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray

from offline_graph.jobs.conversion import REPORT_NAME
from offline_graph.jobs.convert import ConvertConfig, ConvertEpisodes, convert
from offline_graph.rllib.offline.episodes import encode_episode
from offline_graph.data.store.format import read_file_metadata
from offline_graph.data.episodes.reader import read_episodes, spec_from_spaces
from offline_graph.data.graphs.space_text import graph_space
from offline_graph.rllib.offline.collate_fn import GraphCollateFn
from offline_graph.data.learning.transitions import Transitions
from offline_graph.data.episodes.validation import EpisodeSpec
from tests.helpers import write_episode_file

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]  # conftest.py: one 2-CPU Ray
SPEC = EpisodeSpec(num_features=2, edge_dim=None, num_actions=3)


def obs(n, v):
    return {
        "x": np.full((n, 2), v, np.float32),
        "edge_index": np.array([[0] * (n - 1), list(range(1, n))], np.int64).reshape(2, -1),
    }


def write(path, items):
    write_episode_file(path, items)


def three_episodes():
    return [
        encode_episode(
            [obs(1, 0.0), obs(2, 1.0), obs(3, 2.0)],
            [0, 1],
            [1.0, 2.0],
            terminated=True,
            truncated=False,
            episode_id="a",
        ),
        encode_episode(
            [obs(2, 5.0), obs(1, 6.0)], [2], [4.0], terminated=False, truncated=True, episode_id="b"
        ),
        encode_episode(
            [obs(3, 7.0), obs(1, 8.0), obs(2, 9.0), obs(1, 9.5)],
            [1, 1, 0],
            [0.0, 0.0, 1.0],
            terminated=True,
            truncated=False,
            episode_id="c",
        ),
    ]


def read_rows(out):
    files = sorted(f for f in os.listdir(out) if f.endswith(".parquet"))
    return pa.concat_tables([pq.read_table(os.path.join(out, f)) for f in files])


def test_three_episodes_convert_to_exact_rows(tmp_path):
    src = tmp_path / "eps"
    src.mkdir()
    write(src / "e.parquet", three_episodes())
    out = str(tmp_path / "rows")
    ctx = ray.data.DataContext.get_current()
    before = (ctx.execution_options.preserve_order, ctx.op_resource_reservation_enabled)
    report = convert(ConvertConfig(input=str(src), output=out, spec=SPEC, gamma=0.5))
    # the job's DataContext changes are undone, its per-block accounting files removed
    assert (ctx.execution_options.preserve_order, ctx.op_resource_reservation_enabled) == before
    assert sorted(os.listdir(out)) == [REPORT_NAME, "transitions-000000-0.parquet"]
    rows = read_rows(out)
    assert rows.column("eps_id").cast(pa.string()).to_pylist() == ["a", "a", "b", "c", "c", "c"]
    assert rows.column("t").to_pylist() == [0, 1, 0, 0, 1, 2]
    assert rows.column("actions").to_pylist() == [0, 1, 2, 1, 1, 0]
    assert rows.column("rewards").to_pylist() == [1.0, 2.0, 4.0, 0.0, 0.0, 1.0]
    # a: G1 = 2, G0 = 1 + .5*2 = 2; b (truncated, bootstrap 0): 4; c: .25, .5, 1
    assert rows.column("value_targets").to_pylist() == [2.0, 2.0, 4.0, 0.25, 0.5, 1.0]
    assert rows.column("terminateds").to_pylist() == [False, True, False, False, False, True]
    assert rows.column("truncateds").to_pylist() == [False, False, True, False, False, False]
    assert [len(v) for v in rows.column("x").to_pylist()] == [1, 2, 2, 3, 1, 2]
    assert rows.column("x").to_pylist()[3] == [[7.0, 7.0]] * 3
    assert rows.column("edge_index").to_pylist()[3] == [[0, 1], [0, 2]]
    first = sorted(f for f in os.listdir(out) if f.endswith(".parquet"))[0]
    meta = read_file_metadata(os.path.join(out, first))
    assert meta["kind"] == "transitions" and meta["gamma"] == 0.5 and meta["version"] == 1
    on_disk = json.load(open(os.path.join(out, REPORT_NAME)))
    assert on_disk["episodes_in"] == 3 and on_disk["transitions_out"] == 6
    assert on_disk["rejected_by_reason"] == {} and report["episodes_out"] == 3
    # any Parquet reader opens the output directory as the data set (the report is a side file)
    assert REPORT_NAME.startswith("_")
    assert pq.read_table(out).column("actions").to_pylist() == [0, 1, 2, 1, 1, 0]
    assert pd.read_parquet(out)["t"].tolist() == [0, 1, 0, 0, 1, 2]
    # one task at a time (--workers 1) writes the same rows
    capped = str(tmp_path / "rows1")
    convert(ConvertConfig(input=str(src), output=capped, spec=SPEC, gamma=0.5, num_workers=1))
    assert read_rows(capped).equals(rows)


def test_final_observations_round_trip_one_graph_per_episode(tmp_path):
    """a terminated (final: 3 nodes of 2.0, edges 0-1 0-2), b truncated (final: 1 node of 6.0)."""
    src = tmp_path / "eps"
    src.mkdir()
    write(src / "e.parquet", three_episodes()[:2])
    out = str(tmp_path / "rows")
    convert(ConvertConfig(input=str(src), output=out, spec=SPEC, gamma=0.5))
    rows = read_rows(out)
    assert rows.column_names[-2:] == ["final_x", "final_edge_index"]  # no edge features here
    assert rows.column("final_x").to_pylist() == [None, [[2.0, 2.0]] * 3, [[6.0, 6.0]]]
    assert rows.column("final_edge_index").to_pylist() == [None, [[0, 1], [0, 2]], []]
    assert read_file_metadata(os.path.join(out, "transitions-000000-0.parquet"))["final_obs"] is True
    finals = Transitions.from_table(rows).final_obs
    np.testing.assert_array_equal(finals.x, [[2.0, 2.0]] * 3 + [[6.0, 6.0]])
    np.testing.assert_array_equal(finals.edge_index, [[0, 0], [1, 2]])
    np.testing.assert_array_equal(finals.node_ptr, [0, 3, 4])
    # bytes added: the two final graphs' values, (3 + 1) nodes * 2 * 4 + 2 edges * 2 * 8
    added = sum(rows.column(c).combine_chunks().flatten().nbytes for c in ("final_x", "final_edge_index"))
    assert added == finals.nbytes == 4 * 2 * 4 + 2 * 2 * 8 == 64
    # the learner batch never sees them
    assert not [k for k in GraphCollateFn()(rows) if "final" in k]


class DieOnce(ConvertEpisodes):
    """Kills its own worker process on its first batch, once per job (marker file)."""

    def __call__(self, batch):
        first_path = batch.column("path")[0].as_py()
        marker = os.path.join(os.path.dirname(os.path.dirname(first_path)), "died")
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return super().__call__(batch)


def test_killed_worker_still_gives_every_transition_exactly_once(tmp_path):
    src = tmp_path / "eps"
    src.mkdir()
    rng = np.random.default_rng(0)
    expected = 0
    for f in range(4):
        items = []
        for i in range(10):
            length = int(rng.integers(1, 6))
            expected += length
            items.append(
                encode_episode(
                    [obs(int(rng.integers(1, 4)), i) for _ in range(length + 1)],
                    [0] * length,
                    [1.0] * length,
                    terminated=True,
                    truncated=False,
                    episode_id=f"f{f}-{i}",
                )
            )
        write(src / f"e{f}.parquet", items)
    out = str(tmp_path / "rows")
    report = convert(
        ConvertConfig(input=str(src), output=out, spec=SPEC, episodes_per_batch=5), map_class=DieOnce
    )
    assert os.path.exists(tmp_path / "died")  # the worker really died once
    rows = read_rows(out)
    assert rows.num_rows == expected == report["transitions_out"]
    keys = list(zip(rows.column("eps_id").cast(pa.string()).to_pylist(), rows.column("t").to_pylist()))
    assert len(set(keys)) == len(keys)
    assert report["episodes_in"] == 40 and report["episodes_used"] == 40


DICT_SPACE = gym.spaces.Dict(
    {"graph": graph_space(2), "load": gym.spaces.Box(0, 1, (2,)), "mode": gym.spaces.Discrete(2)}
)


def with_parts(items: list[bytes]) -> list[bytes]:
    """The episodes with a Dict space's parts beside each graph (mode = step % 2, load = [v, 1])."""
    out = []
    for item in items:
        state = msgpack.unpackb(item, object_hook=mnp.decode, strict_map_key=False)
        data = state["observations"]["data"]
        for t, o in enumerate(data):
            o.update(load=np.array([o["x"][0, 0] / 10, 1.0], np.float32), mode=t % 2)
        out.append(msgpack.packb(state, default=mnp.encode))
    return out


@pytest.mark.parametrize("observations", ["graph", "dict"])
def test_converted_rows_and_episodes_give_the_same_learner_batch(tmp_path, observations):
    """Also for a Dict space (a graph and flat parts): the rows' ``globals`` column batches to
    the same ``obs/globals [B, G]`` as the episodes' (episode c's second step: load [0.8, 1],
    mode 1)."""
    src = tmp_path / "eps"
    src.mkdir()
    spec = SPEC if observations == "graph" else spec_from_spaces(DICT_SPACE, gym.spaces.Discrete(3))
    items = three_episodes() if observations == "graph" else with_parts(three_episodes())
    write(src / "e.parquet", items)
    out = str(tmp_path / "rows")
    convert(ConvertConfig(input=str(src), output=out, spec=spec, gamma=0.9))
    from_rows = GraphCollateFn()(read_rows(out))
    if observations == "dict":
        first = os.path.join(out, sorted(f for f in os.listdir(out) if f.endswith(".parquet"))[0])
        text = "dict:graph=graph:F=2;load=box:2;mode=discrete:2"
        assert read_file_metadata(first)["observation_space"] == text
        assert from_rows["default_policy/obs/globals"].shape == (6, 4)
        rows = read_rows(out).to_pandas()
        at = rows.index[(rows["eps_id"] == "c") & (rows["t"] == 1)][0]
        assert from_rows["default_policy/obs/globals"][at].tolist() == pytest.approx([0.8, 1.0, 0.0, 1.0])
    episodes = read_episodes(items, [None] * 3, spec)
    from_episodes = GraphCollateFn()(Transitions.from_episodes(episodes, 0.9).to_arrow())
    assert list(from_rows) == list(from_episodes)
    assert list(from_rows)[0] == "default_policy/actions"
    for key in from_rows:
        assert from_rows[key].dtype == from_episodes[key].dtype
        assert bool((from_rows[key] == from_episodes[key]).all()), key


@pytest.mark.parametrize(
    "field,value",
    [("episodes_per_batch", 0), ("episodes_per_task", -1), ("num_workers", 0), ("cpus_per_worker", 0.0)],
)
def test_bad_settings_are_refused_before_the_job(tmp_path, field, value):
    from offline_graph.data.errors import ConfigError

    src = tmp_path / "eps"
    src.mkdir()
    write(src / "e.parquet", three_episodes())
    cfg = ConvertConfig(input=str(src), output=str(tmp_path / "rows"), spec=SPEC, **{field: value})
    with pytest.raises(ConfigError, match=rf"convert: {field} must be > 0 \(found {value!r}\)"):
        convert(cfg)
    assert not os.path.exists(tmp_path / "rows")


def test_input_without_rows_converts_to_an_empty_report(tmp_path):
    src = tmp_path / "eps"
    src.mkdir()
    write(src / "e.parquet", [])
    out = str(tmp_path / "rows")
    report = convert(ConvertConfig(input=str(src), output=out, spec=SPEC))
    assert (report["episodes_in"], report["transitions_out"], report["bytes_out"]) == (0, 0, 0)
    assert os.listdir(out) == [REPORT_NAME]
