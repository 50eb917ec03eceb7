"""Learner connector pieces for graph transitions, and pipeline surgery.

RLlib's default learner pieces work on one ``SingleAgentEpisode`` object per step and
``BatchIndividualItems`` cannot batch ragged graphs. In the graph pipeline they are replaced by
:class:`AddGraphTransitionsToBatch`, which writes a whole columnar sample at once. User pieces
(``config.training(learner_connector=...)``) then run on that batch, in their order.

Limit (documented in docs/guides/data-format.md): user pieces see ``episodes=[]``; they work on ``batch``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.core import DEFAULT_MODULE_ID

from offline_graph.data.graphs.collate import collate, uncollate
from offline_graph.data.errors import OfflineGraphError
from offline_graph.data.learning.transitions import BOOKKEEPING_COLUMNS, graph_arrays, table_to_batch


class AddGraphTransitionsToBatch(ConnectorV2):
    """Writes a columnar transition sample into the batch (replaces RLlib's default pieces).

    In: ``shared_data["graph_transitions"]`` (:class:`~offline_graph.data.learning.transitions.Transitions`)
    or ``shared_data["graph_transition_table"]`` (an Arrow transition table).

    Out::

        batch[DEFAULT_MODULE_ID] = {
            "actions": int64 [B],
            "obs": {"x": [sumN, F], "edge_index": [2, sumE], "edge_attr": [sumE, D],
                    "batch": [sumN], "ptr": [B+1]},
            "value_targets": float32 [B],
        }
    """

    SHARED_KEY = "graph_transitions"
    SHARED_TABLE_KEY = "graph_transition_table"

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: Any,
        explore: bool | None = None,
        shared_data: dict | None = None,
        **kwargs: Any,
    ) -> Any:
        shared_data = shared_data or {}
        sample = shared_data.get(self.SHARED_KEY)
        if sample is not None:
            batch[DEFAULT_MODULE_ID] = {
                "actions": sample.actions,
                "obs": collate(sample.obs),
                "value_targets": sample.value_targets,
            }
        elif shared_data.get(self.SHARED_TABLE_KEY) is not None:
            batch[DEFAULT_MODULE_ID] = table_to_batch(shared_data[self.SHARED_TABLE_KEY])
        return batch


def user_pieces_only(pipeline: ConnectorPipelineV2) -> None:
    """Remove RLlib's default pieces; prepend :class:`AddGraphTransitionsToBatch`."""
    for piece in list(pipeline.connectors):
        if type(piece).__module__.startswith("ray.rllib."):
            pipeline.remove(type(piece))
    pipeline.prepend(AddGraphTransitionsToBatch())


def batch_to_table(module_batch: dict[str, Any], where: str, mask_level: str | None = None) -> pa.Table:
    """A module batch (layout of :class:`AddGraphTransitionsToBatch`) -> transition rows.

    ``mask_level`` ("node" / "edge" / None): where ``obs["action_mask"]`` belongs."""
    obs = module_batch.get("obs")
    actions = np.asarray(module_batch.get("actions"))
    if not isinstance(obs, dict) or "ptr" not in obs:
        raise OfflineGraphError(
            f"{where}: batch['obs'] must be the collated graph dict with 'ptr' after the "
            f"learner connector (found {type(obs).__name__}). A user connector piece replaced "
            "the graph observation; modify its arrays in place instead."
        )
    graphs = uncollate({k: np.asarray(v) for k, v in obs.items()}, mask_level)
    arrays: dict[str, pa.Array] = {"actions": pa.array(actions), **graph_arrays(graphs)}
    for name, value in module_batch.items():
        if name in ("obs", "actions") or name in BOOKKEEPING_COLUMNS:
            continue
        arr = np.asarray(value)
        if arr.ndim != 1 or len(arr) != len(actions):
            raise OfflineGraphError(
                f"{where}, column {name!r}: a batch column must be 1-D with one value per "
                f"transition, length {len(actions)} (found shape {list(arr.shape)}). Columns "
                "added by connector pieces travel as one Arrow value per row."
            )
        arrays[name] = pa.array(arr)
    return pa.table(arrays)


__all__ = ["AddGraphTransitionsToBatch", "user_pieces_only", "batch_to_table"]
