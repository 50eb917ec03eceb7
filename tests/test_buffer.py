"""TransitionBuffer: FIFO eviction by chunk and uniform sampling across chunks, exactly."""

import numpy as np
import pytest

from offline_graph.data.learning.buffer import TransitionBuffer
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.errors import ConfigError
from offline_graph.data.learning.transitions import Transitions
from tests.test_arena import assert_same, random_graphs


def chunk(base: int, n: int) -> Transitions:
    """``n`` transitions of one episode; action ``base + i``, graph ``i`` has ``1 + i % 2``
    nodes of value ``base + i`` (and ``i % 2`` edges)."""
    graphs = [
        {"x": np.full((1 + i % 2, 1), base + i, np.float32), "edge_index": np.zeros((2, i % 2), np.int64)}
        for i in range(n)
    ]
    return Transitions(
        GraphColumns.from_graphs(graphs, None),
        np.arange(base, base + n),
        np.zeros(n, np.float32),
        np.zeros(n, bool),
        np.zeros(n, bool),
        np.zeros(n, np.float32),
        np.zeros(n, np.int32),
        [f"e{base}"],
        np.arange(n),
    )


def test_sampling_across_chunks_equals_sampling_the_concatenation():
    buf = TransitionBuffer(capacity=100, seed=3)
    for base in (0, 100, 200):
        buf.add(chunk(base, 4))
    got = buf.sample(50)
    idx = np.random.default_rng(3).integers(0, 12, size=50)
    expected = np.concatenate([np.arange(b, b + 4) for b in (0, 100, 200)])[idx]
    np.testing.assert_array_equal(got.actions, expected)
    # node features travel with their rows (graphs of 1 or 2 nodes, value = action)
    np.testing.assert_array_equal(got.obs.x[got.obs.node_ptr[:-1], 0], expected)
    np.testing.assert_array_equal(got.obs.num_nodes, 1 + (expected % 100) % 2)


def test_fifo_eviction_keeps_capacity_and_newest_chunk():
    buf = TransitionBuffer(capacity=6, seed=0)
    buf.add(chunk(0, 4))
    buf.add(chunk(100, 4))  # 8 >= 6 but dropping the first would leave 4 < 6: keep both
    assert len(buf) == 8
    buf.add(chunk(200, 4))  # drop chunk 0 (8 left >= 6), then 100 would leave 4 < 6
    assert len(buf) == 8
    assert set(buf.sample(200).actions // 100) == {1, 2}
    buf.add(chunk(300, 10))  # a chunk larger than capacity is kept whole, alone
    assert len(buf) == 10 and set(buf.sample(50).actions // 100) == {3}


def test_empty_buffer_refuses_to_sample():
    with pytest.raises(ConfigError, match="must hold transitions"):
        TransitionBuffer(capacity=4).sample(1)


def test_eviction_keeps_exact_fifo_and_draws():
    buf = TransitionBuffer(capacity=13, seed=5)
    for k in range(7):  # chunk k holds actions 100k .. 100k+3
        buf.add(chunk(100 * k, 4))
    # capacity 13: keep the newest chunks while the rest would still hold >= 13 -> 4 chunks
    assert len(buf) == 16
    got = buf.sample(64)
    live = np.concatenate([np.arange(100 * k, 100 * k + 4) for k in (3, 4, 5, 6)])
    expected = live[np.random.default_rng(5).integers(0, 16, size=64)]
    np.testing.assert_array_equal(got.actions, expected)
    np.testing.assert_array_equal(got.obs.x[got.obs.node_ptr[:-1], 0], expected)


def varied_chunk(rng: np.random.Generator, k: int, masked: bool, finals: bool) -> Transitions:
    """A chunk of 1-3 episodes, 1-5 steps each, edge features, an optional node mask and
    optional final observations; values unique per chunk (``k``)."""
    lengths = rng.integers(1, 6, size=int(rng.integers(1, 4)))
    n = int(lengths.sum())
    level = "node" if masked else None
    graphs = random_graphs(rng, n + len(lengths), 1000 * k, level, 3)  # steps, then finals
    obs = GraphColumns.from_graphs(graphs[:n], 3, level)
    out = Transitions.from_steps(
        obs,
        1000 * k + np.arange(n),
        rng.random(n),
        lengths,
        [True] * len(lengths),
        [False] * len(lengths),
        [f"c{k}e{j}" for j in range(len(lengths))],
        0.9,
    )
    if finals:
        out.final_obs = GraphColumns.from_graphs(graphs[n:], 3, level)
    return out


def assert_same_transitions(got: Transitions, want: Transitions) -> None:
    assert_same(got.obs, want.obs)
    assert (got.final_obs is None) == (want.final_obs is None)
    if want.final_obs is not None:
        assert_same(got.final_obs, want.final_obs)
    for key in ("actions", "rewards", "terminateds", "truncateds", "value_targets", "episode_index", "t"):
        u, v = getattr(got, key), getattr(want, key)
        assert u.dtype == v.dtype, key
        np.testing.assert_array_equal(u, v, err_msg=key)
    assert got.episode_ids == want.episode_ids


@pytest.mark.parametrize("capacity", [1, 7, 40, 200])
def test_buffer_equals_the_concatenation_of_its_live_chunks(capacity):
    """Whatever the chunk sizes, the ring's wraps, moves and growth, the missing masks / final
    observations of some chunks: ``all()`` is ``Transitions.concat`` of the live chunks and a
    sample is its rows drawn by the same generator."""
    rng = np.random.default_rng(capacity)
    buf = TransitionBuffer(capacity=capacity, seed=11)
    draws = np.random.default_rng(11)
    live: list[Transitions] = []
    for k in range(60):
        part = varied_chunk(rng, k, masked=k % 7 != 3, finals=k % 11 != 5)
        buf.add(part)
        live.append(part)
        while len(live) > 1 and sum(map(len, live)) - len(live[0]) >= capacity:
            live.pop(0)
        assert len(buf) == sum(map(len, live)) and buf.chunks == len(live)
        want = Transitions.concat(live) if len(live) > 1 else live[0]
        idx = draws.integers(0, len(want), size=17)
        assert_same_transitions(buf.sample(17), want.take(idx))  # gathered from the ring
        if k % 5 == 4:  # the whole buffer in order (lays a wrapped ring out anew)
            assert_same_transitions(buf.all(), want)


def test_mixing_single_and_multi_agent_chunks_raises():
    buf = TransitionBuffer(capacity=100)
    buf.add(chunk(0, 3))
    multi = chunk(100, 3)
    multi.agent_ids, multi.env_t = ["a"], np.arange(3)
    with pytest.raises(ValueError, match="all single-agent or all multi-agent"):
        buf.add(multi)
