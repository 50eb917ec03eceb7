"""PyG-style batching of columnar graphs into one disjoint-union graph (pure numpy).

Input: ``GraphColumns`` of B graphs. Output (the learner's observation layout)::

    x          float32 [sumN, F]
    edge_index int64   [2, sumE]   GLOBAL node indices: graph b's edges offset by ptr[b]
    edge_attr  float32 [sumE, D]   only if present
    batch      int64   [sumN]      graph id of every node
    ptr        int64   [B+1]       graph b's nodes are x[ptr[b]:ptr[b+1]]
    action_mask bool   [sumN] or [sumE]   only with a NodeAction / EdgeAction mask: allowed
                                   nodes (concatenated like x) or edges (like edge_attr)

Batching rules are data (cf. PyG ``__inc__`` / ``__cat_dim__``): ``BATCHING_RULES`` says per
key whether it is node-, edge- or graph-level and whether it is offset by the node count.
"""

from __future__ import annotations

import numpy as np

from offline_graph.data.columns import GraphColumns

# key -> (level, offset by cumulative node count)
BATCHING_RULES: dict[str, tuple[str, bool]] = {
    "x": ("node", False),
    "edge_index": ("edge", True),
    "edge_attr": ("edge", False),
    "batch": ("node", False),
    "ptr": ("graph", False),
    "action_mask": ("node or edge", False),
}


def collate(graphs: GraphColumns) -> dict[str, np.ndarray]:
    """Batch ``graphs`` into the PyG layout above; the inverse is :func:`uncollate`."""
    ptr = graphs.node_ptr - graphs.node_ptr[0]
    num_nodes = np.diff(ptr)
    num_edges = np.diff(graphs.edge_ptr)
    edge_offset = np.repeat(ptr[:-1], num_edges)
    out = {
        "x": graphs.x,
        "edge_index": graphs.edge_index + edge_offset[None, :],
        "batch": np.repeat(np.arange(len(num_nodes), dtype=np.int64), num_nodes),
        "ptr": ptr,
    }
    if graphs.edge_attr is not None:
        out["edge_attr"] = graphs.edge_attr
    if graphs.action_mask is not None:
        out["action_mask"] = graphs.action_mask
    return out


def uncollate(batch: dict[str, np.ndarray], mask_level: str | None = None) -> GraphColumns:
    """Inverse of :func:`collate`: back to per-graph local edge indices and offsets.

    ``mask_level`` ("node" / "edge") says where ``action_mask`` belongs (ignored when None).
    """
    ptr = np.asarray(batch["ptr"], dtype=np.int64)
    edge_index = np.asarray(batch["edge_index"], dtype=np.int64)
    graph_of_edge = np.asarray(batch["batch"])[edge_index[0]] if edge_index.size else np.zeros(
        0, np.int64
    )
    num_edges = np.bincount(graph_of_edge, minlength=len(ptr) - 1).astype(np.int64)
    edge_ptr = np.zeros(len(ptr), dtype=np.int64)
    np.cumsum(num_edges, out=edge_ptr[1:])
    local = edge_index - ptr[graph_of_edge][None, :]
    graphs = GraphColumns(
        x=np.asarray(batch["x"]),
        node_ptr=ptr,
        edge_index=local,
        edge_ptr=edge_ptr,
        edge_attr=batch.get("edge_attr"),
    )
    if mask_level is not None and batch.get("action_mask") is not None:
        graphs.set_mask(mask_level, batch["action_mask"])
    return graphs
