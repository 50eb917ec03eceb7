"""Collate / uncollate and GraphColumns: exact hand-computed layouts (PyG test_batch style)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Batch, Data

from offline_graph.data.graphs.collate import collate, uncollate
from offline_graph.data.graphs.columns import GraphColumns, ragged_gather_index


def two_graphs(with_attr: bool) -> GraphColumns:
    g0 = {"x": np.array([[1.0], [2.0], [3.0]], np.float32), "edge_index": np.array([[0, 1, 2], [1, 2, 0]])}
    g1 = {"x": np.array([[4.0], [5.0]], np.float32), "edge_index": np.array([[1], [0]])}
    if with_attr:
        g0["edge_attr"] = np.array([[10.0], [11.0], [12.0]], np.float32)
        g1["edge_attr"] = np.array([[13.0]], np.float32)
    return GraphColumns.from_graphs([g0, g1], 1 if with_attr else None)


@pytest.mark.parametrize("with_attr", [True, False])
def test_collate_two_graphs_exact(with_attr):
    out = collate(two_graphs(with_attr))
    np.testing.assert_array_equal(out["x"], [[1], [2], [3], [4], [5]])
    np.testing.assert_array_equal(out["edge_index"], [[0, 1, 2, 4], [1, 2, 0, 3]])
    np.testing.assert_array_equal(out["batch"], [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(out["ptr"], [0, 3, 5])
    if with_attr:
        np.testing.assert_array_equal(out["edge_attr"], [[10], [11], [12], [13]])
    else:
        assert "edge_attr" not in out


def test_collate_zero_edge_and_single_node_graphs():
    g = [
        {"x": np.array([[7.0]], np.float32), "edge_index": np.zeros((2, 0), np.int64)},
        {"x": np.array([[8.0], [9.0]], np.float32), "edge_index": np.array([[0], [1]])},
        {"x": np.array([[6.0]], np.float32), "edge_index": np.array([[0], [0]])},
    ]
    out = collate(GraphColumns.from_graphs(g, None))
    np.testing.assert_array_equal(out["edge_index"], [[1, 3], [2, 3]])
    np.testing.assert_array_equal(out["batch"], [0, 1, 1, 2])
    np.testing.assert_array_equal(out["ptr"], [0, 1, 3, 4])


def test_collate_matches_pyg_batch():
    cols = two_graphs(True)
    ref = Batch.from_data_list(
        [
            Data(
                x=torch.from_numpy(g["x"]),
                edge_index=torch.from_numpy(g["edge_index"]),
                edge_attr=torch.from_numpy(g["edge_attr"]),
            )
            for g in (cols.graph(0), cols.graph(1))
        ]
    )
    out = collate(cols)
    for key in ("x", "edge_index", "edge_attr", "batch", "ptr"):
        np.testing.assert_array_equal(out[key], getattr(ref, key).numpy())


def test_ragged_gather_index_and_take():
    np.testing.assert_array_equal(ragged_gather_index(np.array([0, 2, 5]), np.array([1, 0])), [2, 3, 4, 0, 1])
    cols = two_graphs(True)
    taken = cols.take(np.array([1, 1, 0]))
    np.testing.assert_array_equal(taken.node_ptr, [0, 2, 4, 7])
    np.testing.assert_array_equal(taken.x[:, 0], [4, 5, 4, 5, 1, 2, 3])
    np.testing.assert_array_equal(taken.edge_index, [[1, 1, 0, 1, 2], [0, 0, 1, 2, 0]])
    np.testing.assert_array_equal(taken.edge_attr[:, 0], [13, 13, 10, 11, 12])


graph_st = st.integers(1, 6).flatmap(
    lambda n: st.tuples(
        st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=8)
    )
)


@settings(max_examples=60, deadline=None)
@given(st.lists(graph_st, min_size=1, max_size=5), st.booleans())
def test_uncollate_inverts_collate(graphs, with_attr):
    rng = np.random.default_rng(0)
    dicts = []
    for n, edges in graphs:
        ei = np.array(edges, np.int64).reshape(-1, 2).T
        d = {"x": rng.normal(size=(n, 3)).astype(np.float32), "edge_index": ei}
        if with_attr:
            d["edge_attr"] = rng.normal(size=(ei.shape[1], 2)).astype(np.float32)
        dicts.append(d)
    cols = GraphColumns.from_graphs(dicts, 2 if with_attr else None)
    back = uncollate(collate(cols))
    for g, d in enumerate(dicts):
        got = back.graph(g)
        np.testing.assert_array_equal(got["x"], d["x"])
        np.testing.assert_array_equal(got["edge_index"], d["edge_index"])
        if with_attr:
            np.testing.assert_array_equal(got["edge_attr"], d["edge_attr"])
