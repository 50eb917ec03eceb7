"""Node- and edge-selection policies: per-choice logits, masked segment log-softmax, and the
per-graph categorical distribution over a variable number of choices.

A batch of B graphs has ``C = sumN`` node choices (``sumE`` edge choices); ``index [C]`` says
which graph each choice belongs to (``batch`` for nodes, ``batch[edge_index[0]]`` for edges)
and is sorted, as PyG batching makes it. The policy's log-probabilities are computed on the
flat, unpadded ``[C]`` scores by a segment log-softmax (exact, masked entries get ``-inf``).

Layout handed to RLlib: RLlib's losses and EnvRunners call
``dist_cls.from_logits(fwd_out[ACTION_DIST_INPUTS])`` with ONE tensor whose first dimension is
the batch, so the normalized log-probabilities are laid out as ``[B, M]`` with
``M = max choices of any graph in this batch`` (not the space's limit); entries past a graph's
own ``N_b`` (``E_b``) and masked entries hold ``finfo.min`` (probability exactly 0 after
``exp``). This is the only dense tensor of the path: ``4 * B * M`` bytes per batch (see
``offline-graph bench bytes``), built on the learner's device after the node/edge data arrived
unpadded. Actions are local indices ``0..N_b-1`` (``0..E_b-1``), the column of that layout.
"""

from __future__ import annotations

import torch
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical
from torch import nn

from offline_graph.rllib.core.gnn_layers import GraphEncoding, mlp

OUTPUT_KEY = "output_index"
"""Observation key of a head with several outputs per choice: the one each graph reads ``[G]``."""


def segment_log_softmax(
    logits: torch.Tensor, index: torch.Tensor, num_segments: int, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Log-softmax of ``logits [C]`` within each segment of ``index [C]`` (``0..S-1``).

    ``mask [C]`` (bool): False entries get ``-inf`` and do not take part in the normalisation.
    A segment whose entries are all masked gets ``-inf`` everywhere (no legal choice).
    """
    from torch_geometric.utils import scatter  # here: see gnn_layers (prelearner actors)

    neg_inf = torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device)
    if mask is not None:
        logits = torch.where(mask.bool(), logits, neg_inf)
    seg_max = scatter(logits, index, dim=0, dim_size=num_segments, reduce="max")
    seg_max = torch.where(torch.isfinite(seg_max), seg_max, torch.zeros_like(seg_max)).detach()
    shifted = logits - seg_max[index]
    seg_sum = scatter(shifted.exp(), index, dim=0, dim_size=num_segments, reduce="sum")
    return shifted - seg_sum.log()[index]


def dense_choices(values: torch.Tensor, index: torch.Tensor, num_segments: int) -> torch.Tensor:
    """``values [C]`` (sorted ``index``) -> ``[S, M]`` with ``M`` = the largest segment;
    empty slots and ``-inf`` entries hold ``finfo.min`` (probability 0, never NaN)."""
    from torch_geometric.utils import to_dense_batch

    low = torch.finfo(values.dtype).min
    values = torch.where(torch.isfinite(values), values, torch.full_like(values, low))
    dense, _ = to_dense_batch(values.unsqueeze(-1), index, fill_value=low, batch_size=num_segments)
    if dense.shape[1] == 0:  # no choice anywhere in the batch: one impossible column
        dense = torch.full((num_segments, 1, 1), low, dtype=values.dtype, device=values.device)
    return dense.squeeze(-1)


class TorchChoiceCategorical(TorchCategorical):
    """RLlib's categorical over this batch's ``[B, M]`` choice layout (see the module doc).

    ``from_logits`` takes the normalized, masked log-probabilities the selection heads emit;
    ``sample()`` draws only allowed choices, ``to_deterministic().sample()`` is the most
    likely allowed choice, ``logp(actions)`` is the exact log-probability of local indices.
    """


def choice_index(level: str, enc: GraphEncoding, obs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Graph id of every node (``level="node"``) or edge choice ``[C]`` (sorted)."""
    if level == "node":
        return enc.batch
    return enc.batch[obs["edge_index"][0].long()]


def choice_features(level: str, enc: GraphEncoding, obs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Every choice's own features: its node embedding ``h_v``, or an edge's ``[h_src, h_dst]``."""
    if level == "node":
        return enc.nodes
    src, dst = obs["edge_index"].long()
    return torch.cat([enc.nodes[src], enc.nodes[dst]], dim=-1)


class SelectionHead(nn.Module):
    """Scores every node (``level="node"``) or every edge (``level="edge"``) of every graph.

    Node score: ``MLP([h_v, g_b])``; edge score: ``MLP([h_src, h_dst, g_b, edge_attr])``, where
    ``h`` are node embeddings and ``g_b`` the embedding of the choice's graph. Output: masked,
    normalized log-probabilities in the ``[B, M]`` layout of :class:`TorchChoiceCategorical`.
    """

    def __init__(
        self,
        level: str,
        node_dim: int,
        graph_dim: int,
        edge_dim: int | None,
        head_hidden: int,
        outputs: int = 1,
    ):
        super().__init__()
        self.level = level
        self.outputs = int(outputs)
        self.edge_dim = edge_dim if level == "edge" else None
        in_dim = node_dim + graph_dim if level == "node" else 2 * node_dim + graph_dim + (edge_dim or 0)
        self.mlp = mlp(in_dim, head_hidden, self.outputs)

    def choice_index(self, enc: GraphEncoding, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Graph id of every choice (sorted)."""
        return choice_index(self.level, enc, obs)

    def scores(self, enc: GraphEncoding, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Raw score of every choice ``[C]`` (node / edge order of the batch)."""
        index, inputs = self.choice_inputs(enc, obs)
        return self.scores_of(inputs, index, obs)

    def choice_inputs(
        self, enc: GraphEncoding, obs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(graph id ``[C]``, the MLP's input ``[C, in_dim]``) of every choice: what heads
        built alike share (:func:`offline_graph.rllib.core.critic.heads_q`)."""
        index = self.choice_index(enc, obs)
        parts = [choice_features(self.level, enc, obs), enc.graphs[index]]
        if self.edge_dim is not None:
            parts.append(obs["edge_attr"].to(enc.nodes.dtype))
        return index, torch.cat(parts, dim=-1)

    def scores_of(
        self, inputs: torch.Tensor, index: torch.Tensor, obs: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """:meth:`scores` from :meth:`choice_inputs`."""
        out = self.mlp(inputs)
        if self.outputs == 1:
            return out.squeeze(-1)
        return out.gather(1, obs[OUTPUT_KEY][index].unsqueeze(1)).squeeze(1)

    def forward(self, enc: GraphEncoding, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        num_graphs = enc.ptr.numel() - 1
        index = self.choice_index(enc, obs)
        logp = segment_log_softmax(self.scores(enc, obs), index, num_graphs, obs.get("action_mask"))
        return dense_choices(logp, index, num_graphs)

    def dense_scores(self, enc: GraphEncoding, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Raw scores in the ``[B, M]`` layout, masked and missing choices ``finfo.min`` (a
        value per choice, e.g. Q; never chosen by a max / argmax, 0 in a logsumexp)."""
        scores = self.scores(enc, obs)
        mask = obs.get("action_mask")
        if mask is not None:
            scores = torch.where(mask.bool(), scores, torch.full_like(scores, float("-inf")))
        return dense_choices(scores, self.choice_index(enc, obs), enc.ptr.numel() - 1)
