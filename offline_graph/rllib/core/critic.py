"""Q networks over PyG-batched graphs, for value-based offline RL (IQL, CQL) in ``GNNModule``.

A :class:`QNetwork` is its own :class:`~offline_graph.rllib.core.gnn_layers.GraphEncoder` (or
:class:`~offline_graph.rllib.core.hetero.TypedGraphEncoder` for typed graphs) plus one
or two Q heads (twin Q) and optionally a state-value head, all reading one encoding of the
batch's graphs (one GNN pass per network per update). Q values use the layout of the policy's
action distribution inputs:

- ``Discrete(k)``: ``[G, k]`` (an MLP on the graph embedding);
- ``NodeAction`` / ``EdgeAction``: one Q per node / edge from the same node (edge) features a
  selection policy head reads (:class:`~offline_graph.rllib.core.selection.SelectionHead`), laid out
  ``[G, M]`` with masked and missing choices at ``finfo.min``: never chosen by an argmax,
  never the max, 0 in a logsumexp.

:func:`masked_max` / :func:`masked_argmax` / :func:`masked_logsumexp` read that layout; a graph
without a legal choice gets a max of 0 (nothing to bootstrap from) instead of ``finfo.min``.
"""

from __future__ import annotations

import copy
from typing import Any, cast

import gymnasium as gym
import torch
from ray.rllib.core.columns import Columns
from torch import nn

from offline_graph.data.graphs.spaces import selection_level
from offline_graph.rllib.core.gnn_layers import GraphEncoder, GraphEncoding, mlp
from offline_graph.rllib.core.hetero import TypedGraphEncoder
from offline_graph.rllib.core.selection import (
    OUTPUT_KEY,
    SelectionHead,
    choice_features,
    choice_index,
    dense_choices,
)


def legal_pool(enc: GraphEncoding, obs: dict[str, torch.Tensor], level: str) -> torch.Tensor:
    """Max and mean of the legal choices' features per graph ``[G, 2 * d]`` (node level: the
    node embeddings, edge level: ``[h_src, h_dst]``; legal: ``action_mask`` when present, else
    every choice); 0 for a graph without a legal choice."""
    from torch_geometric.utils import scatter  # here: see gnn_layers (prelearner actors)

    feats, index = choice_features(level, enc, obs), choice_index(level, enc, obs)
    mask = obs.get("action_mask")
    keep = torch.ones(feats.shape[0], dtype=torch.bool, device=feats.device) if mask is None else mask.bool()
    num = enc.ptr.numel() - 1
    low = torch.finfo(feats.dtype).min
    masked = torch.where(keep[:, None], feats, torch.full_like(feats, low))
    best = scatter(masked, index, 0, dim_size=num, reduce="max")
    count = scatter(keep.to(feats.dtype), index, 0, dim_size=num, reduce="sum")[:, None]
    mean = scatter(feats * keep[:, None], index, 0, dim_size=num, reduce="sum") / count.clamp(min=1.0)
    return torch.cat([torch.where(count > 0, best, torch.zeros_like(best)), mean], dim=-1)


class QHead(nn.Module):
    """Q values of every action of every graph (layout: module doc). With ``legal_context``
    a node / edge head also reads :func:`legal_pool` of its graph (the Q of a choice can
    depend on which other choices are legal: the best of the allowed ones)."""

    def __init__(
        self,
        action_space: gym.Space,
        node_dim: int,
        graph_dim: int,
        edge_dim: int | None,
        head_hidden: int,
        legal_context: bool = False,
        steps: int = 0,
    ) -> None:
        super().__init__()
        level = selection_level(action_space)
        self.steps = int(steps)
        self.choice: SelectionHead | None = None
        self.graph: nn.Module | None = None
        self.context = level if legal_context else None
        if level is not None:
            extra = 0 if self.context is None else 2 * node_dim * (1 if level == "node" else 2)
            self.choice = SelectionHead(
                level, node_dim, graph_dim + extra, edge_dim, head_hidden, outputs=max(1, self.steps)
            )
        else:
            self.num_actions = int(action_space.n)  # type: ignore[attr-defined]
            self.graph = mlp(graph_dim, head_hidden, self.num_actions * max(1, self.steps))

    def forward(self, enc: GraphEncoding, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.choice is not None:
            if self.context is not None:
                ctx = legal_pool(enc, obs, self.context)
                enc = GraphEncoding(enc.nodes, torch.cat([enc.graphs, ctx], dim=-1), enc.batch, enc.ptr)
            return self.choice.dense_scores(enc, obs)
        assert self.graph is not None  # noqa: S101 (one of the two is built)
        q = self.graph(enc.graphs)
        if not self.steps:
            return q  # type: ignore[no-any-return]
        at = obs[OUTPUT_KEY]
        return q.view(at.numel(), self.steps, self.num_actions)[
            torch.arange(at.numel(), device=at.device), at
        ]


def heads_q(heads: list[QHead], enc: GraphEncoding, obs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """``[head(enc, obs) for head in heads]``, the same values, with what node / edge heads
    built alike share computed once: the pooled legal choices and every choice's input
    features (one per head before: with FQE's bootstrap heads most of a gradient step's
    time). Only without gradients or on a detached encoding: where gradients reach ``enc``
    the shared inputs would sum them in another order."""
    first = heads[0].choice if heads else None
    alike = {(h.context, h.choice.level, h.choice.outputs) if h.choice else None for h in heads}
    if first is None or len(heads) < 2 or len(alike) != 1:
        return [head(enc, obs) for head in heads]
    if heads[0].context is not None:
        ctx = legal_pool(enc, obs, heads[0].context)
        enc = GraphEncoding(enc.nodes, torch.cat([enc.graphs, ctx], dim=-1), enc.batch, enc.ptr)
    index, inputs = first.choice_inputs(enc, obs)
    mask = obs.get("action_mask")
    out = []
    for head in heads:  # each head as SelectionHead.dense_scores
        assert head.choice is not None  # noqa: S101 (alike: all are choice heads)
        scores = head.choice.scores_of(inputs, index, obs)
        if mask is not None:
            scores = torch.where(mask.bool(), scores, torch.full_like(scores, float("-inf")))
        out.append(dense_choices(scores, index, enc.ptr.numel() - 1))
    return out


class QNetwork(nn.Module):
    """Encoder + ``num_q`` Q heads (+ a value head ``V(s)`` when ``value``)."""

    def __init__(
        self,
        encoder: GraphEncoder | TypedGraphEncoder,
        action_space: gym.Space,
        edge_dim: int | None,
        head_hidden: int,
        num_q: int = 1,
        value: bool = False,
        legal_context: bool = False,
        steps: int = 0,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        dims = (encoder.hidden, encoder.out_dim, edge_dim, head_hidden, legal_context, steps)
        self.q_heads = nn.ModuleList([QHead(action_space, *dims) for _ in range(num_q)])
        self.v_head = mlp(encoder.out_dim, head_hidden, 1) if value else None

    def forward(self, obs: dict[str, torch.Tensor]) -> tuple[GraphEncoding, list[torch.Tensor]]:
        """(the encoding, each head's Q values ``[G, ...]``) of every graph of ``obs``."""
        enc = self.encoder(obs)
        if torch.is_grad_enabled():  # training: each head's own path (gradients summed as ever)
            return enc, [head(enc, obs) for head in self.q_heads]
        return enc, heads_q(cast(list[QHead], list(self.q_heads)), enc, obs)

    def values(self, enc: GraphEncoding) -> torch.Tensor:
        """``V(s)`` ``[G]`` (the value head must exist)."""
        assert self.v_head is not None  # noqa: S101 (built with value=True)
        return self.v_head(enc.graphs).squeeze(-1)  # type: ignore[no-any-return]

    def frozen_copy(self) -> "QNetwork":
        """A copy for target values: same weights, no gradients."""
        target = copy.deepcopy(self)
        for p in target.parameters():
            p.requires_grad_(False)
        return target


def legal(q: torch.Tensor) -> torch.Tensor:
    """Bool ``[G, M]``: entries that are actions (not masked, not filler)."""
    return q > torch.finfo(q.dtype).min


def masked_argmax(q: torch.Tensor) -> torch.Tensor:
    """The best legal action of every graph ``[G]`` (0 where none is legal)."""
    return q.argmax(dim=-1)


def masked_max(q: torch.Tensor) -> torch.Tensor:
    """The largest legal Q of every graph ``[G]``; 0 where no action is legal."""
    best = q.max(dim=-1).values
    return torch.where(legal(q).any(dim=-1), best, torch.zeros_like(best))


def masked_logsumexp(q: torch.Tensor) -> torch.Tensor:
    """``log sum_a exp Q(s, a)`` over the legal actions of every graph ``[G]``; 0 where none."""
    out = torch.logsumexp(q, dim=-1)
    return torch.where(legal(q).any(dim=-1), out, torch.zeros_like(out))


def pick(q: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """``Q(s, a)`` ``[T]`` of the rows' actions."""
    return q.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def value_train_outputs(module: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """The training forward of IQL / CQL modules over the value-run batch
    (:mod:`offline_graph.data.learning.value_runs`: ``obs["target"]`` = s, ``obs["next_index"]`` = s'):
    each network encodes the batch's graphs once.

    IQL: ``ACTION_DIST_INPUTS`` (policy at s), ``q`` ``[H, T, ...]`` (every head at s), ``v``,
    ``v_next`` ``[T]``, ``q_target`` (min over the target heads at s). CQL: ``q`` ``[1, T, ...]``,
    ``q_next`` (online, for the double-DQN argmax) and ``q_next_target`` at s'.
    """
    obs = batch[Columns.OBS]
    s = torch.as_tensor(obs["target"]).long()
    s_next = torch.as_tensor(obs["next_index"]).long()
    if module.gnn_config["value_based"] == "cql":
        _, (q,) = module._q(obs)
        with torch.no_grad():
            _, (q_target,) = module._q_target(obs)
        return {
            Columns.ACTION_DIST_INPUTS: q[s],
            "q": q[s].unsqueeze(0),
            "q_next": q[s_next].detach(),
            "q_next_target": q_target[s_next],
        }
    enc = module._encoder(obs)
    c_enc, qs = module._critic(obs)
    v = module._critic.values(c_enc)
    with torch.no_grad():
        _, target_qs = module._critic_target(obs)
    return {
        Columns.ACTION_DIST_INPUTS: module._pi_head(enc, obs)[s],
        "q": torch.stack([q[s] for q in qs]),
        "v": v[s],
        "v_next": v[s_next],
        "q_target": torch.stack([q[s] for q in target_qs]).min(dim=0).values,
    }
