"""Graph columns as Arrow list columns and back (pure numpy / pyarrow).

One list per row, the growing axis first (``edge_index`` edge-major: Arrow lists are
row-major), as :mod:`offline_graph.data.learning.transitions` lays out transition rows. A set of
graphs may also sit on *some* rows only, null on the others (:func:`graph_arrays_at`: the
final observations of converted rows); the nulls cost an offset and a validity bit per row,
no values.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pyarrow as pa

from offline_graph.data.graphs.columns import BATCHING_RULES, GraphColumns, counts_to_ptr
from offline_graph.data.graphs.typed_columns import TypedColumns, table_to_typed, typed_arrays, typed_names


def ragged_column(values: np.ndarray, ptr: np.ndarray) -> pa.ListArray:
    """[sum, W] values + offsets -> list<fixed_size_list<W>> (zero-copy for the values)."""
    width = values.shape[1]
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    return pa.ListArray.from_arrays(
        pa.array(ptr.astype(np.int32)), pa.FixedSizeListArray.from_arrays(flat, width)
    )


def unragged_column(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """list<fixed_size_list<W>> -> ([sum, W] values, offsets [rows+1]), honouring slices."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = arr.offsets.to_numpy().astype(np.int64)
    inner = arr.flatten()  # respects the array's slice offset
    width = inner.type.list_size
    values = inner.flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
    return values, offsets - offsets[0]


def graph_arrays(
    graphs: GraphColumns | TypedColumns, keys: tuple[str, ...] | None = None
) -> dict[str, pa.Array]:
    """The ragged graph columns of ``graphs`` (one list per transition, the growing axis
    first: ``edge_index`` edge-major); the inverse is :func:`table_to_graphs`. Typed graphs:
    one set per node / edge type (:mod:`~offline_graph.data.graphs.typed_columns`). ``keys``:
    only these columns."""
    if isinstance(graphs, TypedColumns):
        return typed_arrays(graphs, graph_arrays)
    arrays = {}
    for key, value in graphs.present().items():
        if keys is not None and key not in keys:
            continue
        rule = BATCHING_RULES[key]
        ptr = graphs.choice_ptr(rule.level)
        if value.ndim == 1:
            arrays[key] = pa.ListArray.from_arrays(pa.array((ptr - ptr[0]).astype(np.int32)), pa.array(value))
        else:
            arrays[key] = ragged_column(np.ascontiguousarray(np.moveaxis(value, rule.axis, 0)), ptr)
    return arrays


def _bool_list(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """list<bool> -> flat bool values, honouring slices."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return arr.flatten().to_numpy(zero_copy_only=False).astype(bool, copy=False)


_DTYPES = {"x": np.float32, "edge_index": np.int64, "edge_attr": np.float32, "globals": np.float32}


def table_to_graphs(table: pa.Table, prefix: str = "") -> GraphColumns:
    """The graph columns of a transition table (named ``prefix`` + ``x``, ...; no null rows)
    as :class:`GraphColumns` (inverse of :func:`graph_arrays`); typed graphs' columns
    (``x:<type>``, ...) as :class:`TypedColumns`, which the row, buffer and batching code
    takes in its place (the same ``take`` / ``slice`` / ``concat`` / ``graph``; typed as
    ``GraphColumns`` for that code, which dispatches on the class where the layouts differ)."""
    if typed_names(table.column_names, prefix):
        return cast(GraphColumns, table_to_typed(table, prefix, _part_graphs))
    return _part_graphs(table, table.num_rows, prefix)


def _part_graphs(table: pa.Table, num_rows: int, prefix: str = "") -> GraphColumns:
    """The plain graph columns (``prefix`` + ``x``, ``edge_index``, ...) of ``table``; a part
    without nodes (a typed graph's edge type) or without edges (its node type) has empty ones."""
    columns: dict[str, np.ndarray] = {}
    ptrs: dict[str, np.ndarray] = {}
    for key, rule in BATCHING_RULES.items():
        if prefix + key not in table.column_names:
            continue
        column = table.column(prefix + key)
        if pa.types.is_boolean(column.type.value_type):
            columns[key] = _bool_list(column)
            continue
        values, ptrs[rule.level] = unragged_column(column)
        values = np.ascontiguousarray(np.moveaxis(values, 0, rule.axis))
        columns[key] = values.astype(_DTYPES.get(key, values.dtype), copy=False)
    none = np.zeros(num_rows + 1, np.int64)
    columns.setdefault("x", np.zeros((0, 0), np.float32))
    columns.setdefault("edge_index", np.zeros((2, 0), np.int64))
    return GraphColumns(node_ptr=ptrs.get("node", none), edge_ptr=ptrs.get("edge", none), **columns)


def graph_arrays_at(graphs: GraphColumns, rows: np.ndarray, num_rows: int) -> dict[str, pa.Array]:
    """:func:`graph_arrays` with graph ``i`` on row ``rows[i]`` of ``num_rows`` rows and null
    lists on the others (``rows`` increasing); the values are the graphs' own, nothing more."""
    rows = np.asarray(rows, dtype=np.int64)
    nulls = np.ones(num_rows, dtype=bool)
    nulls[rows] = False
    out = {}
    for key, arr in graph_arrays(graphs).items():
        counts = np.zeros(num_rows, dtype=np.int64)
        counts[rows] = np.diff(arr.offsets.to_numpy())
        offsets = pa.array(counts_to_ptr(counts).astype(np.int32))
        out[key] = pa.ListArray.from_arrays(offsets, arr.flatten(), mask=pa.array(nulls))
    return out
