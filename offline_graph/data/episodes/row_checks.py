"""Checks of converted transition rows before anything reads them (pure pyarrow / numpy).

Rows written by ``offline-graph convert`` pass by construction; a file edited, produced by
another tool or damaged in a way Parquet's checksums miss may not. :func:`check_rows` refuses
such a table with our errors (never an Arrow or numpy exception from deep inside a reader):

=====================  ==================================================================
``schema``             a required column missing, a column of another Arrow type (``x``
                       ``list<fixed_size_list<float, F>>``, ``edge_index`` of int pairs,
                       ...), a null where a value belongs, or list lengths that disagree
                       (``edge_attr`` vs ``edge_index``, a mask vs its nodes / edges)
``empty_graph``        a row whose graph has no node
``edge_index_range``   an edge index outside ``0..N-1`` of its row's graph
``nonfinite``          NaN or inf in ``x`` or ``edge_attr``
``action``             a negative action
=====================  ==================================================================

Every check is a whole-column reduction (no per-row Python).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from offline_graph.data.errors import GraphValidationError, SchemaError, where
from offline_graph.data.graphs.typed_columns import typed_names

REQUIRED = ("actions", "x", "edge_index")
"""Required columns (a typed graph's rows: ``actions`` and each part's ``x:<type>`` /
``edge_index:<src__rel__dst>`` in place of ``x`` / ``edge_index``)."""
_LISTS: dict[str, tuple[Callable[[pa.DataType], bool], int | None, str]] = {
    "x": (pa.types.is_floating, None, "list<fixed_size_list<float32, F>>"),
    "edge_index": (pa.types.is_integer, 2, "list<fixed_size_list<int64, 2>>"),
    "edge_attr": (pa.types.is_floating, None, "list<fixed_size_list<float32, D>>"),
}
_MASKS = {"node_mask": "x", "edge_mask": "edge_index"}
_SCALARS: dict[str, tuple[Callable[[pa.DataType], bool], str]] = {
    "actions": (pa.types.is_integer, "integer"),
    "rewards": (lambda t: pa.types.is_floating(t) or pa.types.is_integer(t), "a number"),
    "value_targets": (pa.types.is_floating, "float"),
    "terminateds": (pa.types.is_boolean, "bool"),
    "truncateds": (pa.types.is_boolean, "bool"),
    "t": (pa.types.is_integer, "integer"),
    "env_t": (pa.types.is_integer, "integer"),
    "agent_id_int": (pa.types.is_boolean, "bool"),
    "eps_id": (lambda t: _is_text(t), "string (or dictionary of strings)"),
    "agent_id": (lambda t: _is_text(t), "string (or dictionary of strings)"),
}
HINT = "The rows were not written by offline-graph convert, or are damaged; convert the episodes again."


def _is_text(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _array(column: Any) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def check_rows(table: pa.Table, source: str = "converted rows") -> None:
    """Raise :class:`SchemaError` / :class:`GraphValidationError` (``reason`` as in the module
    doc) unless ``table`` is readable transition rows; ``source`` starts every message."""
    names = table.column_names
    ids = _ids(table)

    def ctx(row: int | None = None, column: str | None = None) -> str:
        eid = ids[row] if row is not None and ids is not None else None
        return f"{source}, " + where(row=row, episode_id=eid, column=column)

    typed = typed_names(names)
    for name in REQUIRED[:1] if typed else REQUIRED:
        if name not in names:
            raise SchemaError(
                f"{ctx(column=name)}: column must be present (found columns {names}). {HINT}",
                reason="schema",
            )
    for name, (ok, expected) in _SCALARS.items():
        if name in names:
            column = _array(table.column(name))
            if not ok(column.type):
                raise SchemaError(
                    f"{ctx(column=name)}: column type must be {expected} (found {column.type}). {HINT}",
                    reason="schema",
                )
            _no_nulls(column, name, ctx)
    for prefix in ("", "final_"):
        if typed:
            _check_typed(table, prefix, ctx)
        else:
            _check_graphs(table, prefix, ctx)
    actions = _array(table.column("actions")).to_numpy(zero_copy_only=False)
    if actions.size and actions.min() < 0:
        row = int(np.argmax(actions < 0))
        raise GraphValidationError(
            f"{ctx(row, 'actions')}: action must be >= 0 (found {int(actions[row])}). {HINT}",
            reason="action",
        )


def _ids(table: pa.Table) -> list[Any] | None:
    """The rows' episode ids, when ``eps_id`` is a text column without nulls."""
    if "eps_id" not in table.column_names:
        return None
    column = table.column("eps_id")
    if not _is_text(column.type) or column.null_count:
        return None
    return column.cast(pa.string()).to_pylist()


def _no_nulls(column: pa.Array, name: str, ctx: Any, rows: np.ndarray | None = None) -> None:
    """No null (at the rows ``rows`` only, when given) and no null value inside a list."""
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    bad = ~valid if rows is None else rows & ~valid
    if bad.any():
        row = int(np.argmax(bad))
        raise SchemaError(f"{ctx(row, name)}: value must not be null (found null). {HINT}", reason="schema")
    inner = column
    while pa.types.is_list(inner.type) or pa.types.is_fixed_size_list(inner.type):
        inner = inner.flatten()
        if inner.null_count:
            raise SchemaError(
                f"{ctx(None, name)}: list values must not be null (found {inner.null_count} nulls). {HINT}",
                reason="schema",
            )


def _check_graphs(table: pa.Table, prefix: str, ctx: Any) -> None:
    """The graph columns named ``prefix`` + x, edge_index, ... (``final_``: on the rows where
    ``final_x`` is not null)."""
    names = table.column_names
    if prefix + "x" not in names:
        for name in [*_LISTS, *_MASKS]:
            if prefix + name in names:
                raise SchemaError(
                    f"{ctx(column=prefix + name)}: column must come with {prefix}x (found it "
                    f"without). {HINT}",
                    reason="schema",
                )
        return
    columns = {k: _array(table.column(prefix + k)) for k in [*_LISTS, *_MASKS] if prefix + k in names}
    rows = columns["x"].is_valid().to_numpy(zero_copy_only=False) if prefix else None
    if prefix and "edge_index" not in columns:
        raise SchemaError(
            f"{ctx(column=prefix + 'edge_index')}: column must be present with {prefix}x (found "
            f"columns {names}). {HINT}",
            reason="schema",
        )
    lengths = {}
    for key, column in columns.items():
        name = prefix + key
        _check_type(column, key, name, ctx)
        _no_nulls(column, name, ctx, rows)
        lengths[key] = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False)
    for key, of in [("edge_attr", "edge_index"), *_MASKS.items()]:
        if key in lengths and not np.array_equal(lengths[key], lengths[of]):
            row = int(np.argmax(lengths[key] != lengths[of]))
            raise SchemaError(
                f"{ctx(row, prefix + key)}: list length must equal {prefix + of}'s {int(lengths[of][row])} "
                f"(found {int(lengths[key][row])}). {HINT}",
                reason="schema",
            )
    _check_values(columns, lengths["x"], lengths["edge_index"], prefix, ctx, rows)


def _check_type(column: pa.Array, key: str, name: str, ctx: Any) -> None:
    kind = column.type
    if key in _MASKS:
        ok = pa.types.is_list(kind) and pa.types.is_boolean(kind.value_type)
        expected = "list<bool>"
    else:
        value_ok, width, expected = _LISTS[key]
        inner = kind.value_type if pa.types.is_list(kind) else None
        ok = (
            inner is not None
            and pa.types.is_fixed_size_list(inner)
            and value_ok(inner.value_type)
            and inner.list_size >= 1
            and (width is None or inner.list_size == width)
        )
    if not ok:
        raise SchemaError(
            f"{ctx(column=name)}: column type must be {expected} (found {kind}). {HINT}", reason="schema"
        )


def _check_values(
    columns: dict[str, pa.Array],
    num_nodes: np.ndarray,
    num_edges: np.ndarray,
    prefix: str,
    ctx: Any,
    rows: np.ndarray | None,
) -> None:
    """Every (present) row's graph: N >= 1, finite features, edge indices in ``0..N-1``."""
    present = np.ones(len(num_nodes), bool) if rows is None else rows
    if (present & (num_nodes < 1)).any():
        row = int(np.argmax(present & (num_nodes < 1)))
        raise GraphValidationError(
            f"{ctx(row, prefix + 'x')}: number of nodes must be >= 1 (found 0). {HINT}",
            reason="empty_graph",
        )
    for key, counts in (("x", num_nodes), ("edge_attr", num_edges)):
        if key in columns:
            _check_finite(columns[key], counts, prefix + key, ctx)
    pairs = columns["edge_index"].flatten().flatten().to_numpy(zero_copy_only=False).reshape(-1, 2)
    limit = np.repeat(num_nodes, num_edges)
    bad = ((pairs < 0) | (pairs >= limit[:, None])).any(axis=1)
    if bad.any():
        j = int(np.argmax(bad))
        raise GraphValidationError(
            f"{ctx(_row_of(j, num_edges), prefix + 'edge_index')}: edge indices must be in 0..N-1 "
            f"with N={int(limit[j])} (found edge {pairs[j].tolist()}). {HINT}",
            reason="edge_index_range",
        )


def _check_finite(column: pa.Array, counts: np.ndarray, name: str, ctx: Any) -> None:
    """Every feature row of a ``list<fixed_size_list<float, W>>`` column finite; raises
    naming the first row (``counts``: list lengths per row) that holds NaN/inf."""
    values = column.flatten().flatten().to_numpy(zero_copy_only=False)
    finite = np.isfinite(values.reshape(-1, column.type.value_type.list_size)).all(axis=1)
    if not finite.all():
        row = _row_of(int(np.argmax(~finite)), counts)
        raise GraphValidationError(
            f"{ctx(row, name)}: features must be finite (found NaN/inf). {HINT}", reason="nonfinite"
        )


def _row_of(position: int, counts: np.ndarray) -> int:
    """The row of flat element ``position`` of a list column with per-row ``counts``."""
    return int(np.searchsorted(np.cumsum(counts), position, side="right"))


def _check_typed(table: pa.Table, prefix: str, ctx: Any) -> None:
    """:func:`_check_graphs` for a typed graph's columns (``x:<type>``, ``node_mask:<type>``,
    ``edge_index:<src__rel__dst>``, ``edge_attr:<src__rel__dst>``): types, nulls, lengths,
    finite features, >= 1 node per row, each edge type's indices within its source and target
    type's nodes."""
    parts = typed_names(table.column_names, prefix)
    if not parts:
        return
    first = next(name for part in parts.values() for name in part.values())
    rows = _array(table.column(first)).is_valid().to_numpy(zero_copy_only=False) if prefix else None
    lengths: dict[str, np.ndarray] = {}
    columns: dict[str, pa.Array] = {}
    for part, names in parts.items():
        for key, name in names.items():
            columns[name] = _array(table.column(name))
            _check_type(columns[name], key, name, ctx)
            _no_nulls(columns[name], name, ctx, rows)
            lengths[name] = pc.list_value_length(columns[name]).fill_null(0).to_numpy(zero_copy_only=False)
        if "x" not in names and "edge_index" not in names:
            raise SchemaError(
                f"{ctx(column=f'{prefix}x:{part}')}: a typed graph's part {part!r} must have its x or "
                f"edge_index column (found {sorted(names.values())}). {HINT}",
                reason="schema",
            )
    nodes = {p: lengths[n["x"]] for p, n in parts.items() if "x" in n}
    for names in parts.values():
        for key, of in (("node_mask", "x"), ("edge_attr", "edge_index")):
            if key in names and of in names and not np.array_equal(lengths[names[key]], lengths[names[of]]):
                row = int(np.argmax(lengths[names[key]] != lengths[names[of]]))
                raise SchemaError(
                    f"{ctx(row, names[key])}: list length must equal {names[of]}'s "
                    f"{int(lengths[names[of]][row])} (found {int(lengths[names[key]][row])}). {HINT}",
                    reason="schema",
                )
        for key in ("x", "edge_attr"):
            if key in names:
                _check_finite(columns[names[key]], lengths[names[key]], names[key], ctx)
    total = np.sum(list(nodes.values()), axis=0) if nodes else np.zeros(table.num_rows, np.int64)
    present = np.ones(table.num_rows, bool) if rows is None else rows
    if (present & (total < 1)).any():
        row = int(np.argmax(present & (total < 1)))
        raise GraphValidationError(
            f"{ctx(row, first)}: number of nodes must be >= 1 over all node types (found 0). {HINT}",
            reason="empty_graph",
        )
    for part, names in parts.items():
        if "edge_index" not in names:
            continue
        pairs = columns[names["edge_index"]].flatten().flatten().to_numpy(zero_copy_only=False).reshape(-1, 2)
        counts = lengths[names["edge_index"]]
        ends = part.split("__")[::2]
        for side, end in enumerate(ends):
            limit = np.repeat(nodes.get(end, np.zeros(table.num_rows, np.int64)), counts)
            bad = (pairs[:, side] < 0) | (pairs[:, side] >= limit)
            if bad.any():
                j = int(np.argmax(bad))
                raise GraphValidationError(
                    f"{ctx(_row_of(j, counts), names['edge_index'])}: edge indices in row {side} must be in "
                    f"0..N-1 of node type {end!r} with N={int(limit[j])} (found {int(pairs[j, side])}). "
                    f"{HINT}",
                    reason="edge_index_range",
                )
