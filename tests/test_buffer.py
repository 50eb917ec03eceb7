"""TransitionBuffer: FIFO eviction by chunk and uniform sampling across chunks, exactly."""

import numpy as np
import pytest

from offline_graph.data.learning.buffer import TransitionBuffer
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.errors import ConfigError
from offline_graph.data.learning.transitions import Transitions


def chunk(base: int, n: int) -> Transitions:
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


@pytest.mark.parametrize("max_pending", [1, 2, 4])
def test_consolidation_and_eviction_keep_exact_fifo_and_draws(max_pending):
    buf = TransitionBuffer(capacity=13, seed=5, max_pending=max_pending)
    for k in range(7):  # chunk k holds actions 100k .. 100k+3
        buf.add(chunk(100 * k, 4))
    # capacity 13: keep the newest chunks while the rest would still hold >= 13 -> 4 chunks
    assert len(buf) == 16
    got = buf.sample(64)
    live = np.concatenate([np.arange(100 * k, 100 * k + 4) for k in (3, 4, 5, 6)])
    expected = live[np.random.default_rng(5).integers(0, 16, size=64)]
    np.testing.assert_array_equal(got.actions, expected)
    np.testing.assert_array_equal(got.obs.x[got.obs.node_ptr[:-1], 0], expected)
