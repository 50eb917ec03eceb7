"""Minibatches of a PyG-batched train batch without slicing node-level arrays.

RLlib's learners split a train batch with ``MiniBatchCyclicIterator``: ``SampleBatch``
slicing, ``shuffle()`` and ``concat_samples`` treat every leaf as one row per transition,
so node- and edge-level arrays (``x [sumN, F]``, ``edge_index [2, sumE]``) are cut at the
wrong places (``../shared/RAY_NOTES.md``). Here a minibatch is a set of *transitions*: the
per-transition columns are indexed, and the observations are re-batched from the chosen
graphs (:func:`select_graphs`, torch, on the batch's device) with fresh ``batch`` / ``ptr``
and edge indices offset to the new node positions.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from offline_graph.data.errors import ConfigError
from offline_graph.rllib.core.typed_minibatch import (
    is_typed_batch,
    select_edges,
    select_nodes,
    select_typed,
    typed_ptr,
)

GraphBatch = dict[str, torch.Tensor]


def select_graphs(obs: GraphBatch, idx: torch.Tensor, mask_level: str | None = None) -> GraphBatch:
    """The graphs ``idx`` (distinct graph ids, any order) of a PyG batch, as a new PyG batch
    in that order: ``x``, ``edge_index`` (offset to the new node ids), ``edge_attr``,
    ``batch``, ``ptr``, ``globals`` and ``action_mask`` (node- or edge-level per ``mask_level``)."""
    if is_typed_batch(obs):  # mask_level "node@<type>": a NodeAction over that node type
        return select_typed(obs, idx, mask_level.partition("@")[2] or None if mask_level else None)
    ptr, edge_index = obs["ptr"], obs["edge_index"]
    device = ptr.device
    idx = idx.to(device=device, dtype=torch.long)
    node_idx, new_ptr, position = select_nodes(ptr, idx)
    counts = new_ptr[1:] - new_ptr[:-1]
    edge_graph = obs["batch"][edge_index[0]] if edge_index.numel() else edge_index[0]
    edge_idx, moved = select_edges(position, edge_graph)
    shift = new_ptr[moved] - ptr[edge_graph[edge_idx]]
    out: GraphBatch = {
        "x": obs["x"][node_idx],
        "edge_index": edge_index[:, edge_idx] + shift,
        "batch": torch.repeat_interleave(
            torch.arange(idx.numel(), device=device, dtype=obs["batch"].dtype), counts
        ),
        "ptr": new_ptr,
    }
    if "edge_attr" in obs:
        out["edge_attr"] = obs["edge_attr"][edge_idx]
    if "globals" in obs:  # graph-level features: one row per graph
        out["globals"] = obs["globals"][idx]
    if "action_mask" in obs:
        if mask_level not in ("node", "edge"):
            raise ConfigError(
                f"select_graphs: mask_level must be 'node' or 'edge' when the batch has an "
                f"action_mask (found {mask_level!r}). Pass the action space's selection level."
            )
        out["action_mask"] = obs["action_mask"][node_idx if mask_level == "node" else edge_idx]
    return out


def select_transitions(columns: dict[str, Any], idx: torch.Tensor, mask_level: str | None) -> dict[str, Any]:
    """Transitions ``idx`` of one module's train batch: graphs re-batched, every other
    column (tensor, array or list, possibly nested in dicts) indexed along its first axis."""
    out: dict[str, Any] = {}
    for key, value in columns.items():
        if key == Columns.OBS:
            out[key] = select_graphs(value, idx, mask_level)
        else:
            out[key] = _take(value, idx)
    dist_inputs = out.get(Columns.ACTION_DIST_INPUTS)
    if (
        mask_level
        and mask_level.partition("@")[0] in ("node", "edge")
        and Columns.OBS in out
        and dist_inputs is not None
    ):
        # node / edge selection: [b, M] of these graphs, as the module lays them out
        obs = out[Columns.OBS]
        if is_typed_batch(obs):
            ptr = typed_ptr(obs, mask_level.partition("@")[2] or None)
            counts = ptr[1:] - ptr[:-1]
        elif mask_level == "node":
            counts = obs["ptr"][1:] - obs["ptr"][:-1]
        else:
            counts = torch.bincount(obs["batch"][obs["edge_index"][0]], minlength=obs["ptr"].numel() - 1)
        width = max(1, int(counts.max()) if counts.numel() else 1)
        out[Columns.ACTION_DIST_INPUTS] = dist_inputs[:, :width]
    return out


def _take(value: Any, idx: torch.Tensor) -> Any:
    if isinstance(value, torch.Tensor):
        return value[idx.to(value.device)]
    if isinstance(value, np.ndarray):
        return value[idx.cpu().numpy()]
    if isinstance(value, dict):
        return {k: _take(v, idx) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [value[i] for i in idx.tolist()]
    return value


def num_transitions(columns: dict[str, Any]) -> int:
    """Transitions in one module's train batch: the graphs of its observations."""
    obs = columns.get(Columns.OBS)
    if isinstance(obs, dict) and is_typed_batch(obs):
        return int(typed_ptr(obs).numel()) - 1
    if not isinstance(obs, dict) or "ptr" not in obs:
        raise ConfigError(
            "GraphMiniBatchIterator: batch[obs] must be a PyG-style graph batch with 'ptr' "
            f"(found {type(obs).__name__}). The learner connector must batch graphs with "
            "offline_graph's BatchGraphObservations (GraphPPOTorchLearner sets it)."
        )
    return int(obs["ptr"].numel()) - 1


def as_sample_batch(columns: dict[str, Any], count: int) -> SampleBatch:
    """``SampleBatch(columns)`` whose length is ``count`` transitions (SampleBatch would take
    the length of the first leaf, e.g. the node count)."""
    sample_batch = SampleBatch(columns)
    sample_batch.count = count
    return sample_batch


class GraphMiniBatchIterator:
    """``num_epochs`` passes over a train batch ``{module_id: columns}``, each pass split
    into ``round(B / minibatch_size)`` near-equal minibatches of transitions (shuffled per
    pass when ``shuffle``); yields ``MultiAgentBatch``es as RLlib's iterators do.
    ``minibatch_size=None`` means the whole batch per pass."""

    def __init__(
        self,
        batch: dict[str, dict[str, Any]],
        *,
        num_epochs: int = 1,
        minibatch_size: int | None = None,
        shuffle: bool = False,
        mask_levels: dict[str, str | None] | None = None,
        seed: int | None = None,
    ) -> None:
        self.batch = batch
        self.num_epochs = max(1, int(num_epochs))
        self.minibatch_size = minibatch_size
        self.shuffle = shuffle
        self.mask_levels = mask_levels or {}
        self.sizes = {mid: num_transitions(cols) for mid, cols in batch.items()}
        self._rng = np.random.default_rng(seed)

    def _splits(self, size: int) -> list[np.ndarray]:
        order = self._rng.permutation(size) if self.shuffle else np.arange(size)
        if not self.minibatch_size or self.minibatch_size >= size:
            return [order]
        return np.array_split(order, max(1, round(size / self.minibatch_size)))

    def __iter__(self) -> Iterator[MultiAgentBatch]:
        for _ in range(self.num_epochs):
            splits = {mid: self._splits(size) for mid, size in self.sizes.items()}
            for i in range(max(len(s) for s in splits.values())):
                policy_batches = {}
                for mid, parts in splits.items():
                    idx = torch.as_tensor(parts[i % len(parts)], dtype=torch.long)
                    cols = select_transitions(self.batch[mid], idx, self.mask_levels.get(mid))
                    policy_batches[mid] = as_sample_batch(cols, int(idx.numel()))
                steps = max(len(b) for b in policy_batches.values())
                yield MultiAgentBatch(policy_batches, env_steps=steps)
