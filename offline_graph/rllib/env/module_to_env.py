"""``GraphModuleToEnv``: a single-agent graph runner's default module-to-env pieces in one call.

After :func:`~offline_graph.rllib.env.env_connectors.graph_module_to_env`, the module-to-env
pipeline of a single-agent ``GraphEnvRunner`` without user pieces is::

    GetActions, TensorToNumpy, SplitNodeStates, UnBatchToIndividualItems,
    RemoveSingleTsTimeRankFromBatch, TrimChoiceOutputs, NormalizeAndClipActions,
    ListifyDataForVectorEnv

Run once per env step, on one row per sub-env, these pieces cost more than the greedy forward
pass they follow: each call is timed, copies the batch, and the unbatching maps every row of
every column through dm-tree and regroups it by episode id. :func:`fuse_module_to_env` puts
:class:`GraphModuleToEnv` in their place when the pipeline holds exactly these pieces and
``NormalizeAndClipActions`` does nothing (``normalize_actions`` and ``clip_actions`` off, as
:func:`offline_graph.configure` sets them for ``Discrete`` / node / edge actions). It runs
RLlib's ``GetActions`` (greedy actions of a ``TorchCategorical`` directly: the argmax of the
logits and zero log-probabilities, what its deterministic distribution returns), RLlib's
``TensorToNumpy`` and our ``SplitNodeStates``, then hands out the rows in env order, cut to
each graph's choices as ``TrimChoiceOutputs`` cuts them, ``ACTIONS`` as one array (a copy,
as RLlib's ``batch`` makes one): the objects the stock pieces return. Where that shortcut does
not hold (no one-row-per-episode order from ``BatchGraphObservations``, a time rank, a column
of another length) it runs the stock pieces from ``UnBatchToIndividualItems`` on.

Connector timer metrics: one ``graph_module_to_env`` timer replaces the pieces' own.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from ray.rllib.connectors.common.tensor_to_numpy import TensorToNumpy
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.module_to_env import (
    GetActions,
    ListifyDataForVectorEnv,
    NormalizeAndClipActions,
    RemoveSingleTsTimeRankFromBatch,
    UnBatchToIndividualItems,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.spaces.space_utils import batch as batch_fn
from ray.rllib.utils.spaces.space_utils import unbatch as unbatch_fn

from offline_graph.data.graphs.spaces import selection_level
from offline_graph.rllib.env.env_connectors import TrimChoiceOutputs, own_choices
from offline_graph.rllib.env.env_states import SplitNodeStates

FUSED = (
    GetActions,
    TensorToNumpy,
    SplitNodeStates,
    UnBatchToIndividualItems,
    RemoveSingleTsTimeRankFromBatch,
    TrimChoiceOutputs,
    NormalizeAndClipActions,
    ListifyDataForVectorEnv,
)
"""The pieces :class:`GraphModuleToEnv` stands for, in pipeline order."""

ORDER = "memorized_map_structure"  # shared_data key: episode id of each row (RLlib's)
TIME_RANK = "_added_single_ts_time_rank"  # shared_data key: RLlib added a time rank


class GraphModuleToEnv(ConnectorV2):
    """The pieces of :data:`FUSED` in one call (see the module docstring)."""

    def __init__(self, input_observation_space: Any = None, input_action_space: Any = None, **kwargs: Any):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.head = [GetActions(), TensorToNumpy(), SplitNodeStates()]
        # the rest, for batches the shortcut does not fit (NormalizeAndClipActions: a no-op)
        self.tail = [
            UnBatchToIndividualItems(),
            RemoveSingleTsTimeRankFromBatch(),
            TrimChoiceOutputs(),
            ListifyDataForVectorEnv(),
        ]

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
        call = dict(
            rl_module=rl_module, episodes=episodes, explore=explore, shared_data=shared_data, **kwargs
        )
        for piece in self.head[1:] if _greedy_actions(rl_module, batch, episodes, explore) else self.head:
            batch = piece(batch=batch, **call)
        rows = _rows_in_env_order(rl_module, batch, episodes, shared_data)
        if rows is None:
            for piece in self.tail:
                batch = piece(batch=batch, **call)
            return batch
        batch.update(rows)
        return batch


@functools.lru_cache(maxsize=64)
def argmax_is_greedy(dist_cls: Any) -> bool:
    """Whether greedy actions of ``dist_cls`` (``from_logits(logits).to_deterministic()``) are
    ``argmax(logits, -1)`` with zero log-probabilities of that dtype: RLlib's
    ``TorchCategorical`` and subclasses that keep its ``__init__`` / ``from_logits`` /
    ``to_deterministic`` (our ``TorchChoiceCategorical``)."""
    if not (isinstance(dist_cls, type) and issubclass(dist_cls, TorchCategorical)):
        return False
    return all(
        getattr(getattr(dist_cls, name), "__func__", getattr(dist_cls, name))
        is getattr(getattr(TorchCategorical, name), "__func__", getattr(TorchCategorical, name))
        for name in ("__init__", "from_logits", "to_deterministic")
    )


def _greedy_actions(rl_module: Any, batch: dict[str, Any], episodes: list[Any], explore: bool | None) -> bool:
    """RLlib's ``GetActions`` for ``explore=False`` when :func:`argmax_is_greedy`: the same
    ``ACTIONS`` and ``ACTION_LOGP`` tensors, without building the distributions. False
    (nothing done) otherwise."""
    if explore or Columns.ACTIONS in batch or Columns.ACTION_DIST_INPUTS not in batch:
        return False
    if not episodes or not isinstance(episodes[0], SingleAgentEpisode):
        return False
    get_cls = getattr(rl_module, "get_inference_action_dist_cls", None)
    if get_cls is None or not argmax_is_greedy(get_cls()):
        return False
    actions = torch.argmax(batch[Columns.ACTION_DIST_INPUTS], dim=-1)
    batch[Columns.ACTIONS] = actions
    if Columns.ACTION_LOGP not in batch:
        batch[Columns.ACTION_LOGP] = torch.zeros_like(actions)
    return True


def _rows_in_env_order(
    rl_module: Any, batch: dict[str, Any], episodes: list[Any], shared_data: dict | None
) -> dict[str, Any] | None:
    """What ``UnBatchToIndividualItems`` ... ``ListifyDataForVectorEnv`` make of ``batch``
    (one row per episode, in the order of RLlib's ``memorized_map_structure``), or None when
    that does not hold."""
    order = (shared_data or {}).get(ORDER)
    if not isinstance(order, list) or (shared_data or {}).get(TIME_RANK) or len(set(order)) != len(order):
        return None
    if not episodes or not all(isinstance(e, SingleAgentEpisode) for e in episodes):
        return None
    out: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for name, data in batch.items():
        if isinstance(data, np.ndarray):
            if data.ndim == 0:
                return None
            column = list(data)  # what RLlib's unbatch gives for an array: data[i]
            arrays[name] = data
        else:
            column = unbatch_fn(data)
        if len(column) != len(order):
            return None
        out[name] = column
    action_space = getattr(rl_module, "action_space", None)
    level = selection_level(action_space)
    logits = out.get(Columns.ACTION_DIST_INPUTS)
    if level is not None and logits is not None:  # TrimChoiceOutputs
        by_id = {episode.id_: episode for episode in episodes}
        node_type = getattr(action_space, "node_type", None)
        for i, eps_id in enumerate(order):
            episode = by_id.get(eps_id)
            if episode is not None:
                logits[i] = own_choices(logits[i], episode, level, node_type)
    for name in (Columns.ACTIONS, Columns.ACTIONS_FOR_ENV):  # ListifyDataForVectorEnv
        if name in arrays:  # RLlib's batch of the rows of an array: a copy of that array
            out[name] = arrays[name].copy()
        elif name in out:
            out[name] = batch_fn(out[name])
    return out


def fuse_module_to_env(pipeline: ConnectorPipelineV2) -> None:
    """Put :class:`GraphModuleToEnv` in place of the pieces of :data:`FUSED` when a built
    (and edited) single-agent module-to-env pipeline holds exactly them and its
    ``NormalizeAndClipActions`` changes nothing; any other pipeline is left as it is."""
    pieces = pipeline.connectors
    if tuple(type(p) for p in pieces) != FUSED:
        return
    clip = pieces[FUSED.index(NormalizeAndClipActions)]
    if getattr(clip, "normalize_actions", True) or getattr(clip, "clip_actions", True):
        return
    fused = GraphModuleToEnv(pipeline.input_observation_space, pipeline.input_action_space)
    pipeline.insert_before(GetActions, fused)
    for cls in FUSED:
        pipeline.remove(cls)
