"""Minibatches of a typed graph batch (:func:`~offline_graph.data.graphs.typed_columns.collate_typed`'s
layout): the graphs ``idx`` re-batched per node type and per edge type, on the batch's device,
as :func:`~offline_graph.rllib.core.graph_minibatch.select_graphs` does for a plain graph."""

from __future__ import annotations

import torch

from offline_graph.data.graphs.typed import edge_ends

GraphBatch = dict[str, torch.Tensor]


def is_typed_batch(obs: GraphBatch) -> bool:
    """A typed graph batch (``ptr:<type>`` keys, no plain ``ptr``)."""
    return "ptr" not in obs and any(k.startswith("ptr:") for k in obs)


def typed_ptr(obs: GraphBatch, node_type: str | None = None) -> torch.Tensor:
    """``ptr`` of ``node_type`` (None: the first node type's; every type has B + 1 entries)."""
    key = f"ptr:{node_type}" if node_type is not None else next(k for k in obs if k.startswith("ptr:"))
    return obs[key]


def select_nodes(ptr: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the rows of graphs ``idx``' nodes in order, their new ``ptr``, each old graph's new
    position or -1): the node side of selecting graphs, plain or per node type."""
    device = ptr.device
    counts = (ptr[1:] - ptr[:-1])[idx]
    new_ptr = torch.zeros(idx.numel() + 1, dtype=ptr.dtype, device=device)
    torch.cumsum(counts, 0, out=new_ptr[1:])
    local = torch.arange(int(new_ptr[-1]), device=device) - torch.repeat_interleave(new_ptr[:-1], counts)
    rows = torch.repeat_interleave(ptr[:-1][idx], counts) + local
    position = torch.full((ptr.numel() - 1,), -1, dtype=torch.long, device=device)
    position[idx] = torch.arange(idx.numel(), device=device)
    return rows, new_ptr, position


def select_edges(position: torch.Tensor, graph: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the edges of the chosen graphs, in the graphs' new order, each one's new graph) from
    every edge's old graph ``graph`` and :func:`select_nodes`' ``position``."""
    new = position[graph]
    chosen = torch.nonzero(new >= 0).flatten()
    chosen = chosen[torch.sort(new[chosen], stable=True).indices]
    return chosen, new[chosen]


def select_typed(obs: GraphBatch, idx: torch.Tensor, node_type: str | None = None) -> GraphBatch:
    """The graphs ``idx`` (distinct graph ids, any order) of a typed graph batch, as a new one
    in that order; ``action_mask`` follows ``node_type``'s nodes (a ``NodeAction``'s type)."""
    types = [k[len("ptr:") :] for k in obs if k.startswith("ptr:")]
    idx = idx.to(device=obs[f"ptr:{types[0]}"].device, dtype=torch.long)
    out: GraphBatch = {}
    kept: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    for t in types:
        rows, new_ptr, position = kept[t] = select_nodes(obs[f"ptr:{t}"], idx)
        counts = new_ptr[1:] - new_ptr[:-1]
        out[f"x:{t}"] = obs[f"x:{t}"][rows]
        out[f"ptr:{t}"] = new_ptr
        out[f"batch:{t}"] = torch.repeat_interleave(torch.arange(idx.numel(), device=idx.device), counts)
        if t == node_type and "action_mask" in obs:
            out["action_mask"] = obs["action_mask"][rows]
    for key in [k for k in obs if k.startswith("edge_index:")]:
        edge_type = key[len("edge_index:") :]
        src, dst = edge_ends(edge_type)
        edge_index = obs[key]
        graph = obs[f"batch:{src}"][edge_index[0]] if edge_index.numel() else edge_index[0]
        chosen, moved = select_edges(kept[src][2], graph)
        shift = torch.stack([kept[end][1][moved] - obs[f"ptr:{end}"][graph[chosen]] for end in (src, dst)])
        out[key] = edge_index[:, chosen] + shift
        if f"edge_attr:{edge_type}" in obs:
            out[f"edge_attr:{edge_type}"] = obs[f"edge_attr:{edge_type}"][chosen]
    if "globals" in obs:
        out["globals"] = obs["globals"][idx]
    return out
