"""Fuzzed converted transition rows (no Ray): a table of ``offline-graph convert``'s layout with
one column damaged (dropped, of another type, a null, ragged list lengths, a bad value, cut or
re-chunked). :func:`check_rows` refuses it with our errors only, or the readers
(``Transitions.from_table``, ``table_to_batch``) read it into consistent columns."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from offline_graph.data.errors import OfflineGraphError
from offline_graph.data.episodes.reader import read_transitions
from offline_graph.data.episodes.row_checks import check_rows
from offline_graph.data.learning.transitions import Transitions, table_to_batch
from offline_graph.data.episodes.validation import EpisodeSpec, values_ok
from tests.fuzz import D, F, FUZZ, INTS, K, bounded, count, episode_state, fuzz_report, pack, single_row

SPEC = EpisodeSpec(F, D, K)
pytestmark = pytest.mark.usefixtures(fuzz_report.__name__)


def _table() -> pa.Table:
    rows = [single_row(f"e{i}", length=2 + i, seed=i) for i in range(3)]
    return Transitions.concat(read_transitions(rows, [None] * 3, SPEC, 0.9)).to_arrow()


TABLE = _table()
BAD_FLOATS = [float("nan"), float("inf"), -float("inf")]


def _list_column(column: pa.Array, lengths: np.ndarray) -> pa.Array:
    """``column``'s values re-cut into rows of ``lengths`` (same total)."""
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, column.flatten())


def _with_value(column: pa.Array, position: int, value) -> pa.Array:
    """A list<fixed_size_list> column with one flat value replaced."""
    inner = column.flatten()
    flat = inner.flatten().to_numpy(zero_copy_only=False).copy()
    with np.errstate(all="ignore"):
        flat[position % len(flat)] = value
    rebuilt = pa.FixedSizeListArray.from_arrays(pa.array(flat), inner.type.list_size)
    return pa.ListArray.from_arrays(column.offsets, rebuilt)


OTHER_TYPES = {
    "strings": lambda n: pa.array(["a string"] * n),
    "ints": lambda n: pa.array(np.arange(n)),
    "floats": lambda n: pa.array(np.full(n, 0.5)),
    "nulls": lambda n: pa.nulls(n),
    "list_float": lambda n: pa.array([[1.0, 2.0]] * n),
    "wide_pairs": lambda n: pa.array([[[0, 0, 0]]] * n, pa.list_(pa.list_(pa.int64(), 3))),
    "float_pairs": lambda n: pa.array([[[0.0, 0.0]]] * n, pa.list_(pa.list_(pa.float32(), 2))),
    "bools": lambda n: pa.array([[True]] * n),
    "dict_ints": lambda n: pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([7])),
}


def _pairs_like(column: pa.Array) -> bool:
    """A list<fixed_size_list<...>> column (x, edge_index, edge_attr and their final_)."""
    return pa.types.is_list(column.type) and pa.types.is_fixed_size_list(column.type.value_type)


def _damage(name: str, change) -> pa.Table:
    """TABLE with column ``name`` replaced by ``change(column)``."""
    return TABLE.set_column(TABLE.column_names.index(name), name, change(TABLE.column(name).combine_chunks()))


def _shift_one(column: pa.Array) -> pa.Array:
    """One list element moved from the first non-empty row to the next row."""
    lengths = np.diff(column.offsets.to_numpy()).copy()
    i = int(np.argmax(lengths > 0))
    lengths[i] -= 1
    lengths[(i + 1) % len(lengths)] += 1
    return _list_column(column, lengths)


@st.composite
def damaged_tables(draw) -> pa.Table:
    table = TABLE
    names = table.column_names
    name = draw(st.sampled_from(names))
    column = table.column(name).combine_chunks()
    n = table.num_rows
    op = draw(st.sampled_from(["drop", "retype", "null", "value", "ragged", "slice", "chunks", "cast"]))
    if op == "drop":
        return table.drop_columns([name])
    if op == "retype":
        new = OTHER_TYPES[draw(st.sampled_from(sorted(OTHER_TYPES)))](n)
    elif op == "null":
        mask = np.zeros(n, bool)
        mask[draw(st.integers(0, n - 1))] = True
        if pa.types.is_list(column.type):
            new = pa.ListArray.from_arrays(column.offsets, column.flatten(), mask=pa.array(mask))
        else:
            new = pc_if_null(column, mask)
    elif (
        op == "value"
        and pa.types.is_list(column.type)
        and pa.types.is_fixed_size_list(column.type.value_type)
    ):
        if not len(column.flatten()):
            return table
        floats = pa.types.is_floating(column.type.value_type.value_type)
        bad = draw(st.sampled_from(BAD_FLOATS) if floats else INTS.filter(lambda v: -(2**63) <= v < 2**63))
        new = _with_value(column, draw(st.integers(0, 10**6)), bad)
    elif op == "value" and name in ("actions", "t", "env_t"):
        values = column.to_numpy(zero_copy_only=False).copy()
        values[draw(st.integers(0, n - 1))] = draw(INTS.filter(lambda v: -(2**63) <= v < 2**63))
        new = pa.array(values)
    elif op == "ragged" and pa.types.is_list(column.type):
        lengths = np.diff(column.offsets.to_numpy()).copy()
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if lengths[i] == 0 or column.null_count:
            return table
        lengths[i] -= 1
        lengths[j] += 1
        new = _list_column(column, lengths)
    elif op == "slice":
        start = draw(st.integers(0, n - 1))
        return table.slice(start, draw(st.integers(0, n - start)))
    elif op == "chunks":
        cut = draw(st.integers(0, n))
        return pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    elif (
        op == "cast" and pa.types.is_list(column.type) and pa.types.is_fixed_size_list(column.type.value_type)
    ):
        inner = column.type.value_type
        kind = pa.float64() if pa.types.is_floating(inner.value_type) else pa.int32()
        new = column.cast(pa.list_(pa.list_(kind, inner.list_size)))
    else:
        return table
    return table.set_column(names.index(name), name, new)


def pc_if_null(column: pa.Array, mask: np.ndarray) -> pa.Array:
    import pyarrow.compute as pc

    return pc.if_else(pa.array(mask), pa.scalar(None, column.type), column)


def read_rows(table: pa.Table) -> OfflineGraphError | None:
    """check_rows, then both readers; returns the error raised (only ours may be)."""
    try:
        check_rows(table)
        trans = Transitions.from_table(table) if "eps_id" in table.column_names else None
        batch = table_to_batch(table)
    except OfflineGraphError as err:
        assert err.reason and str(err).startswith("converted rows"), str(err)
        return err
    assert len(batch["actions"]) == table.num_rows
    if trans is not None:
        obs = trans.obs
        assert len(obs) == len(trans) == table.num_rows
        assert obs.node_ptr[-1] == len(obs.x) and obs.edge_ptr[-1] == obs.edge_index.shape[1]
        assert values_ok(obs) and (obs.num_nodes >= 1).all()
    return None


@FUZZ
@given(table=damaged_tables())
# damage the readers took before check_rows existed (a bare Arrow / numpy error, or read as is)
@example(table=_damage("eps_id", lambda c: pa.array(np.arange(len(c)))))
@example(table=_damage("x", lambda c: OTHER_TYPES["strings"](len(c))))
@example(table=_damage("edge_index", lambda c: OTHER_TYPES["wide_pairs"](len(c))))
@example(table=_damage("edge_index", lambda c: _with_value(c, 0, 99)))
@example(table=_damage("edge_attr", _shift_one))
@example(table=_damage("final_x", lambda c: TABLE.column("x").combine_chunks()))  # no reason
def test_fuzzed_transition_rows(table):
    with bounded():
        read_rows(table)
    count("converted transition rows")


def test_intact_rows_and_their_known_damage():
    assert read_rows(TABLE) is None
    assert read_rows(TABLE.slice(2, 3)) is None
    x = TABLE.column("x").combine_chunks()
    err = read_rows(TABLE.set_column(1, "x", _with_value(x, 4, float("nan"))))
    assert err is not None and err.reason == "nonfinite" and "row 0, episode 'e0', column 'x'" in str(err)
    ei = TABLE.column("edge_index").combine_chunks()
    err = read_rows(TABLE.set_column(2, "edge_index", _with_value(ei, 0, -1)))
    assert err is not None and err.reason == "edge_index_range" and "row 0" in str(err)
    err = read_rows(TABLE.drop_columns(["x"]))
    assert err is not None and err.reason == "schema" and "column 'x'" in str(err)


def test_masked_rows_pass_and_a_mask_of_another_length_is_refused():
    state = episode_state("masked")
    for o in state["observations"]["data"]:
        o["action_mask"] = np.ones(len(o["x"]), bool)
    spec = EpisodeSpec(F, D, 8, action_level="node")
    table = Transitions.concat(read_transitions([pack(state)], [None], spec, 0.9)).to_arrow()
    assert "node_mask" in table.column_names and "final_node_mask" in table.column_names
    assert read_rows(table) is None
    mask = table.column("node_mask").combine_chunks()
    lengths = np.diff(mask.offsets.to_numpy())
    shifted = pa.ListArray.from_arrays(
        pa.array(
            np.r_[0, np.cumsum(lengths + np.r_[1, -1, np.zeros(len(lengths) - 2, int)])].astype(np.int32)
        ),
        mask.flatten(),
    )
    err = read_rows(table.set_column(table.column_names.index("node_mask"), "node_mask", shifted))
    assert err is not None and err.reason == "schema" and "row 0" in str(err) and "list length" in str(err)
