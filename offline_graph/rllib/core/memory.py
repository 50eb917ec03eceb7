"""Memory over time for :class:`offline_graph.rllib.core.gnn_module.GNNModule`.

A temporal layer maps the encoder's :class:`GraphEncoding` (nodes ``h [sumN, H]``, graphs
``g [G, E]``) to the encoding the heads read. It runs in one of two layouts:

- **runs** (training, :meth:`TemporalLayer.forward_runs`): the batch holds whole runs of
  consecutive steps; ``obs["prev"] [G]`` (previous step's graph or -1), ``obs["seq_pos"] [G]``
  (position in the run, 0 iff ``prev == -1``) and, for ``node_gru``, ``obs["node_prev"]
  [sumN]`` (the same node in graph ``prev[i]`` or -1) link the graphs over time.
- **steps** (inference, :meth:`TemporalLayer.forward_step`): one graph per episode; the
  history arrives as RLlib's ``STATE_IN`` (batched :meth:`TemporalLayer.initial_state`) and the
  layer returns the ``STATE_OUT`` for the next step.

Both layouts compute exactly the same function of a run's graphs (tested to 1e-5).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


from offline_graph.rllib.core.gnn_layers import GraphEncoding, pool_nodes

MEMORY_KINDS = (None, "gru", "node_gru")
RUN_KEYS = ("prev", "seq_pos", "node_prev", "target")
_WHERE = "GNNModule memory"

State = dict[str, torch.Tensor]


def is_run_layout(obs: dict[str, Any]) -> bool:
    """True for the training layout of runs (``prev`` / ``target`` keys present)."""
    return "prev" in obs or "target" in obs


def run_index(obs: dict[str, Any], key: str, device: torch.device) -> torch.Tensor:
    """``obs[key]`` as int64 on ``device``; a clear error when the run layout lacks it."""
    value = obs.get(key)
    if value is None:
        raise ValueError(
            f"{_WHERE}: obs[{key!r}] must be given in the training layout of runs (found keys "
            f"{sorted(k for k in obs if k in RUN_KEYS)}). Build the batch with "
            "offline_graph.data.learning.sequences.collate_runs (prev, seq_pos, node_prev, target)."
        )
    return torch.as_tensor(value, device=device).long()


def check_order(prev: torch.Tensor, seq_pos: torch.Tensor) -> None:
    """``prev == -1`` iff ``seq_pos == 0``, and ``seq_pos[prev[i]] == seq_pos[i] - 1``."""
    has = prev >= 0
    ok = torch.where(has, seq_pos[prev.clamp(min=0)] == seq_pos - 1, seq_pos == 0)
    if not bool(ok.all()):
        bad = int(torch.nonzero(~ok)[0, 0])
        raise ValueError(
            f"{_WHERE}: obs['prev'] / obs['seq_pos'] must link each graph to the previous "
            f"position of its run (found graph {bad}: prev={int(prev[bad])}, "
            f"seq_pos={int(seq_pos[bad])}). prev is -1 exactly at seq_pos 0."
        )


def gather_rows(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``values[index]`` with zero rows where ``index == -1``."""
    rows = values[index.clamp(min=0)]
    keep = (index >= 0).reshape(index.shape + (1,) * (rows.dim() - index.dim()))
    return torch.where(keep, rows, torch.zeros_like(rows))


class TemporalLayer(nn.Module):
    """Base: ``out_dim`` is the width of the graph embedding the heads read."""

    out_dim: int

    def initial_state(self) -> State:
        raise NotImplementedError

    def forward_runs(self, enc: GraphEncoding, obs: dict[str, Any]) -> GraphEncoding:
        raise NotImplementedError

    def forward_step(self, enc: GraphEncoding, state: State | None) -> tuple[GraphEncoding, State]:
        raise NotImplementedError

    def _zeros(self, *shape: int) -> torch.Tensor:
        p = next(self.parameters())
        return torch.zeros(shape, dtype=p.dtype, device=p.device)


class FrameStack(TemporalLayer):
    """Stacks the last ``k`` graph embeddings of the episode: frame ``j`` (0 = current,
    ``j`` = ``j`` steps back) is ``g[frame_j] + pos[j]`` (learnable ``pos [k, E]``). Combine,
    over the VALID frames only (missing frames before the episode / run start are never read):
    ``Linear(2E -> E)(concat(masked mean, masked max))``. Node embeddings stay the current
    frame's ``h``; selection heads read ``[h_v, combined g_b]``.

    State (steps layout): ``frames [k-1, E]`` (raw ``g`` of the previous frames, most recent
    first) and ``valid [k-1]`` (1.0 / 0.0); initial: zeros.
    """

    def __init__(self, k: int, graph_dim: int):
        super().__init__()
        self.k = k
        self.out_dim = graph_dim
        self.pos = nn.Parameter(0.1 * torch.randn(k, graph_dim))
        self.combine_lin = nn.Linear(2 * graph_dim, graph_dim)

    def initial_state(self) -> State:
        return {"frames": self._zeros(self.k - 1, self.out_dim), "valid": self._zeros(self.k - 1)}

    def combine(self, frames: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``frames [G, k, E]``, ``valid [G, k]`` (bool, column 0 always True) -> ``[G, E]``."""
        f = frames + self.pos
        m = valid.unsqueeze(-1)
        count = valid.sum(1, keepdim=True).clamp(min=1).to(f.dtype)
        mean = torch.where(m, f, torch.zeros_like(f)).sum(1) / count
        low = torch.finfo(f.dtype).min
        mx = torch.where(m, f, torch.full_like(f, low)).max(1).values
        return self.combine_lin(torch.cat([mean, mx], dim=-1))

    def forward_runs(self, enc: GraphEncoding, obs: dict[str, Any]) -> GraphEncoding:
        g = enc.graphs
        prev = run_index(obs, "prev", g.device)
        if "seq_pos" in obs:
            check_order(prev, run_index(obs, "seq_pos", g.device))
        cols = [torch.arange(g.shape[0], device=g.device)]
        for _ in range(self.k - 1):
            cols.append(torch.where(cols[-1] >= 0, prev[cols[-1].clamp(min=0)], cols[-1]))
        idx = torch.stack(cols, dim=1)  # [G, k], -1 = missing
        return enc._replace(graphs=self.combine(g[idx.clamp(min=0)], idx >= 0))

    def forward_step(self, enc: GraphEncoding, state: State | None) -> tuple[GraphEncoding, State]:
        g = enc.graphs
        b = g.shape[0]
        if state is None:
            state = {"frames": self._zeros(b, self.k - 1, self.out_dim), "valid": self._zeros(b, self.k - 1)}
        frames = torch.cat([g.unsqueeze(1), state["frames"].to(g)], dim=1)
        valid = torch.cat([g.new_ones(b, 1), state["valid"].to(g)], dim=1)
        out = enc._replace(graphs=self.combine(frames, valid > 0.5))
        return out, {"frames": frames[:, : self.k - 1], "valid": valid[:, : self.k - 1]}


class GraphGRU(TemporalLayer):
    """Recurrent graph state ``s_i = GRUCell(g_i, s_prev[i])`` (zeros at a run / episode
    start), width ``E``; the heads read ``concat(g_i, s_i)`` (``out_dim = 2E``) so the
    current observation is never squeezed through the state. Runs are processed position by
    position (one batched GRUCell call per ``seq_pos`` value). State: ``h [E]``, zeros.
    """

    def __init__(self, graph_dim: int):
        super().__init__()
        self.mem_dim = graph_dim
        self.out_dim = 2 * graph_dim
        self.cell = nn.GRUCell(graph_dim, graph_dim)

    def initial_state(self) -> State:
        return {"h": self._zeros(self.mem_dim)}

    def forward_runs(self, enc: GraphEncoding, obs: dict[str, Any]) -> GraphEncoding:
        g = enc.graphs
        prev = run_index(obs, "prev", g.device)
        seq_pos = run_index(obs, "seq_pos", g.device)
        check_order(prev, seq_pos)
        s = g.new_zeros(g.shape[0], self.mem_dim)
        for p in range(int(seq_pos.max()) + 1 if g.shape[0] else 0):
            idx = torch.nonzero(seq_pos == p).squeeze(-1)
            if idx.numel():
                s = s.index_copy(0, idx, self.cell(g[idx], gather_rows(s, prev[idx])))
        return enc._replace(graphs=torch.cat([g, s], dim=-1))

    def forward_step(self, enc: GraphEncoding, state: State | None) -> tuple[GraphEncoding, State]:
        g = enc.graphs
        h = g.new_zeros(g.shape[0], self.mem_dim) if state is None else state["h"].to(g)
        s = self.cell(g, h)
        return enc._replace(graphs=torch.cat([g, s], dim=-1)), {"h": s}


class NodeGRU(TemporalLayer):
    """Recurrent per-node state ``n_v = GRUCell(h_v, n_{node_prev[v]})`` (zeros where
    ``node_prev == -1``), width ``H``, never padded (``[sumN, H]`` in the node layout). Node
    embeddings for the heads = ``n``; graph embedding = the encoder's pooling over ``n``
    (``out_dim = E``, unchanged). State: ``node_h [N, H]`` aligned to the step's nodes;
    initial / "no previous state" = 0 rows (read as zeros for every node).
    """

    def __init__(self, hidden: int, pool: str, graph_dim: int):
        super().__init__()
        self.hidden = hidden
        self.pool = pool
        self.out_dim = graph_dim
        self.cell = nn.GRUCell(hidden, hidden)

    def initial_state(self) -> State:
        return {"node_h": self._zeros(0, self.hidden)}

    def _encoding(self, enc: GraphEncoding, n: torch.Tensor) -> GraphEncoding:
        graphs = pool_nodes(n, enc.batch, enc.ptr.numel() - 1, self.pool)
        # the encoder's columns after its pooling are the observation's globals: kept
        graphs = torch.cat([graphs, enc.graphs[:, graphs.shape[1] :]], dim=-1)
        return enc._replace(nodes=n, graphs=graphs)

    def forward_runs(self, enc: GraphEncoding, obs: dict[str, Any]) -> GraphEncoding:
        h = enc.nodes
        prev = run_index(obs, "prev", h.device)
        seq_pos = run_index(obs, "seq_pos", h.device)
        node_prev = run_index(obs, "node_prev", h.device)
        check_order(prev, seq_pos)
        node_pos = seq_pos[enc.batch]
        linked = node_prev >= 0
        if bool(linked.any()):
            ok = enc.batch[node_prev[linked]] == prev[enc.batch[linked]]
            if not bool(ok.all()):
                raise ValueError(
                    f"{_WHERE}: obs['node_prev'] must point into graph prev[i] for every node of "
                    "graph i (found a node linked to another graph). Use -1 for nodes without "
                    "a previous state."
                )
        n = h.new_zeros(h.shape[0], self.hidden)
        for p in range(int(seq_pos.max()) + 1 if seq_pos.numel() else 0):
            idx = torch.nonzero(node_pos == p).squeeze(-1)
            if idx.numel():
                n = n.index_copy(0, idx, self.cell(h[idx], gather_rows(n, node_prev[idx])))
        return self._encoding(enc, n)

    def forward_step(self, enc: GraphEncoding, state: State | None) -> tuple[GraphEncoding, State]:
        h = enc.nodes
        prev_h = None if state is None else state.get("node_h")
        if prev_h is None or prev_h.numel() == 0:
            prev_h = h.new_zeros(h.shape[0], self.hidden)
        elif prev_h.shape != (h.shape[0], self.hidden):
            raise ValueError(
                f"{_WHERE}: STATE_IN['node_h'] must be [sumN, H] = [{h.shape[0]}, {self.hidden}] "
                f"aligned to this batch's nodes (found {tuple(prev_h.shape)}). Give 0 rows (the "
                "initial state) or zeros for nodes without a previous state."
            )
        n = self.cell(h, prev_h.to(h))
        return self._encoding(enc, n), {"node_h": n}


def build_temporal(cfg: dict[str, Any], hidden: int, graph_dim: int) -> TemporalLayer | None:
    """The temporal layer for a resolved GNN config, or None (no memory, ``frame_stack == 1``)."""
    if cfg["frame_stack"] > 1:
        return FrameStack(cfg["frame_stack"], graph_dim)
    if cfg["memory"] == "gru":
        return GraphGRU(graph_dim)
    if cfg["memory"] == "node_gru":
        return NodeGRU(hidden, cfg["pool"], graph_dim)
    return None
