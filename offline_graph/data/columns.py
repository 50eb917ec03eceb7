"""Columnar storage of many graphs: flat arrays plus offsets (no padding, no per-graph objects).

``GraphColumns`` holds G graphs as::

    x          float32 [sumN, F]   node features of all graphs, graph after graph
    node_ptr   int64   [G+1]       graph g's nodes are x[node_ptr[g]:node_ptr[g+1]]
    edge_index int64   [2, sumE]   LOCAL node indices (0..N_g-1), graph after graph
    edge_ptr   int64   [G+1]       graph g's edges are edge_index[:, edge_ptr[g]:edge_ptr[g+1]]
    edge_attr  float32 [sumE, D]   or None when the space has no edge features
    node_mask  bool    [sumN]      or None: allowed node actions (``NodeAction`` spaces)
    edge_mask  bool    [sumE]      or None: allowed edge actions (``EdgeAction`` spaces)

The masks are the observation dicts' ``action_mask`` (see :mod:`offline_graph.data.spaces`); they
are concatenated like ``x`` (node masks) or like ``edge_attr`` (edge masks).

Every operation here (build, take, concat) is vectorized over whole columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from offline_graph.data.graph import GraphDict


def ragged_gather_index(ptr: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Flat positions of the rows of segments ``idx`` of a ragged array with offsets ``ptr``.

    ``ptr=[0,2,5]``, ``idx=[1,0]`` -> ``[2,3,4,0,1]``.
    """
    starts = ptr[idx]
    counts = ptr[idx + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    out_ptr = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    # position within the output minus the output start of its segment, plus the input start
    seg = np.repeat(np.arange(len(idx)), counts)
    return np.arange(total, dtype=np.int64) - out_ptr[seg] + starts[seg]


def masks_or_allowed(masks: Sequence[np.ndarray | None], counts: Sequence[int]) -> np.ndarray:
    """Concatenate per-graph bool masks; a missing mask (None) allows all ``counts[i]`` choices."""
    if not len(masks):
        return np.zeros(0, bool)
    return np.concatenate([
        np.ones(int(c), bool) if m is None else m for m, c in zip(masks, counts)
    ])


def counts_to_ptr(counts: np.ndarray) -> np.ndarray:
    """Segment sizes -> offsets ``[0, c0, c0+c1, ...]`` (int64)."""
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


@dataclass
class GraphColumns:
    """G graphs stored as flat arrays plus offsets (see the module docstring)."""

    x: np.ndarray
    node_ptr: np.ndarray
    edge_index: np.ndarray
    edge_ptr: np.ndarray
    edge_attr: np.ndarray | None = None
    node_mask: np.ndarray | None = None
    edge_mask: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.node_ptr) - 1

    def __repr__(self) -> str:
        ea = "None" if self.edge_attr is None else f"{self.edge_attr.shape[1]}"
        return (
            f"GraphColumns(graphs={len(self)}, nodes={self.x.shape[0]}, "
            f"features={self.x.shape[1]}, edges={self.edge_index.shape[1]}, edge_dim={ea})"
        )

    @property
    def num_nodes(self) -> np.ndarray:
        """Nodes per graph, int64 [G]."""
        return np.diff(self.node_ptr)

    @property
    def num_edges(self) -> np.ndarray:
        """Edges per graph, int64 [G]."""
        return np.diff(self.edge_ptr)

    def choice_ptr(self, level: str) -> np.ndarray:
        """Offsets of the choices of a ``"node"`` / ``"edge"`` selection action."""
        return self.node_ptr if level == "node" else self.edge_ptr

    def mask(self, level: str) -> np.ndarray | None:
        """The ``"node"`` / ``"edge"`` action mask (None: not stored)."""
        return self.node_mask if level == "node" else self.edge_mask

    def set_mask(self, level: str, mask: np.ndarray) -> None:
        """Store the ``"node"`` / ``"edge"`` action mask."""
        if level == "node":
            self.node_mask = mask
        else:
            self.edge_mask = mask

    @property
    def action_mask(self) -> np.ndarray | None:
        """Whichever action mask is stored (node or edge), or None."""
        return self.node_mask if self.node_mask is not None else self.edge_mask

    @property
    def nbytes(self) -> int:
        """Bytes of the real payload (node, edge and feature arrays; offsets excluded)."""
        extra = sum(a.nbytes for a in (self.edge_attr, self.node_mask, self.edge_mask) if a is not None)
        return int(self.x.nbytes + self.edge_index.nbytes + extra)

    @classmethod
    def from_graphs(
        cls, graphs: Sequence[GraphDict], edge_dim: int | None, mask_level: str | None = None
    ) -> "GraphColumns":
        """Concatenate observation dicts (arrays are taken as they are; validate first).

        ``mask_level`` ("node" / "edge" / None): where the dicts' ``action_mask`` goes; a dict
        without one allows every node (edge). None ignores masks.
        """
        xs = [g["x"] for g in graphs]
        eis = [g["edge_index"] for g in graphs]
        node_ptr = counts_to_ptr(np.fromiter((len(a) for a in xs), np.int64, len(xs)))
        edge_ptr = counts_to_ptr(
            np.fromiter((a.shape[1] if a.ndim == 2 else 0 for a in eis), np.int64, len(eis))
        )
        feat = xs[0].shape[1] if xs and xs[0].ndim == 2 else 0
        x = np.concatenate(xs).astype(np.float32, copy=False) if xs else np.zeros((0, feat), np.float32)
        ei = (
            np.concatenate([a.reshape(2, -1) for a in eis], axis=1).astype(np.int64, copy=False)
            if eis
            else np.zeros((2, 0), np.int64)
        )
        ea = None
        if edge_dim is not None:
            eas = [g["edge_attr"].reshape(-1, edge_dim) for g in graphs]
            ea = (
                np.concatenate(eas).astype(np.float32, copy=False)
                if eas
                else np.zeros((0, edge_dim), np.float32)
            )
        out = cls(x=x, node_ptr=node_ptr, edge_index=ei, edge_ptr=edge_ptr, edge_attr=ea)
        if mask_level is not None:
            raw = [g.get("action_mask") for g in graphs]
            out.set_mask(mask_level, masks_or_allowed(
                [None if m is None else np.asarray(m).astype(bool, copy=False).reshape(-1)
                 for m in raw],
                np.diff(out.choice_ptr(mask_level)),
            ))
        return out

    def graph(self, g: int) -> GraphDict:
        """Graph ``g`` as an observation dict (views, no copies)."""
        n0, n1 = self.node_ptr[g], self.node_ptr[g + 1]
        e0, e1 = self.edge_ptr[g], self.edge_ptr[g + 1]
        out: GraphDict = {"x": self.x[n0:n1], "edge_index": self.edge_index[:, e0:e1]}
        if self.edge_attr is not None:
            out["edge_attr"] = self.edge_attr[e0:e1]
        if self.node_mask is not None:
            out["action_mask"] = self.node_mask[n0:n1]
        if self.edge_mask is not None:
            out["action_mask"] = self.edge_mask[e0:e1]
        return out

    def take(self, idx: np.ndarray) -> "GraphColumns":
        """The graphs ``idx`` (any order, repeats allowed), as new columns."""
        idx = np.asarray(idx, dtype=np.int64)
        nsel = ragged_gather_index(self.node_ptr, idx)
        esel = ragged_gather_index(self.edge_ptr, idx)
        return GraphColumns(
            x=self.x[nsel],
            node_ptr=counts_to_ptr(self.num_nodes[idx]),
            edge_index=self.edge_index[:, esel],
            edge_ptr=counts_to_ptr(self.num_edges[idx]),
            edge_attr=None if self.edge_attr is None else self.edge_attr[esel],
            node_mask=None if self.node_mask is None else self.node_mask[nsel],
            edge_mask=None if self.edge_mask is None else self.edge_mask[esel],
        )

    def slice(self, start: int, stop: int) -> "GraphColumns":
        """Graphs ``start..stop-1`` as views."""
        n0, n1 = self.node_ptr[start], self.node_ptr[stop]
        e0, e1 = self.edge_ptr[start], self.edge_ptr[stop]
        return GraphColumns(
            x=self.x[n0:n1],
            node_ptr=self.node_ptr[start : stop + 1] - n0,
            edge_index=self.edge_index[:, e0:e1],
            edge_ptr=self.edge_ptr[start : stop + 1] - e0,
            edge_attr=None if self.edge_attr is None else self.edge_attr[e0:e1],
            node_mask=None if self.node_mask is None else self.node_mask[n0:n1],
            edge_mask=None if self.edge_mask is None else self.edge_mask[e0:e1],
        )

    @staticmethod
    def concat(parts: Sequence["GraphColumns"]) -> "GraphColumns":
        """Concatenate column sets graph-wise (a part without the mask the others have
        contributes all-allowed entries)."""
        if len(parts) == 1:
            return parts[0]

        def masks(name: str, counts: str) -> np.ndarray | None:
            if all(getattr(p, name) is None for p in parts):
                return None
            return masks_or_allowed([getattr(p, name) for p in parts],
                                    [int(getattr(p, counts).sum()) for p in parts])

        node_ptr = counts_to_ptr(np.concatenate([p.num_nodes for p in parts]))
        edge_ptr = counts_to_ptr(np.concatenate([p.num_edges for p in parts]))
        has_ea = parts[0].edge_attr is not None
        return GraphColumns(
            x=np.concatenate([p.x for p in parts]),
            node_ptr=node_ptr,
            edge_index=np.concatenate([p.edge_index for p in parts], axis=1),
            edge_ptr=edge_ptr,
            edge_attr=np.concatenate([p.edge_attr for p in parts]) if has_ea else None,  # type: ignore[misc]
            node_mask=masks("node_mask", "num_nodes"),
            edge_mask=masks("edge_mask", "num_edges"),
        )
