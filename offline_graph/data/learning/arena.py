"""Graphs in a FIFO ring of preallocated columns (pure numpy): chunks of graphs are appended at
the end and dropped from the front, without concatenating what is stored.

Each level (``graph``: one entry per graph, ``node``, ``edge``) keeps its columns in arrays
with room to spare, the growing axis first (``edge_index`` edge-major ``[E, 2]``, seen as its
``[2, E]`` transpose), and ``node_ptr`` / ``edge_ptr`` hold each stored graph's absolute
offsets. A chunk goes after the newest one, or, when it does not fit there, at the start of
the arrays (all levels at once, so each graph's nodes and edges stay where its offsets say)
once the oldest chunks have left room there; only when neither fits are the live chunks copied,
in order, to arrays twice what must fit. So a chunk is copied once when added, and
:meth:`GraphArena.take` gathers straight from the ring; :meth:`GraphArena.view` (every live
graph as one :class:`GraphColumns` of views) first lays a wrapped ring out in order.
Per-graph extra columns (a transition's action, reward, ...) live at the ``graph`` level.

What :meth:`view` and :meth:`take` return equals ``GraphColumns.concat`` of the live chunks
(and its ``take``): a mask column is present if a live chunk has it, and a live chunk without
it contributes all-allowed entries.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Mapping

import numpy as np

from offline_graph.data.graphs.columns import BATCHING_RULES, MASK_COLUMNS, GraphColumns
from offline_graph.data.graphs.typed_columns import TypedColumns

LEVELS = ("graph", "node", "edge")
_PTR = ("node", "edge")


def _level(name: str) -> str:
    return BATCHING_RULES[name].level if name in BATCHING_RULES else "graph"


class GraphArena:
    """A FIFO of chunks of graphs with per-graph extra columns (see the module doc)."""

    def __init__(self, reserve: int = 0) -> None:
        self.reserve = int(reserve)
        """Live graphs to make room for whenever the arrays are laid out (their nodes and
        edges at the mean size of the graphs then held): the arrays then need not grow
        while the buffer fills up."""
        self._reset()

    def _reset(self) -> None:
        self._store: dict[str, np.ndarray] = {}  # column -> storage, growing axis first
        self._ptr = {lv: np.zeros(1, np.int64) for lv in _PTR}  # absolute offsets per stored graph
        self._lo = dict.fromkeys(LEVELS, 0)  # the oldest live chunk's start
        self._hi = dict.fromkeys(LEVELS, 0)  # the newest live chunk's end
        self._end = dict.fromkeys(LEVELS, 0)  # wrapped: where the chunks before the start end
        self._cap = dict.fromkeys(LEVELS, 0)
        self._chunks: deque[tuple[dict[str, int], frozenset[str]]] = deque()  # sizes, masks
        self._upper = 0  # wrapped: live chunks still at the end of the arrays (the oldest ones)

    def __len__(self) -> int:
        return sum(s["graph"] for s, _ in self._chunks)

    @property
    def chunks(self) -> int:
        """Live chunks."""
        return len(self._chunks)

    def push(self, graphs: GraphColumns, extra: Mapping[str, np.ndarray]) -> None:
        """Append ``graphs`` (and ``extra[k][i]`` for graph ``i``) as the newest chunk."""
        ptrs = {"node": graphs.node_ptr, "edge": graphs.edge_ptr}
        sizes = {"graph": len(graphs), **{lv: int(p[-1] - p[0]) for lv, p in ptrs.items()}}
        values = {k: v.T if BATCHING_RULES[k].axis == 1 else v for k, v in graphs.present().items()}
        values.update(extra)
        if not self._chunks:  # empty: this chunk sets the columns
            self._reset()
        plain = {k for k in self._store if k not in MASK_COLUMNS}
        if self._chunks and plain != {k for k in values if k not in MASK_COLUMNS}:
            raise ValueError(
                "GraphArena.push: chunks must have the same columns (found "
                f"{sorted(values)} after {sorted(plain)}). Keep one buffer per kind of data."
            )
        at = self._place(sizes)
        for level, ptr in ptrs.items():
            self._ptr[level][at["graph"] : at["graph"] + sizes["graph"] + 1] = ptr - ptr[0] + at[level]
        for name in (*values, *(m for m in MASK_COLUMNS if m in self._store and m not in values)):
            self._write(name, values.get(name), at[_level(name)], sizes[_level(name)])
        self._hi = {lv: at[lv] + sizes[lv] for lv in LEVELS}
        self._chunks.append((sizes, frozenset(k for k in MASK_COLUMNS if k in values)))

    def pop(self) -> None:
        """Drop the oldest chunk."""
        sizes, _ = self._chunks.popleft()
        self._lo = {lv: self._lo[lv] + sizes[lv] for lv in LEVELS}
        if self._upper:
            self._upper -= 1
            if not self._upper:  # the chunks at the end are gone: the live ones start at 0
                self._lo = dict.fromkeys(LEVELS, 0)
        if not self._chunks:
            self._lo, self._hi, self._upper = dict(self._hi), dict(self._hi), 0

    def take(self, idx: np.ndarray) -> tuple[GraphColumns, dict[str, np.ndarray]]:
        """Live graphs ``idx`` (oldest first numbering; any order, repeats allowed), gathered
        from the ring, and their extra columns."""
        idx = np.asarray(idx, dtype=np.int64)
        if self._upper:
            upper = self._end["graph"] - self._lo["graph"]
            phys = np.where(idx < upper, idx + self._lo["graph"], idx - upper)
        else:
            phys = idx + self._lo["graph"]
        cols, extra = self._columns()
        whole = GraphColumns(node_ptr=self._ptr["node"], edge_ptr=self._ptr["edge"], **cols)
        return whole.take(phys), {k: np.take(v, phys) for k, v in extra.items()}

    def view(self) -> tuple[GraphColumns, dict[str, np.ndarray]]:
        """Every live graph, oldest first (views of the storage), and their extra columns."""
        if self._upper:
            self._relayout(dict.fromkeys(LEVELS, 0))
        lo, hi = self._lo, self._hi
        cols, extra = self._columns((lo, hi))
        ptrs = {lv: self._ptr[lv][lo["graph"] : hi["graph"] + 1] - lo[lv] for lv in _PTR}
        return GraphColumns(node_ptr=ptrs["node"], edge_ptr=ptrs["edge"], **cols), extra

    def _columns(
        self, bounds: tuple[Mapping[str, int], Mapping[str, int]] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(graph columns, extra columns) of the storage: whole, or ``lo[level]:hi[level]``
        of ``bounds = (lo, hi)``; masks only where a live chunk has them."""
        masks = frozenset().union(*(m for _, m in self._chunks))
        cols: dict[str, np.ndarray] = {}
        extra: dict[str, np.ndarray] = {}
        for name, store in self._store.items():
            if name in MASK_COLUMNS and name not in masks:
                continue
            level = _level(name)
            part = store if bounds is None else store[bounds[0][level] : bounds[1][level]]
            if name in BATCHING_RULES:
                cols[name] = part.T if BATCHING_RULES[name].axis == 1 else part
            else:
                extra[name] = part
        return cols, extra

    def _place(self, sizes: Mapping[str, int]) -> dict[str, int]:
        """Where the next chunk goes (see the module doc); lays the ring out anew if needed.
        A graph level leaves one slot free before the oldest chunk: its offsets' end."""
        lo, hi, cap = self._lo, self._hi, self._cap
        pad = {"graph": 1, "node": 0, "edge": 0}
        if self._upper:  # wrapped: between the newest and the oldest chunk
            if all(hi[lv] + sizes[lv] + pad[lv] <= lo[lv] for lv in LEVELS):
                return dict(hi)
        elif all(hi[lv] + sizes[lv] <= cap[lv] for lv in LEVELS):
            return dict(hi)
        elif self._chunks and all(sizes[lv] + pad[lv] <= lo[lv] for lv in LEVELS):
            self._end, self._upper = dict(hi), len(self._chunks)  # wrap to the start
            return dict.fromkeys(LEVELS, 0)
        self._relayout(sizes)
        return dict(self._hi)

    def _relayout(self, sizes: Mapping[str, int]) -> None:
        """Copy the live chunks, in order, to the start of arrays with room for ``sizes``
        more (twice what must fit, or twice :attr:`reserve` graphs, when the current ones are
        too small)."""
        segments = {  # per level: the live ranges in order
            lv: [(self._lo[lv], self._end[lv]), (0, self._hi[lv])]
            if self._upper
            else [(self._lo[lv], self._hi[lv])]
            for lv in LEVELS
        }
        live = {lv: sum(b - a for a, b in segments[lv]) for lv in LEVELS}
        want = {lv: live[lv] + sizes[lv] for lv in LEVELS}
        scale = max(1.0, self.reserve / max(1, want["graph"]))
        cap = {lv: max(self._cap[lv], 2 * int(np.ceil(want[lv] * scale))) for lv in LEVELS}
        for name, store in list(self._store.items()):
            new = np.empty((cap[_level(name)], *store.shape[1:]), store.dtype)
            np.concatenate([store[a:b] for a, b in segments[_level(name)]], out=new[: live[_level(name)]])
            self._store[name] = new
        for level in _PTR:
            ptr = np.zeros(cap["graph"] + 1, np.int64)
            done = 0
            for (a, b), (na, _) in zip(segments["graph"], segments[level]):
                ptr[done : done + b - a + 1] = self._ptr[level][a : b + 1] - na + ptr[done]
                done += b - a
            self._ptr[level] = ptr
        self._cap, self._lo, self._hi, self._upper = cap, dict.fromkeys(LEVELS, 0), live, 0

    def _write(self, name: str, value: np.ndarray | None, at: int, count: int) -> None:
        """``value`` (None: a mask the chunk lacks, all allowed) at ``at`` of ``name``."""
        store = self._store.get(name)
        if store is None:
            assert value is not None  # noqa: S101 (None only for a stored mask)
            store = np.empty((self._cap[_level(name)], *value.shape[1:]), value.dtype)
            if name in MASK_COLUMNS:
                store[:] = True  # the live chunks without this mask allow every choice
            self._store[name] = store
        elif value is not None:
            if store.shape[1:] != value.shape[1:]:
                raise ValueError(
                    f"GraphArena.push, column {name!r}: chunks must have the same trailing shape "
                    f"(found {list(value.shape[1:])} after {list(store.shape[1:])})."
                )
            dtype = np.result_type(store.dtype, value.dtype)
            if dtype != store.dtype:  # as np.concatenate would promote
                self._store[name] = store = store.astype(dtype)
        store[at : at + count] = True if value is None else value


class TypedArena:
    """:class:`GraphArena`'s FIFO for typed graphs: one arena per node / edge type
    (:class:`~offline_graph.data.graphs.typed_columns.TypedColumns` parts), the extra columns
    in the first; every part holds the same graphs in the same chunks."""

    def __init__(self, keys: list[str], mask_type: str | None, reserve: int = 0) -> None:
        self._arenas = {k: GraphArena(reserve) for k in keys}
        self._mask_type = mask_type

    @property
    def reserve(self) -> int:
        return next(iter(self._arenas.values())).reserve

    @reserve.setter
    def reserve(self, value: int) -> None:
        for arena in self._arenas.values():
            arena.reserve = int(value)

    def __len__(self) -> int:
        return len(next(iter(self._arenas.values())))

    def push(self, graphs: TypedColumns, extra: Mapping[str, np.ndarray]) -> None:
        if set(graphs.parts) != set(self._arenas):
            raise ValueError(
                f"TypedArena.push: chunks must have the same node and edge types (found "
                f"{list(graphs.parts)} after {list(self._arenas)}). Keep one buffer per kind of data."
            )
        for i, (key, arena) in enumerate(self._arenas.items()):
            arena.push(graphs.parts[key], extra if i == 0 else {})

    def pop(self) -> None:
        for arena in self._arenas.values():
            arena.pop()

    def _joined(self, each: Any) -> tuple[TypedColumns, dict[str, np.ndarray]]:
        parts: dict[str, GraphColumns] = {}
        extra: dict[str, np.ndarray] = {}
        for i, (key, arena) in enumerate(self._arenas.items()):
            parts[key], more = each(arena)
            extra = more if i == 0 else extra
        return TypedColumns(parts, self._mask_type), extra

    def take(self, idx: np.ndarray) -> tuple[TypedColumns, dict[str, np.ndarray]]:
        return self._joined(lambda arena: arena.take(idx))

    def view(self) -> tuple[TypedColumns, dict[str, np.ndarray]]:
        return self._joined(lambda arena: arena.view())


def arena_for(graphs: GraphColumns | TypedColumns, reserve: int = 0) -> GraphArena | TypedArena:
    """An empty arena for chunks like ``graphs``."""
    if isinstance(graphs, TypedColumns):
        return TypedArena(list(graphs.parts), graphs.mask_type, reserve)
    return GraphArena(reserve)
