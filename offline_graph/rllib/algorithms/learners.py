"""The learner :func:`offline_graph.configure` sets for BC and MARWIL: RLlib's
``MARWILTorchLearner`` (BC's too), with one device sync per update instead of two per parameter.

RLlib's ``TorchLearner.apply_gradients`` asks ``torch.isfinite(grad).all()`` of every gradient
before assigning it and again before ``optim.step()`` (unless ``torch_skip_nan_gradients``):
each answer is a device-to-host copy, so on a GPU learner every update waits for the GPU twice
per parameter (36 waits per update of the default GNNModule; profiled on an H100, see
docs/benchmarks.md). :class:`OneSyncGradients` asks once for all gradients together; when all
are finite (RLlib's checks would all pass) RLlib's ``apply_gradients`` runs with its checks off
for that call, otherwise RLlib's own handling runs unchanged (its warning, ``nan_to_num`` and the
skipped step). Subclassing only; nothing of RLlib is modified.

:class:`CachedBlocks` (BC, MARWIL, IQL and CQL learners): a single remote learner iterates the
materialized training data without starting a Ray Data executor at every epoch (below).
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.marwil.torch.marwil_torch_learner import MARWILTorchLearner

from offline_graph.rllib.core.heap import KeptHeap


class OneSyncGradients:
    """``apply_gradients`` with one finiteness check of all gradients (see the module doc);
    put it before a ``TorchLearner`` class in the bases."""

    config: Any
    _grad_scalers: Any

    def apply_gradients(self, gradients_dict: Any) -> None:
        apply = super().apply_gradients  # type: ignore[misc]
        config = self.config
        grads = [g for g in gradients_dict.values() if g is not None]
        if config.torch_skip_nan_gradients or self._grad_scalers is not None or not grads:
            return apply(gradients_dict)
        if not bool(torch.stack([torch.isfinite(g).all() for g in grads]).all()):  # the one sync
            return apply(gradients_dict)  # RLlib's handling of nan / inf, as before
        config.torch_skip_nan_gradients = True  # every check RLlib would make passes
        try:
            return apply(gradients_dict)
        finally:
            config.torch_skip_nan_gradients = False


class CachedBlocks:
    """Learner mixin: one remote learner's data iterator over the materialized data keeps its
    blocks' list (put it before a ``Learner`` class in the bases).

    ``configure`` materializes the prelearner's output once (``materialize_mapped_data``), and
    RLlib hands a single remote learner ``dataset.iterator()``. Ray Data drops a dataset's
    execution cache when it is pickled, so in the learner's process every epoch started a new
    streaming executor over the same block references (its start and polling cost ~27 ms per
    epoch here, ~40 ms per iteration of 10 updates on the shipped data, where a local learner's
    iterator hits the driver's cache). Materialized again once in the learner's process (two
    ``materialize()`` calls over the block references: no data is copied), the epochs start
    from the cache. Several learners (``streaming_split``) and streamed data are left as RLlib
    makes them."""

    config: Any
    iterator: Any

    def _create_iterator_if_necessary(self, *, training_data: Any, **kwargs: Any) -> Any:
        iterators = training_data.data_iterators
        config = self.config
        if iterators and not self.iterator and config.num_learners == 1 and config.materialize_mapped_data:
            training_data.data_iterators = [iterators[0].materialize().materialize().iterator()]
        return super()._create_iterator_if_necessary(  # type: ignore[misc]
            training_data=training_data, **kwargs
        )


class GraphMARWILTorchLearner(CachedBlocks, KeptHeap, OneSyncGradients, MARWILTorchLearner):  # type: ignore[misc]
    """RLlib's MARWIL (and BC) learner with :class:`OneSyncGradients`, :class:`CachedBlocks` and
    :class:`~offline_graph.rllib.core.heap.KeptHeap`."""


def set_graph_learner(cfg: Any) -> None:
    """A BC / MARWIL config without a learner class of its own gets
    :class:`GraphMARWILTorchLearner` (a learner class the user set is kept)."""
    if cfg._learner_class is None and cfg.get_default_learner_class() is MARWILTorchLearner:
        cfg.learners(learner_class=GraphMARWILTorchLearner)
