"""``GraphEnvToModule``: a single-agent graph runner's default env-to-module pieces in one call.

After :func:`~offline_graph.rllib.env.env_connectors.graph_env_to_module`, the env-to-module
pipeline of a single-agent ``GraphEnvRunner`` without user pieces is::

    GraphObservationsToDicts, AddObservationsFromEpisodesToBatch,
    AddStatesFromEpisodesToBatch, BatchGraphObservations, NumpyToTensor

For a module without memory these turn each episode's newest observation into our graph dict,
put it into a batch keyed by episode, batch those graphs again in episode order and make
tensors of the batch; every env step, each piece timed by the pipeline.
:func:`fuse_env_to_module` puts :class:`GraphEnvToModule` in their place: in one pass it
converts the observations with the same ``GraphObservationsToDicts``, batches them with the
same ``BatchGraphObservations``, records the same ``memorized_map_structure`` (the episode
ids, in order) and makes the tensors ``NumpyToTensor`` makes (on the CPU:
``torch.from_numpy``, floats as float32; elsewhere it calls that piece). Anything else (a
memory module, a batch that arrives with columns, a multi-agent or numpy episode, two
episodes with one id) goes through the five pieces as they are.

Connector timer metrics: one ``graph_env_to_module`` timer replaces the pieces' own.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch

from ray.rllib.connectors.common.add_observations_from_episodes_to_batch import (
    AddObservationsFromEpisodesToBatch,
)
from ray.rllib.connectors.common.add_states_from_episodes_to_batch import AddStatesFromEpisodesToBatch
from ray.rllib.connectors.common.numpy_to_tensor import NumpyToTensor
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from offline_graph.data.errors import ConfigError
from offline_graph.rllib.env.env_connectors import BatchGraphObservations, GraphObservationsToDicts

FUSED = (
    GraphObservationsToDicts,
    AddObservationsFromEpisodesToBatch,
    AddStatesFromEpisodesToBatch,
    BatchGraphObservations,
    NumpyToTensor,
)
"""The pieces :class:`GraphEnvToModule` stands for, in pipeline order."""


class GraphEnvToModule(ConnectorV2):
    """The pieces of :data:`FUSED` in one call (see the module docstring); ``pieces``: those
    of the pipeline it replaces (new ones by default, observation masks from ``"action_mask"``)."""

    def __init__(
        self,
        input_observation_space: Any = None,
        input_action_space: Any = None,
        *,
        pieces: list[ConnectorV2] | None = None,
        **kwargs: Any,
    ) -> None:
        self.pieces = list(pieces) if pieces is not None else [cls() for cls in FUSED]
        if tuple(type(p) for p in self.pieces) != FUSED:
            raise ConfigError(
                "GraphEnvToModule: pieces must be one of each of "
                f"{[c.__name__ for c in FUSED]}, in this order (found "
                f"{[type(p).__name__ for p in self.pieces]}). Leave pieces out for new ones."
            )
        super().__init__(input_observation_space, input_action_space, **kwargs)

    def recompute_output_observation_space(
        self, input_observation_space: Any, input_action_space: Any
    ) -> Any:
        for piece in self.pieces:  # none of them changes the spaces
            piece.input_observation_space = input_observation_space
        return input_observation_space

    def recompute_output_action_space(self, input_observation_space: Any, input_action_space: Any) -> Any:
        for piece in self.pieces:
            piece.input_action_space = input_action_space
        return input_action_space

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
        if batch or shared_data is None or not _plain_episodes(episodes) or _stateful(rl_module):
            for piece in self.pieces:
                batch = piece(
                    rl_module=rl_module,
                    batch=batch,
                    episodes=episodes,
                    explore=explore,
                    shared_data=shared_data,
                    **kwargs,
                )
            return batch
        to_dicts = cast(GraphObservationsToDicts, self.pieces[0])
        batching = cast(BatchGraphObservations, self.pieces[3])
        graphs = to_dicts.newest_graphs(rl_module, episodes)
        # AddObservationsFromEpisodesToBatch keys each graph by its episode, in episode order;
        # BatchGraphObservations batches them in that order and records it
        shared_data["memorized_map_structure"] = [episode.id_ for episode in episodes]
        batch[Columns.OBS] = batching.batch_graphs(rl_module, graphs)
        tensors = _cpu_tensors(self.pieces[4], rl_module, batch[Columns.OBS])
        if tensors is not None:
            return {Columns.OBS: tensors}
        return self.pieces[4](
            rl_module=rl_module,
            batch=batch,
            episodes=episodes,
            explore=explore,
            shared_data=shared_data,
            **kwargs,
        )


def _plain_episodes(episodes: list[Any]) -> bool:
    """Single-agent episodes of their own, as lists, with distinct ids."""
    if not episodes or not all(
        isinstance(e, SingleAgentEpisode) and e.agent_id is None and not e.is_numpy for e in episodes
    ):
        return False
    return len({e.id_ for e in episodes}) == len(episodes)


def _cpu_tensors(to_tensor: Any, rl_module: Any, obs: dict[str, Any]) -> dict[str, Any] | None:
    """What ``NumpyToTensor`` (on the CPU, no pinned memory) makes of the batched graphs:
    ``torch.from_numpy`` of each array, floats as float32 (RLlib's ``convert_to_torch_tensor``,
    without mapping the batch with dm-tree); None for any other case (the piece then runs)."""
    if not hasattr(to_tensor, "_device") or getattr(to_tensor, "_pin_memory", True):
        return None  # another RLlib version's piece, or pinned memory: the piece itself
    device = to_tensor._device
    if getattr(rl_module, "framework", None) != "torch" or not (
        device is None or (isinstance(device, (str, torch.device)) and torch.device(device).type == "cpu")
    ):
        return None
    out = {}
    for key, value in obs.items():
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf" or not value.flags.writeable:
            return None
        tensor = torch.from_numpy(value)
        out[key] = tensor.float() if tensor.is_floating_point() and tensor.dtype != torch.float16 else tensor
    return out


def _stateful(rl_module: Any) -> bool:
    """A memory module (or none: the pieces decide what that means)."""
    return rl_module is None or bool(rl_module.is_stateful())


def fuse_env_to_module(pipeline: ConnectorPipelineV2) -> None:
    """Put :class:`GraphEnvToModule` in place of the pieces of :data:`FUSED` when a built
    (and edited) single-agent env-to-module pipeline is exactly them; any other pipeline is
    left as it is."""
    pieces = list(pipeline.connectors)
    if tuple(type(p) for p in pieces) != FUSED or getattr(pieces[3], "_multi_agent", False):
        return
    fused = GraphEnvToModule(pipeline.input_observation_space, pipeline.input_action_space, pieces=pieces)
    pipeline.insert_before(GraphObservationsToDicts, fused)
    for cls in FUSED:
        pipeline.remove(cls)
