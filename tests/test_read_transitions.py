"""read_transitions (the block fast path + per-episode fallback) against the full path."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_graph.data.graphs.columns import GraphColumns, counts_to_ptr
from offline_graph.data.episodes.codec import decode_state
from offline_graph.rllib.offline.episodes import encode_episode
from offline_graph.data.errors import OfflineGraphError
from offline_graph.data.episodes.fast_episode import fast_block
from offline_graph.data.store.files import scan_files
from offline_graph.jobs.source import episode_source
from offline_graph.data.episodes.reader import FAST_CHUNK, ReadStats, read_transitions
from offline_graph.data.learning.transitions import Transitions
from offline_graph.data.episodes.validation import EpisodeSpec, validate_episode, values_ok
from tests.helpers import write_episode_file


def random_episode(rng, eid, edim, level, masked, num_t):
    obs, actions = [], []
    for t in range(num_t + 1):
        n = int(rng.integers(1, 5))
        e = int(rng.integers(1 if level == "edge" else 0, 6))
        o = {
            "x": rng.normal(size=(n, 3)).astype(np.float32),
            "edge_index": rng.integers(0, n, (2, e)).astype(np.int64),
        }
        if edim is not None:
            o["edge_attr"] = rng.normal(size=(e, edim)).astype(np.float32)
        size = n if level == "node" else e
        if level is not None and masked:
            mask = rng.random(size) < 0.5
            mask[int(rng.integers(0, size))] = True
            o["action_mask"] = mask
        obs.append(o)
        if t < num_t:
            if level is None:
                actions.append(int(rng.integers(0, 4)))
            else:
                allowed = np.flatnonzero(o["action_mask"]) if masked else np.arange(size)
                actions.append(int(rng.choice(allowed)))
    rewards = rng.normal(size=num_t).round(3).tolist()
    truncated = bool(rng.random() < 0.3)
    return encode_episode(
        obs, actions, rewards, terminated=not truncated, truncated=truncated, episode_id=eid
    )


def reference(items, spec, gamma):
    """Every episode through the full (slow) validation path, then from_episodes."""
    return Transitions.from_episodes([validate_episode(decode_state(i), spec) for i in items], gamma)


def assert_same_transitions(parts, ref):
    got = Transitions.concat(parts)
    for name in ("actions", "rewards", "terminateds", "truncateds", "value_targets", "t", "episode_index"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name), err_msg=name)
        assert getattr(got, name).dtype == getattr(ref, name).dtype, name
    assert got.episode_ids == ref.episode_ids
    for name in ("x", "node_ptr", "edge_index", "edge_ptr", "edge_attr", "node_mask", "edge_mask"):
        a, b = getattr(got.obs, name), getattr(ref.obs, name)
        if b is None:
            assert a is None, name
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)
            assert a.dtype == b.dtype, name
    assert rows(got).equals(rows(ref))


def rows(tr):
    """The Arrow rows with eps_id as plain strings (dictionaries may be chunked differently)."""
    table = tr.to_arrow()
    return table.set_column(
        table.column_names.index("eps_id"), "eps_id", table.column("eps_id").cast(pa.string())
    )


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 2 * FAST_CHUNK + 3),
    st.sampled_from([None, 2]),
    st.sampled_from([(None, False), ("node", True), ("node", False), ("edge", True)]),
    st.integers(0, 10_000),
)
def test_read_transitions_equals_the_full_path(num_episodes, edim, level_masked, seed):
    level, masked = level_masked
    rng = np.random.default_rng(seed)
    items = [
        random_episode(rng, f"e{i}", edim, level, masked, int(rng.integers(1, 5)))
        for i in range(num_episodes)
    ]
    spec = EpisodeSpec(3, edim, 4 if level is None else 16, action_level=level)
    stats = ReadStats()
    parts = read_transitions(items, [None] * len(items), spec, 0.9, stats=stats)
    assert_same_transitions(parts, reference(items, spec, 0.9))
    assert (stats.episodes_read, stats.episodes_used) == (num_episodes, num_episodes)
    assert stats.transitions_used == sum(len(p) for p in parts)
    assert len(parts) == -(-num_episodes // FAST_CHUNK)  # every chunk took the fast path


def test_fast_block_values_by_hand():
    """Two episodes; edge pairs are (source, target) of each edge, final observations are
    validated but not emitted, returns-to-go per episode."""
    g = lambda x, ei: {"x": np.array(x, np.float32), "edge_index": np.array(ei, np.int64)}  # noqa: E731
    a = encode_episode(
        [g([[1, 2], [3, 4]], [[0, 1], [1, 0]]), g([[5, 6]], [[0], [0]]), g([[7, 8]], np.zeros((2, 0)))],
        [1, 0],
        [1.0, 3.0],
        terminated=True,
        truncated=False,
        episode_id="a",
    )
    b = encode_episode(
        [g([[9, 9], [8, 8], [7, 7]], [[2], [0]]), g([[0, 0]], np.zeros((2, 0)))],
        [2],
        [5.0],
        terminated=False,
        truncated=True,
        episode_id="b",
    )
    tr = fast_block([a, b], EpisodeSpec(2, None, 3), gamma=0.5)
    np.testing.assert_array_equal(tr.obs.x, [[1, 2], [3, 4], [5, 6], [9, 9], [8, 8], [7, 7]])
    np.testing.assert_array_equal(tr.obs.node_ptr, [0, 2, 3, 6])
    np.testing.assert_array_equal(tr.obs.edge_index, [[0, 1, 0, 2], [1, 0, 0, 0]])
    np.testing.assert_array_equal(tr.obs.edge_ptr, [0, 2, 3, 4])
    np.testing.assert_array_equal(tr.actions, [1, 0, 2])
    np.testing.assert_array_equal(tr.value_targets, [2.5, 3.0, 5.0])  # 1 + .5*3, 3, 5
    np.testing.assert_array_equal(tr.terminateds, [False, True, False])
    np.testing.assert_array_equal(tr.truncateds, [False, False, True])
    np.testing.assert_array_equal(tr.t, [0, 1, 0])
    assert tr.episode_ids == ["a", "b"]
    rows = tr.to_arrow()
    assert rows.column("edge_index").to_pylist() == [[[0, 1], [1, 0]], [[0, 0]], [[2, 0]]]


def block(n, seed=0):
    rng = np.random.default_rng(seed)
    return [random_episode(rng, f"e{i}", None, None, False, 2) for i in range(n)]


def nan_episode(eid):
    obs = [
        {"x": np.array([[0.0, np.nan, 0.0]], np.float32), "edge_index": np.zeros((2, 0), np.int64)},
        {"x": np.zeros((1, 3), np.float32), "edge_index": np.zeros((2, 0), np.int64)},
    ]
    return encode_episode(obs, [0], [1.0], terminated=True, truncated=False, episode_id=eid)


def test_a_bad_row_sends_only_its_chunk_down_the_per_episode_path():
    items = block(2 * FAST_CHUNK)
    items[FAST_CHUNK + 3] = nan_episode("bad")
    spec = EpisodeSpec(3, None, 4)
    stats = ReadStats()
    parts = read_transitions(items, [None] * len(items), spec, 0.9, on_error="skip", stats=stats)
    good = items[: FAST_CHUNK + 3] + items[FAST_CHUNK + 4 :]
    assert_same_transitions(parts, reference(good, spec, 0.9))
    assert stats.rejected == {"nonfinite": 1}
    assert (stats.episodes_read, stats.episodes_used) == (2 * FAST_CHUNK, 2 * FAST_CHUNK - 1)
    with pytest.raises(
        OfflineGraphError, match=r"episode 'bad', step t=0, column 'x': node features must be finite"
    ):
        read_transitions(items, [None] * len(items), spec, 0.9)


def test_an_id_repeated_in_a_later_chunk_is_a_duplicate():
    items = block(FAST_CHUNK + 4)
    items[FAST_CHUNK + 2] = block(FAST_CHUNK + 4, seed=1)[2]  # id "e2", other content
    spec = EpisodeSpec(3, None, 4)
    stats = ReadStats()
    parts = read_transitions(items, [None] * len(items), spec, 0.9, on_error="skip", stats=stats)
    assert stats.rejected == {"duplicate_id": 1}
    assert_same_transitions(parts, reference(items[: FAST_CHUNK + 2] + items[FAST_CHUNK + 3 :], spec, 0.9))
    with pytest.raises(OfflineGraphError, match="episode id must be unique"):
        read_transitions(items, [None] * len(items), spec, 0.9)


def test_seen_ids_accept_the_same_rows_again_and_reject_other_content():
    items = block(5)
    spec = EpisodeSpec(3, None, 4)
    seen = {}
    read_transitions(items, [None] * 5, spec, 0.9, seen_ids=seen)
    stats = ReadStats()
    again = read_transitions(items, [None] * 5, spec, 0.9, seen_ids=seen, stats=stats)
    assert sum(len(p) for p in again) == 10 and stats.rejected == {}
    other = block(5, seed=7)
    stats = ReadStats()
    read_transitions(other, [None] * 5, spec, 0.9, on_error="skip", seen_ids=seen, stats=stats)
    assert stats.rejected == {"duplicate_id": 5}


def graphs(x, node_counts, pairs, edge_counts):
    return GraphColumns(
        np.asarray(x, np.float32).reshape(-1, 1),
        counts_to_ptr(np.array(node_counts)),
        np.asarray(pairs, np.int64).reshape(-1, 2).T,
        counts_to_ptr(np.array(edge_counts)),
    )


def test_values_ok_by_hand():
    # graph 0: 2 nodes, edge (1, 0); graph 1: 1 node, no edges; graph 2: 3 nodes, edge (0, 2)
    assert values_ok(graphs([0, 1, 2, 3, 4, 5], [2, 1, 3], [[1, 0], [0, 2]], [1, 0, 1]))
    # target 2 is out of range in graph 0 (N=2), though in range for graph 2
    assert not values_ok(graphs([0, 1, 2, 3, 4, 5], [2, 1, 3], [[1, 2], [0, 2]], [1, 0, 1]))
    assert not values_ok(graphs([0, 1, 2, 3, 4, 5], [2, 1, 3], [[1, 0], [-1, 2]], [1, 0, 1]))
    assert not values_ok(graphs([0, np.inf, 2, 3, 4, 5], [2, 1, 3], [[1, 0], [0, 2]], [1, 0, 1]))
    g = graphs([0, 1], [1, 1], np.zeros((0, 2)), [0, 0])
    g.edge_attr = np.zeros((0, 2), np.float32)
    assert values_ok(g)


def test_episode_source_plans_whole_row_groups_per_task(tmp_path):
    items = block(9)
    path = str(tmp_path / "e.parquet")
    write_episode_file(path, items)
    pq.write_table(pq.read_table(path), path, row_group_size=3)  # row groups of 3, 3, 3 rows
    scan = scan_files(path)
    assert [n for n, _ in scan.row_groups[path]] == [3, 3, 3]
    source = episode_source(scan, rows_per_task=7, batch_rows=2)
    tasks = source.get_read_tasks(1)
    assert source.num_tasks == 2 and [t.metadata.num_rows for t in tasks] == [6, 3]
    blocks = [b for t in tasks for b in t()]
    assert [b.num_rows for b in blocks] == [2, 2, 2, 2, 1]  # batch_rows at a time, per task
    got = pa.concat_tables(blocks)
    assert got.column("item").to_pylist() == items
    assert set(got.column("path").to_pylist()) == {path}
