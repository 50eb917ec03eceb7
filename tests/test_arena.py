"""GraphArena: a FIFO ring of graph columns equals the concatenation of its live chunks."""

import collections

import numpy as np
import pytest

from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.learning.arena import GraphArena


def random_graphs(
    rng: np.random.Generator, count: int, tag: int, mask_level: str | None, edge_dim: int
) -> list:
    """``count`` small random graph dicts; graph ``i``'s features are ``tag + i`` (edge
    features ``-(tag + i)``), with a random ``mask_level`` action mask if one is named."""
    graphs = []
    for i in range(count):
        nodes, edges = int(rng.integers(1, 6)), int(rng.integers(0, 7))
        g = {
            "x": np.full((nodes, 2), tag + i, np.float32),
            "edge_index": rng.integers(0, nodes, size=(2, edges)),
            "edge_attr": np.full((edges, edge_dim), -(tag + i), np.float32),
        }
        if mask_level is not None:
            g["action_mask"] = rng.random(nodes if mask_level == "node" else edges) < 0.5
        graphs.append(g)
    return graphs


def chunk(rng: np.random.Generator, k: int, masked: bool) -> tuple[GraphColumns, dict[str, np.ndarray]]:
    level = "edge" if masked else None
    graphs = random_graphs(rng, int(rng.integers(1, 9)), 100 * k, level, 1)
    return GraphColumns.from_graphs(graphs, 1, level), {"tag": 100 * k + np.arange(len(graphs))}


def assert_same(got: GraphColumns, want: GraphColumns) -> None:
    for key in ("x", "node_ptr", "edge_index", "edge_ptr", "edge_attr", "node_mask", "edge_mask"):
        a, b = getattr(got, key), getattr(want, key)
        assert (a is None) == (b is None), key
        if b is not None:
            assert a.dtype == b.dtype and a.shape == b.shape, key
            np.testing.assert_array_equal(a, b, err_msg=key)


@pytest.mark.parametrize("seed", range(6))
def test_take_and_view_equal_the_concatenation_of_the_live_chunks(seed):
    """Random pushes and pops (the ring wraps, grows while wrapped, lays itself out again),
    with and without room reserved up front."""
    rng = np.random.default_rng(seed)
    arena = GraphArena(reserve=8 * (seed % 3))
    live: collections.deque = collections.deque()
    for k in range(150):
        if live and (len(live) > 12 or rng.random() < 0.4):
            arena.pop()
            live.popleft()
            if live and rng.random() < 0.5:
                continue
        part = chunk(rng, k, masked=k % 5 != 2)
        arena.push(*part)
        live.append(part)
        want = GraphColumns.concat([g for g, _ in live])
        tags = np.concatenate([e["tag"] for _, e in live])
        assert len(arena) == len(want) and arena.chunks == len(live)
        idx = rng.integers(0, len(want), size=9)
        got, extra = arena.take(idx)
        assert_same(got, want.take(idx))
        np.testing.assert_array_equal(extra["tag"], tags[idx])
        if rng.random() < 0.15:
            got, extra = arena.view()
            assert_same(got, want)
            np.testing.assert_array_equal(extra["tag"], tags)


def test_chunks_must_keep_their_columns():
    rng = np.random.default_rng(0)
    arena = GraphArena()
    arena.push(*chunk(rng, 0, masked=False))
    with pytest.raises(ValueError, match="same columns"):
        arena.push(chunk(rng, 1, masked=False)[0], {})
