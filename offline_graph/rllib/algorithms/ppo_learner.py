"""``GraphPPOTorchLearner``: RLlib's PPO torch learner for ``GNNModule`` on graph episodes.

Set by :func:`offline_graph.rllib.algorithms.online.configure_online`. Two overrides of RLlib's
``PPOTorchLearner`` (subclassing only; nothing of RLlib is modified):

===============================  ===========================================================
override                         why
===============================  ===========================================================
``build``                        the learner connector pipeline RLlib built
                                 (``AddOneTsToEpisodesAndTruncate``, ``AddObservations...``,
                                 ``AddColumns...``, ``BatchIndividualItems``,
                                 ``NumpyToTensor``, ``GeneralAdvantageEstimation``) gets
                                 :class:`LearnerBatchGraphObservations` instead of
                                 ``BatchIndividualItems``: observations (graph dicts, one per
                                 step plus the bootstrap step) become one PyG batch
                                 ``{x, edge_index, [edge_attr], batch, ptr, [action_mask]}``,
                                 every other column is batched by RLlib's piece (node / edge
                                 selection: the unpadded ``ACTION_DIST_INPUTS`` rows padded to
                                 ``[B, M]``, :func:`pad_choices`). GAE then
                                 runs ``GNNModule.compute_values`` on that batch (the value
                                 head) and adds advantages and value targets
``_create_iterator_if_necessary``  episodes -> learner connector -> minibatches of
                                 transitions with re-batched graphs
                                 (:class:`~offline_graph.rllib.core.graph_minibatch.GraphMiniBatchIterator`)
                                 instead of ``MiniBatchCyclicIterator``, whose ``SampleBatch``
                                 slicing / shuffling cuts node-level arrays
===============================  ===========================================================
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.connectors.common.batch_individual_items import BatchIndividualItems
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.policy.sample_batch import DEFAULT_POLICY_ID
from ray.rllib.utils.annotations import override

from offline_graph.data.graphs.spaces import selection_level
from offline_graph.rllib.env.env_connectors import (
    _edge_dim,
    graph_batch,
    graphs_in_order,
    input_spaces,
    replace_batching,
    typed_of,
)
from offline_graph.rllib.core.graph_minibatch import GraphMiniBatchIterator
from offline_graph.rllib.core.heap import KeptHeap


def _sub_module(rl_module: Any, module_id: str) -> Any:
    if isinstance(rl_module, MultiRLModule):
        return rl_module[module_id] if module_id in rl_module else None
    return rl_module


class LearnerBatchGraphObservations(BatchIndividualItems):
    """Learner-side ``BatchIndividualItems`` for graph observations (replaces it).

    ``obs`` (``{(episode_id,): [graph dict, ...]}``, episodes in the order the other
    columns use) becomes one PyG-style batch under ``batch[module_id]["obs"]`` (single-agent
    learners: ``default_policy``); every other column is batched by RLlib's piece.
    """

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: list[Any],
        explore: bool | None = None,
        shared_data: dict | None = None,
        **kwargs: Any,
    ) -> Any:
        obs = batch.pop(Columns.OBS, None)
        module = _sub_module(rl_module, DEFAULT_POLICY_ID)
        space, action_space = input_spaces(self, module)
        level = selection_level(action_space)
        choices = batch.pop(Columns.ACTION_DIST_INPUTS, None) if level is not None else None
        batch = super().__call__(
            rl_module=rl_module,
            batch=batch,
            episodes=episodes,
            explore=explore,
            shared_data=shared_data,
            **kwargs,
        )
        if obs is None:
            return batch
        graphs, _ = graphs_in_order(obs)
        edge_dim = _edge_dim(space, graphs[0] if graphs else None)
        columns: dict[str, Any] = {
            Columns.OBS: graph_batch(graphs, edge_dim, level, typed_of(space, action_space))
        }
        if choices is not None:
            columns[Columns.ACTION_DIST_INPUTS] = pad_choices(choices)
        target = batch.setdefault(DEFAULT_POLICY_ID, {}) if isinstance(rl_module, MultiRLModule) else batch
        target.update(columns)
        return batch


def pad_choices(column: Any) -> np.ndarray:
    """Node / edge selection ``ACTION_DIST_INPUTS``, stored unpadded per step (each row its own
    graph's ``N`` / ``E`` entries), as one ``[B, M]`` float32 array: ``M`` = the most choices,
    filler ``finfo.min`` (probability 0), the module's own layout."""
    items = [r for rs in column.values() for r in rs] if isinstance(column, dict) else list(column)
    rows = [np.asarray(r, np.float32).reshape(-1) for r in items]
    width = max([1] + [r.size for r in rows])
    out = np.full((len(rows), width), np.finfo(np.float32).min, np.float32)
    for i, row in enumerate(rows):
        out[i, : row.size] = row
    return out


def graph_learner_connector(pipeline: ConnectorPipelineV2) -> None:
    """Replace RLlib's ``BatchIndividualItems`` in a built learner pipeline with
    :class:`LearnerBatchGraphObservations` (in place; running it again changes nothing)."""
    replace_batching(pipeline, LearnerBatchGraphObservations)


class GraphPPOTorchLearner(KeptHeap, PPOTorchLearner):  # type: ignore[misc]
    """RLlib's ``PPOTorchLearner`` for graph observations (see the module docstring)."""

    @override(PPOTorchLearner)
    def build(self) -> None:
        super().build()
        if self._learner_connector is not None:
            graph_learner_connector(self._learner_connector)

    @override(PPOTorchLearner)
    def _create_iterator_if_necessary(
        self,
        *,
        training_data: Any,
        num_total_minibatches: int = 0,
        num_epochs: int = 1,
        minibatch_size: int | None = None,
        shuffle_batch_per_epoch: bool = False,
        **kwargs: Any,
    ) -> Iterable:
        if training_data.episodes is None or self._learner_connector is None:
            return super()._create_iterator_if_necessary(  # type: ignore[no-any-return]
                training_data=training_data,
                num_total_minibatches=num_total_minibatches,
                num_epochs=num_epochs,
                minibatch_size=minibatch_size,
                shuffle_batch_per_epoch=shuffle_batch_per_epoch,
                **kwargs,
            )
        batch = self._learner_connector(
            rl_module=self.module,
            batch=training_data.batch if training_data.batch is not None else {},
            episodes=training_data.episodes,
            shared_data={},
            metrics=self.metrics,
        )
        batch = {mid: cols for mid, cols in batch.items() if mid in self.module.keys()}
        if not batch:
            return {}
        levels = {mid: _mask_level(_space(self.module[mid])) for mid in batch}
        return GraphMiniBatchIterator(
            batch,
            num_epochs=num_epochs,
            minibatch_size=minibatch_size,
            shuffle=shuffle_batch_per_epoch and num_epochs > 1,
            mask_levels=levels,
        )


def _space(module: RLModule) -> Any:
    return getattr(module, "action_space", None)


def _mask_level(action_space: Any) -> str | None:
    """The selection level of ``action_space``; a typed graph's NodeAction: ``node@<type>``."""
    level = selection_level(action_space)
    node_type = getattr(action_space, "node_type", None)
    return level if node_type is None else f"{level}@{node_type}"
