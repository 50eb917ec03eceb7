"""Graph encoder for :class:`offline_graph.rllib.core.gnn_module.GNNModule` (PyG convs + pooling).

The encoder reads the PyG-style batched observation dict (``x``, ``edge_index``, optional
``edge_attr``, ``batch``, ``ptr``) and returns a :class:`GraphEncoding` holding both node- and
graph-level embeddings, so that heads of any granularity (graph logits now, node/edge selection
later) can be stacked on top. No batch-coupled layers (no BatchNorm): a graph's output never
depends on the other graphs in the batch.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from offline_graph.rllib.core.settings import CONVS

# PyG is imported where it is used, not here: the prelearner actors import this module (the
# config's module class) but never run a layer, and PyG's import is ~1 s of CPU per actor.

# pool name -> multiple of `hidden` in the graph embedding width
POOLS = {"mean": 1, "max": 1, "sum": 1, "meanmax": 2}


def pool_nodes(h: torch.Tensor, batch: torch.Tensor, num_graphs: int, pool: str) -> torch.Tensor:
    """``h [sumN, H]`` pooled per graph -> ``[num_graphs, H * POOLS[pool]]`` (``size`` fixes the
    graph count, never inferred; "meanmax" concatenates mean and max)."""
    from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool

    if pool == "mean":
        return global_mean_pool(h, batch, size=num_graphs)
    if pool == "max":
        return global_max_pool(h, batch, size=num_graphs)
    if pool == "sum":
        return global_add_pool(h, batch, size=num_graphs)
    mean = global_mean_pool(h, batch, size=num_graphs)
    return torch.cat([mean, global_max_pool(h, batch, size=num_graphs)], dim=-1)


class GraphEncoding(NamedTuple):
    """Encoder output: node embeddings [sumN, hidden], graph embeddings [B, out_dim], index."""

    nodes: torch.Tensor
    graphs: torch.Tensor
    batch: torch.Tensor
    ptr: torch.Tensor


def mlp(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    """Linear -> ReLU -> Linear."""
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))


class NodeLinear(nn.Module):
    """A per-node Linear layer with a conv's call signature; ignores edges (bag of nodes)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.lin = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        return self.lin(x)


def make_conv(kind: str, hidden: int, edge_dim: int | None) -> nn.Module:
    """One hidden -> hidden message-passing layer of type ``kind`` (see ``CONVS``)."""
    from torch_geometric.nn import GCNConv, GINConv, GINEConv, SAGEConv

    if kind == "gcn":
        return GCNConv(hidden, hidden)
    if kind == "sage":
        return SAGEConv(hidden, hidden)
    if kind == "gin":
        return GINConv(mlp(hidden, hidden, hidden))
    if kind == "gine":
        return GINEConv(mlp(hidden, hidden, hidden), edge_dim=edge_dim)
    raise ValueError(f"unknown conv {kind!r}; expected one of {CONVS}")


def batch_index(obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(batch [sumN], ptr [B+1], B) from the obs dict; a dict without both is one graph."""
    x = obs["x"]
    batch, ptr = obs.get("batch"), obs.get("ptr")
    if ptr is None:
        n = x.shape[0]
        if batch is None:
            batch = torch.zeros(n, dtype=torch.long, device=x.device)
        counts = torch.bincount(batch.long(), minlength=1)
        ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    if batch is None:
        counts = ptr[1:] - ptr[:-1]
        batch = torch.repeat_interleave(torch.arange(counts.numel(), device=x.device), counts)
    return batch.long(), ptr.long(), ptr.numel() - 1


class GraphEncoder(nn.Module):
    """Input projection F->hidden, ``layers`` residual message-passing layers, pooling.

    ``h0 = relu(W x)``; ``h_{l+1} = h_l + relu(conv_l(h_l, edges))``; graph embedding =
    ``pool(h_L)`` over each graph's nodes, then the observation's graph-level ``globals [B, G]``
    concatenated when ``globals_dim`` > 0 (node and edge heads read the graph embedding through
    ``batch``: one row per graph on the device, never a copy per node). With ``bag_of_nodes``
    every conv is replaced by a per-node Linear, so edges are never read (a structure-blind
    baseline of equal depth).
    """

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        layers: int,
        conv: str,
        pool: str,
        edge_dim: int | None,
        bag_of_nodes: bool = False,
        globals_dim: int = 0,
    ):
        super().__init__()
        self.conv_kind = "none" if bag_of_nodes else conv
        self.pool = pool
        self.hidden = hidden
        self.globals_dim = globals_dim
        self.out_dim = hidden * POOLS[pool] + globals_dim
        self.inp = nn.Linear(in_dim, hidden)
        self.convs = nn.ModuleList(
            NodeLinear(hidden) if bag_of_nodes else make_conv(conv, hidden, edge_dim) for _ in range(layers)
        )

    def forward(self, obs: dict[str, torch.Tensor]) -> GraphEncoding:
        batch, ptr, num_graphs = batch_index(obs)
        x = obs["x"].to(self.inp.weight.dtype)
        h = torch.relu(self.inp(x))
        # bag of nodes: `edge_index` stays None and is never read (NodeLinear ignores it)
        edge_index = obs["edge_index"].long() if self.conv_kind != "none" else None
        edge_attr = obs["edge_attr"].to(h.dtype) if self.conv_kind == "gine" else None
        for conv in self.convs:
            if edge_attr is not None:
                m = conv(h, edge_index, edge_attr)
            else:
                m = conv(h, edge_index)
            h = h + torch.relu(m)
        return GraphEncoding(h, self.readout(h, batch, num_graphs, obs), batch, ptr)

    def readout(
        self, h: torch.Tensor, batch: torch.Tensor, num_graphs: int, obs: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """Pool node embeddings into [num_graphs, out_dim] (``size`` fixes B, never inferred),
        the observation's ``globals`` concatenated."""
        pooled = pool_nodes(h, batch, num_graphs, self.pool)
        return with_globals(pooled, obs, self.globals_dim, "GraphEncoder")


def with_globals(pooled: torch.Tensor, obs: dict[str, torch.Tensor], dim: int, where: str) -> torch.Tensor:
    """``pooled [B, P]`` with the observation's graph-level ``globals [B, dim]`` concatenated
    (``dim`` 0: as it is); ValueError naming ``where`` when the batch lacks them."""
    if not dim:
        return pooled
    num_graphs = pooled.shape[0]
    g = obs.get("globals")
    if g is None or tuple(g.shape) != (num_graphs, dim):
        found = "no 'globals'" if g is None else f"globals {list(g.shape)}"
        raise ValueError(
            f"{where}: the observation batch must carry globals [{num_graphs}, {dim}] (found "
            f"{found}). The module's observation space is a Dict with flat parts; batch its "
            "observations with offline_graph.collate."
        )
    return torch.cat([pooled, g.to(pooled.dtype)], dim=-1)
