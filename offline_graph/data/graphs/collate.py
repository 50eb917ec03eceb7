"""PyG-style batching of columnar graphs into one disjoint-union graph (pure numpy).

Input: ``GraphColumns`` of B graphs. Output (the learner's observation layout)::

    x          float32 [sumN, F]
    edge_index int64   [2, sumE]   GLOBAL node indices: graph b's edges offset by ptr[b]
    edge_attr  float32 [sumE, D]   only if present
    batch      int64   [sumN]      graph id of every node
    ptr        int64   [B+1]       graph b's nodes are x[ptr[b]:ptr[b+1]]
    action_mask bool   [sumN] or [sumE]   only with a NodeAction / EdgeAction mask: allowed
                                   nodes (concatenated like x) or edges (like edge_attr)

Batching rules are data (cf. PyG ``__inc__`` / ``__cat_dim__``): both directions loop over
:data:`offline_graph.data.graphs.columns.BATCHING_RULES` (level, growing axis, offset by the node
count, batch key); only ``batch`` and ``ptr`` are built here.
"""

from __future__ import annotations

import numpy as np

from offline_graph.data.graphs.columns import BATCHING_RULES, MASK_COLUMNS, GraphColumns
from offline_graph.data.graphs.typed_columns import TypedColumns, collate_typed


def collate(graphs: GraphColumns | TypedColumns) -> dict[str, np.ndarray]:
    """Batch ``graphs`` into the PyG layout above; the inverse is :func:`uncollate`. Typed
    graphs: :func:`~offline_graph.data.graphs.typed_columns.collate_typed`'s layout."""
    if isinstance(graphs, TypedColumns):
        return collate_typed(graphs)
    ptr = graphs.node_ptr - graphs.node_ptr[0]
    graph_ids = np.arange(len(graphs), dtype=np.int64)
    first_node = {  # per node / per edge: the first node index of its graph
        "node": lambda: np.repeat(ptr[:-1], graphs.num_nodes),
        "edge": lambda: np.repeat(ptr[:-1], graphs.num_edges),
    }
    out = {"batch": np.repeat(graph_ids, graphs.num_nodes), "ptr": ptr}
    for key, value in graphs.present().items():
        rule = BATCHING_RULES[key]
        if rule.offset_by_nodes:
            value = value + np.expand_dims(first_node[rule.level](), tuple(range(rule.axis)))
        out[rule.batch_key] = value
    return out


def uncollate(batch: dict[str, np.ndarray], mask_level: str | None = None) -> GraphColumns:
    """Inverse of :func:`collate`: back to per-graph local edge indices and offsets.

    ``mask_level`` ("node" / "edge") says where ``action_mask`` belongs (ignored when None).
    """
    ptr = np.asarray(batch["ptr"], dtype=np.int64)
    edge_index = np.asarray(batch["edge_index"], dtype=np.int64)
    graph_of = {
        "node": np.asarray(batch["batch"], dtype=np.int64),
        "edge": np.asarray(batch["batch"])[edge_index[0]] if edge_index.size else np.zeros(0, np.int64),
    }
    num_edges = np.bincount(graph_of["edge"], minlength=len(ptr) - 1).astype(np.int64)
    edge_ptr = np.zeros(len(ptr), dtype=np.int64)
    np.cumsum(num_edges, out=edge_ptr[1:])
    columns: dict[str, np.ndarray] = {}
    for key, rule in BATCHING_RULES.items():
        value = batch.get(rule.batch_key)
        if value is None or (key in MASK_COLUMNS and rule.level != mask_level):
            continue
        value = np.asarray(value)
        if rule.offset_by_nodes:
            value = value - np.expand_dims(ptr[graph_of[rule.level]], tuple(range(rule.axis)))
        columns[key] = value
    return GraphColumns(node_ptr=ptr, edge_ptr=edge_ptr, **columns)
