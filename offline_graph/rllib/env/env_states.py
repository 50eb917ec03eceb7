"""Memory modules (``frame_stack`` / ``gru`` / ``node_gru``) in RLlib's EnvRunners: their
``STATE_IN`` / ``STATE_OUT`` through the connector pipelines, in the step layout of
:mod:`offline_graph.rllib.core.stepwise` (what :func:`offline_graph.evaluate_module` feeds them).

RLlib's ``AddStatesFromEpisodesToBatch`` puts each episode's state into the batch (the
module's initial state at the episode's start, else the ``STATE_OUT`` of its last step, kept
in the episode's extra model outputs). Then:

- env-to-module, :func:`batch_states` (called by ``BatchGraphObservations``): fixed-shape
  states (frame stacks, graph GRU states) stacked ``[B, ...]`` as RLlib does; the ragged
  ``node_gru`` state ``node_h`` concatenated in this step's node layout ``[sumN, H]``, each
  episode's previous rows kept when its graph has the same node count and zeros otherwise
  (:func:`~offline_graph.rllib.core.stepwise.align_node_state`, the rule of ``evaluate_module``);
- module-to-env, :class:`SplitNodeStates` (before RLlib's ``UnBatchToIndividualItems``):
  ``STATE_OUT["node_h"] [sumN, H]`` cut into one ``[N_i, H]`` piece per episode (an object
  array, which RLlib's unbatching hands out item by item), so each episode stores its own.

RLlib's ``AddTimeDimToBatchAndZeroPad`` (a time rank on every observation leaf of stateful
modules) is taken out of the env-to-module pipeline: the step layout has no time rank.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns

from offline_graph.rllib.core.stepwise import NODE_STATE, align_node_state

NODE_COUNTS = "offline_graph_node_counts"
"""``shared_data`` key: node count of each graph of the step's batch, in batch order."""


def batch_states(items: list[dict[str, Any]], node_counts: list[int]) -> dict[str, np.ndarray]:
    """Per-episode states (in batch order) -> ``STATE_IN`` (see the module docstring)."""
    out: dict[str, np.ndarray] = {}
    for key in items[0]:
        values = [np.asarray(item[key]) for item in items]
        if key == NODE_STATE:
            out[key] = np.concatenate([align_node_state(v, n) for v, n in zip(values, node_counts)])
        else:
            out[key] = np.stack(values)
    return out


def states_in_order(column: Any) -> list[dict[str, Any]]:
    """The per-episode states of a ``STATE_IN`` column before batching (``{(eps_id,):
    [state]}`` or a list), in order."""
    if isinstance(column, dict):
        return [item for items in column.values() for item in items]
    return list(column)


class SplitNodeStates(ConnectorV2):
    """Module-to-env piece: ``STATE_OUT["node_h"] [sumN, H]`` -> one ``[N_i, H]`` piece per
    episode (see the module docstring); other states and columns pass through."""

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
        state = batch.get(Columns.STATE_OUT)
        counts = (shared_data or {}).get(NODE_COUNTS)
        if not isinstance(state, dict) or NODE_STATE not in state or counts is None:
            return batch
        rows = np.asarray(state[NODE_STATE])
        pieces = np.empty(len(counts), dtype=object)
        for i, part in enumerate(np.split(rows, np.cumsum(counts)[:-1])):
            pieces[i] = part
        state[NODE_STATE] = pieces
        return batch
