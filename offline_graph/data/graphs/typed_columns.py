"""Columnar storage and PyG-style batching of typed graphs (pure numpy / pyarrow).

``TypedColumns`` holds G typed graphs as one :class:`GraphColumns` per *part*: a node type
(its ``x [sumN_t, F_t]`` and ``node_ptr``; the action mask when the action picks this type's
nodes; ``globals`` on the first node type) or an edge type ``src__rel__dst`` (its
``edge_index [2, sumE_r]`` with indices local to the source / target type's nodes of the same
graph, ``edge_ptr`` and ``edge_attr``). Every part has G graphs, so take / slice / concat are
the parts' own. Nothing is padded: each type stores its real counts.

Arrow rows (one list per transition, as :mod:`offline_graph.data.graphs.graph_arrow`): a part's
columns are named ``<column>:<part>`` (``x:job``, ``node_mask:job``,
``edge_index:job__fits__machine``, ``edge_attr:job__fits__machine``), ``globals`` as for a
plain graph.

:func:`collate_typed` gives the learner's layout, per node type ``x:<t>``, ``batch:<t>``,
``ptr:<t>``, per edge type ``edge_index:<r>`` (row 0 offset by the source type's ``ptr``, row 1
by the target type's) and ``edge_attr:<r>``, then ``action_mask`` and ``globals``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.graphs.typed import TypedGraph, edge_ends

NODE_COLUMNS = ("x", "node_mask", "globals")
EDGE_COLUMNS = ("edge_index", "edge_attr")


def _is_edge(part: str) -> bool:
    return "__" in part


@dataclass
class TypedColumns:
    """G typed graphs, one :class:`GraphColumns` per node type and per edge type."""

    parts: dict[str, GraphColumns]
    mask_type: str | None = None
    """The node type whose nodes a ``NodeAction`` picks (its part holds ``node_mask``)."""

    def __len__(self) -> int:
        return len(next(iter(self.parts.values())))

    def __repr__(self) -> str:
        counts = ", ".join(
            f"{k}: {int(p.edge_ptr[-1] - p.edge_ptr[0]) if _is_edge(k) else p.x.shape[0]}"
            for k, p in self.parts.items()
        )
        return f"TypedColumns(graphs={len(self)}, {counts})"

    @property
    def node_types(self) -> list[str]:
        return [k for k in self.parts if not _is_edge(k)]

    @property
    def edge_types(self) -> list[str]:
        return [k for k in self.parts if _is_edge(k)]

    @property
    def num_nodes(self) -> np.ndarray:
        """Nodes per graph over all types, int64 [G]."""
        return np.sum([self.parts[t].num_nodes for t in self.node_types], axis=0)

    @property
    def num_edges(self) -> np.ndarray:
        """Edges per graph over all types, int64 [G]."""
        types = self.edge_types
        return (
            np.sum([self.parts[r].num_edges for r in types], axis=0)
            if types
            else np.zeros(len(self), np.int64)
        )

    @property
    def globals(self) -> np.ndarray | None:
        return self.parts[self.node_types[0]].globals

    @globals.setter
    def globals(self, value: np.ndarray | None) -> None:
        self.parts[self.node_types[0]].globals = value

    @property
    def nbytes(self) -> int:
        return int(sum(p.nbytes for p in self.parts.values()))

    def _map(self, fn: Any) -> "TypedColumns":
        return TypedColumns({k: fn(p) for k, p in self.parts.items()}, self.mask_type)

    def take(self, idx: np.ndarray) -> "TypedColumns":
        return self._map(lambda p: p.take(idx))

    def slice(self, start: int, stop: int) -> "TypedColumns":
        return self._map(lambda p: p.slice(start, stop))

    def without_nodes(self, count: int) -> "TypedColumns":
        return self._map(lambda p: p.without_nodes(count))

    @staticmethod
    def concat(parts: Sequence["TypedColumns"]) -> "TypedColumns":  # type: ignore[override]
        if len(parts) == 1:
            return parts[0]
        keys = list(parts[0].parts)
        return TypedColumns(
            {k: GraphColumns.concat([p.parts[k] for p in parts]) for k in keys}, parts[0].mask_type
        )

    # the action's choices (a NodeAction over ``mask_type``), as GraphColumns offers them
    def choice_ptr(self, level: str) -> np.ndarray:
        if level == "graph":
            return np.arange(len(self) + 1, dtype=np.int64)
        return self.parts[self.mask_type or self.node_types[0]].node_ptr

    def mask(self, level: str) -> np.ndarray | None:
        return None if self.mask_type is None else self.parts[self.mask_type].node_mask

    def set_mask(self, level: str, mask: np.ndarray) -> None:
        self.parts[self.mask_type or self.node_types[0]].node_mask = mask

    @property
    def action_mask(self) -> np.ndarray | None:
        return self.mask("node")

    def graph(self, g: int) -> dict[str, Any]:
        """Graph ``g`` as a typed observation dict (views)."""
        out: dict[str, Any] = {"x": {}, "edge_index": {}, "edge_attr": {}}
        for key, part in self.parts.items():
            one = part.graph(g)
            if _is_edge(key):
                out["edge_index"][key] = one["edge_index"]
                if "edge_attr" in one:
                    out["edge_attr"][key] = one["edge_attr"]
                continue
            out["x"][key] = one["x"]
            if "action_mask" in one:
                out["action_mask"] = one["action_mask"]
            if "globals" in one:
                out["globals"] = one["globals"]
        return out

    @classmethod
    def from_graphs(
        cls, graphs: Sequence[dict[str, Any]], space: TypedGraph, mask_type: str | None = None
    ) -> "TypedColumns":
        """Concatenate normalized typed observation dicts
        (:func:`~offline_graph.data.graphs.typed.typed_observation`); a dict without
        ``action_mask`` allows every node of ``mask_type``."""
        none, no_edges = np.zeros((0, 0), np.float32), np.zeros((2, 0), np.int64)
        parts: dict[str, GraphColumns] = {}
        for t in space.node_dims:  # each part batched as a plain graph of its own columns
            nodes = [{"x": g["x"][t], "edge_index": no_edges} for g in graphs]
            if t == mask_type:  # the NodeAction's type: its masks (none: every node allowed)
                for node, g in zip(nodes, graphs):
                    if g.get("action_mask") is not None:
                        node["action_mask"] = g["action_mask"]
            parts[t] = GraphColumns.from_graphs(nodes, None, "node" if t == mask_type else None)
        for r, dim in space.edge_dims.items():
            edges = [{"x": none, "edge_index": g["edge_index"][r]} for g in graphs]
            if dim is not None:
                for edge, g in zip(edges, graphs):
                    edge["edge_attr"] = g["edge_attr"][r]
            parts[r] = GraphColumns.from_graphs(edges, dim)
        out = cls(parts, mask_type)
        if graphs and "globals" in graphs[0]:
            out.globals = np.stack([np.asarray(g["globals"], np.float32).reshape(-1) for g in graphs])
        return out

    def bad_edge(self) -> tuple[str, int, int, int] | None:
        """The first edge index outside its type's nodes: (edge type, graph, row, index), or None."""
        for r in self.edge_types:
            part = self.parts[r]
            ei = part.edge_index
            if not ei.size:
                continue
            for row, end in enumerate(edge_ends(r)):
                limit = np.repeat(self.parts[end].num_nodes, part.num_edges)
                bad = (ei[row] < 0) | (ei[row] >= limit)
                if bad.any():
                    j = int(np.argmax(bad))
                    return r, int(np.searchsorted(part.edge_ptr, j, side="right") - 1), row, int(ei[row, j])
        return None


def typed_arrays(graphs: TypedColumns, arrays_of: Any) -> dict[str, pa.Array]:
    """The Arrow list columns of ``graphs`` (``<column>:<part>``; ``globals`` plain), each part's
    through ``arrays_of`` (:func:`~offline_graph.data.graphs.graph_arrow.graph_arrays`)."""
    out: dict[str, pa.Array] = {}
    for key, part in graphs.parts.items():
        keep = EDGE_COLUMNS if _is_edge(key) else NODE_COLUMNS
        for name, arr in arrays_of(part, keep).items():
            out[name if name == "globals" else f"{name}:{key}"] = arr
    return out


def typed_names(table_columns: Sequence[str], prefix: str = "") -> dict[str, dict[str, str]]:
    """Per part: its columns in a table (``{part: {column: table column}}``), in table order."""
    parts: dict[str, dict[str, str]] = {}
    for name in table_columns:
        if not name.startswith(prefix) or ":" not in name:
            continue
        column, _, part = name[len(prefix) :].partition(":")
        if column in NODE_COLUMNS or column in EDGE_COLUMNS:
            parts.setdefault(part, {})[column] = name
    return parts


def table_to_typed(table: pa.Table, prefix: str, graphs_of: Any) -> TypedColumns:
    """The typed graphs of a transition table (inverse of :func:`typed_arrays`): each part's
    columns through ``graphs_of`` (:func:`~offline_graph.data.graphs.graph_arrow.table_to_graphs`)."""
    parts: dict[str, GraphColumns] = {}
    mask_type = None
    rows = table.num_rows
    names = typed_names(table.column_names, prefix)
    first_node = next((part for part in names if not _is_edge(part)), None)
    for part, columns in names.items():
        chosen = {column: table.column(name) for column, name in columns.items()}
        if part == first_node and prefix + "globals" in table.column_names:  # any column order
            chosen["globals"] = table.column(prefix + "globals")
        one = graphs_of(pa.table(chosen), rows)
        parts[part] = one
        if one.node_mask is not None:
            mask_type = part
    return TypedColumns(parts, mask_type)


def collate_typed(graphs: TypedColumns) -> dict[str, np.ndarray]:
    """The learner's batch of typed graphs (module doc)."""
    out: dict[str, np.ndarray] = {}
    count = len(graphs)
    ids = np.arange(count, dtype=np.int64)
    ptrs: dict[str, np.ndarray] = {}
    for t in graphs.node_types:
        part = graphs.parts[t]
        ptr = ptrs[t] = part.node_ptr - part.node_ptr[0]
        out[f"x:{t}"] = part.x
        out[f"batch:{t}"] = np.repeat(ids, part.num_nodes)
        out[f"ptr:{t}"] = ptr
        if part.node_mask is not None:
            out["action_mask"] = part.node_mask
        if part.globals is not None:
            out["globals"] = part.globals
    for r in graphs.edge_types:
        part = graphs.parts[r]
        src, dst = edge_ends(r)
        counts = part.num_edges
        shift = np.stack([np.repeat(ptrs[src][:-1], counts), np.repeat(ptrs[dst][:-1], counts)])
        out[f"edge_index:{r}"] = part.edge_index + shift
        if part.edge_attr is not None:
            out[f"edge_attr:{r}"] = part.edge_attr
    return out
