"""Connector pieces that let RLlib's EnvRunners feed graph observations to a ``GNNModule``.

RLlib's default env-to-module pipeline is ``[user pieces, AddObservationsFromEpisodesToBatch,
AddTimeDimToBatchAndZeroPad, AddStatesFromEpisodesToBatch, BatchIndividualItems,
NumpyToTensor]``; only ``BatchIndividualItems`` cannot handle graphs (it stacks every leaf of
the observations, which have no common shape). :func:`graph_env_to_module` edits a built
pipeline in place into::

    GraphObservationsToDicts   first: the newest observation of every episode (a gymnasium
                               GraphInstance) becomes our graph dict, with the action mask
                               from the step's info; written back into the episode
    [user pieces]              see graph dicts
    AddObservationsFromEpisodesToBatch, AddStates...   (RLlib's, unchanged; RLlib's
                               AddTimeDimToBatchAndZeroPad is taken out: memory modules act
                               in the step layout, see :mod:`offline_graph.rllib.env.env_states`)
    BatchGraphObservations     instead of BatchIndividualItems: one PyG batch of all
                               observations (the learner's layout, see
                               :mod:`offline_graph.data.graphs.collate`), memory modules' STATE_IN
                               batched by :func:`~offline_graph.rllib.env.env_states.batch_states`,
                               other columns as before
    NumpyToTensor              (RLlib's, unchanged)

The module-to-env side needs no change to work: the module's ``ACTION_DIST_INPUTS`` are
``[B, M]`` (batch first) and ``GetActions`` samples them through the module's distribution
class (greedy with ``explore=False``). :func:`graph_module_to_env` adds
:class:`~offline_graph.rllib.env.env_states.SplitNodeStates` (each episode's own ``node_gru``
state) and :class:`TrimChoiceOutputs`, so node / edge selection episodes store each step's
distribution inputs unpadded (its own graph's ``N`` / ``E`` entries, not the batch's ``M``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.connectors.common.add_time_dim_to_batch_and_zero_pad import AddTimeDimToBatchAndZeroPad
from ray.rllib.connectors.common.batch_individual_items import BatchIndividualItems
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.module_to_env import (
    NormalizeAndClipActions,
    UnBatchToIndividualItems,
)
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from offline_graph.data.graphs.collate import collate
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.globals import GlobalsLayout, PartError, dict_layout, split_parts
from offline_graph.data.graphs.graph import GraphDict, graph_to_dict, space_sizes
from offline_graph.data.graphs.typed import TypedGraph, text_keys, typed_observation, typed_space
from offline_graph.data.graphs.typed_columns import TypedColumns
from offline_graph.data.graphs.spaces import selection_level
from offline_graph.env.making import DEFAULT_MASK_KEY
from offline_graph.rllib.env.env_states import NODE_COUNTS, SplitNodeStates, batch_states, states_in_order


def _edge_dim(space: Any, sample: Any = None) -> int | None:
    """D of a Graph space; without one, of ``sample`` (a GraphInstance or a graph dict);
    None for a typed graph (a width per edge type)."""
    if isinstance(space, TypedGraph) or (isinstance(sample, dict) and isinstance(sample.get("x"), dict)):
        return None
    if isinstance(space, (gym.spaces.Graph, gym.spaces.Dict)):
        return space_sizes(space)[1]
    if isinstance(sample, gym.spaces.GraphInstance):
        return None if sample.edges is None else int(np.shape(sample.edges)[-1])
    if isinstance(sample, dict) and sample.get("edge_attr") is not None:
        return int(np.shape(sample["edge_attr"])[-1])
    return None


def env_parts(obs: Any, layout: GlobalsLayout | None) -> tuple[Any, np.ndarray | None]:
    """(graph, ``globals`` or None) of an env observation (:func:`split_parts`), a part that
    does not fit named."""
    try:
        return split_parts(obs, layout)
    except PartError as err:
        raise ConfigError(
            f"GraphObservationsToDicts: observation part {err.key!r}: {err}. The env's "
            "observations must hold every part of its Dict observation space."
        ) from None


def as_graph_dict(
    obs: Any,
    info: dict | None,
    edge_dim: int | None,
    mask_key: str | None,
    layout: GlobalsLayout | None = None,
) -> GraphDict:
    """An env observation as our graph dict (``x``, ``edge_index``, [``edge_attr``],
    [``action_mask``], [``globals``]); ``info[mask_key]`` becomes ``action_mask`` when the dict
    has none; a ``Dict`` space's flat parts (``layout``) become ``globals``. A graph dict is
    returned as it is unless a mask or ``globals`` is added."""
    obs, glob = env_parts(obs, layout)
    if isinstance(obs, gym.spaces.GraphInstance):
        out = graph_to_dict(obs, edge_dim)
    elif isinstance(obs, dict) and isinstance(obs.get("x"), dict):  # a typed graph, keys as text
        out = text_keys(obs)
    elif isinstance(obs, dict) and "x" in obs and "edge_index" in obs:
        out = obs
    else:
        raise ConfigError(
            "GraphObservationsToDicts: observation must be a gymnasium GraphInstance or a graph "
            f"dict with 'x' and 'edge_index' (found {type(obs).__name__}). The env's "
            "observation_space must be a gymnasium.spaces.Graph."
        )
    mask = None if mask_key is None or not info else info.get(mask_key)
    if mask is not None and "action_mask" not in out:
        out = dict(out)
        out["action_mask"] = np.asarray(mask).astype(bool).reshape(-1)
    if glob is not None:
        out = {**out, "globals": glob}
    return out


def num_choices(obs: Any, level: str, node_type: str | None = None) -> int:
    """Choices of a node (``"node"``) / edge (``"edge"``) selection in one observation (a
    typed graph's: the nodes of ``node_type``)."""
    if isinstance(obs, dict) and isinstance(obs.get("x"), dict):
        return int(np.shape(obs["x"][node_type])[0])
    if isinstance(obs, gym.spaces.GraphInstance):
        if level == "node":
            return int(np.shape(obs.nodes)[0])
        return 0 if obs.edge_links is None else int(np.shape(obs.edge_links)[0])
    if level == "node":
        return int(np.shape(obs["x"])[0])
    return int(np.shape(obs["edge_index"])[-1])


class GraphObservationsToDicts(ConnectorV2):
    """Env-to-module piece: each episode's newest observation -> our graph dict, in place.

    With a node / edge selection action space the env's ``info[mask_key]`` (the key the
    recorder reads, ``"action_mask"``) becomes the dict's bool ``action_mask``. The episodes
    then hold graph dicts, as recorded episode files do.
    """

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        *,
        mask_key: str | None = DEFAULT_MASK_KEY,
        **kwargs: Any,
    ) -> None:
        self.mask_key = mask_key
        super().__init__(input_observation_space, input_action_space, **kwargs)

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
        self.newest_graphs(rl_module, episodes)
        return batch

    def newest_graphs(self, rl_module: Any, episodes: list[Any]) -> list[GraphDict]:
        """Convert (in place) and return the newest observation of every (agent) episode."""
        spaces, action_spaces = input_spaces(self, rl_module)
        fixed = (gym.spaces.Graph, gym.spaces.Dict, TypedGraph)  # spaces that fix D (else per observation)
        if isinstance(spaces, fixed) and all(
            isinstance(e, SingleAgentEpisode) and e.agent_id is None for e in episodes
        ):  # single-agent episodes: one space for all
            one = (_edge_dim(spaces), dict_layout(spaces), selection_level(action_spaces))
            return [self._newest(episode, episode.get_observations(-1), one) for episode in episodes]
        known: dict[tuple[int, int], tuple[int | None, GlobalsLayout | None, str | None]] = {}
        graphs = []
        for episode in self.single_agent_episode_iterator(episodes):
            space, action_space = agent_space(spaces, episode), agent_space(action_spaces, episode)
            obs = episode.get_observations(-1)
            facts = known.get((id(space), id(action_space)))  # per pair of spaces, this call
            if facts is None:
                facts = (_edge_dim(space, obs), dict_layout(space), selection_level(action_space))
                if isinstance(space, fixed):
                    known[(id(space), id(action_space))] = facts
            graphs.append(self._newest(episode, obs, facts))
        return graphs

    def _newest(
        self, episode: Any, obs: Any, facts: tuple[int | None, GlobalsLayout | None, str | None]
    ) -> Any:
        """``obs`` (the episode's newest) as our graph dict, written back; ``facts``: (D,
        globals layout, selection level) of its spaces."""
        mask_key = self.mask_key if facts[2] else None
        infos = episode.get_infos(-1) if mask_key else None
        new = as_graph_dict(obs, infos, facts[0], mask_key, facts[1])
        if new is not obs:
            episode.set_observations(at_indices=-1, new_data=new)
        return new


def input_spaces(piece: ConnectorV2, module: Any) -> tuple[Any, Any]:
    """(observation space, action space) a connector piece works with: its own input spaces,
    else those of ``module``."""
    return (
        piece.input_observation_space or getattr(module, "observation_space", None),
        piece.input_action_space or getattr(module, "action_space", None),
    )


def agent_space(space: Any, episode: Any) -> Any:
    """The space of ``episode``'s agent in a multi-agent ``Dict`` keyed by agent id (the
    EnvRunner's input spaces); any other space as it is."""
    aid = getattr(episode, "agent_id", None)
    if isinstance(space, gym.spaces.Dict) and aid is not None and aid in space.spaces:
        return space[aid]
    return space


def graph_batch(
    graphs: list[GraphDict], edge_dim: int | None, mask_level: str | None, typed: Any = None
) -> dict[str, np.ndarray]:
    """``{x, edge_index, [edge_attr], batch, ptr, [action_mask]}`` of graph dicts (the
    learner's layout; ``action_mask`` only for a selection ``mask_level``). ``typed``: (the
    :class:`TypedGraph`, the ``NodeAction``'s node type) of typed graphs, batched per type."""
    if typed is not None:
        space, node_type = typed
        checked = [typed_observation(g, space) for g in graphs]
        return collate(TypedColumns.from_graphs(checked, space, node_type))  # type: ignore[arg-type]
    return collate(GraphColumns.from_graphs(graphs, edge_dim, mask_level))


def typed_of(space: Any, action_space: Any) -> tuple[TypedGraph, str | None] | None:
    """(typed graph, NodeAction node type) of a module's spaces; None for a plain graph."""
    typed = typed_space(space)
    return None if typed is None else (typed, getattr(action_space, "node_type", None))


def graphs_in_order(obs: Any) -> tuple[list[GraphDict], list[Any]]:
    """The graph dicts of an ``obs`` column as RLlib's pieces leave it before batching
    (``{(episode_id,): [graph, ...]}``, or a plain list), in order, and each one's episode id
    (None for a list)."""
    if not isinstance(obs, dict):
        return list(obs), [None] * len(obs)
    graphs: list[GraphDict] = []
    order: list[Any] = []
    for key, items in obs.items():
        graphs.extend(items)
        order.extend([key[0]] * len(items))
    return graphs, order


class BatchGraphObservations(BatchIndividualItems):
    """RLlib's ``BatchIndividualItems`` for graph observations (replaces it).

    ``obs`` (``{(episode_id,): [graph dict, ...]}``) becomes one PyG-style batch
    (:func:`graph_batch`) in episode order, and ``shared_data["memorized_map_structure"]``
    records that order, as the stock piece does, so RLlib's module-to-env pipeline hands
    each env its own action. Every other column is batched by the stock piece.
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
        states = batch.pop(Columns.STATE_IN, None) if obs is not None else None
        per_module = _pop_module_obs(rl_module, batch) if getattr(self, "_multi_agent", False) else {}
        batch = super().__call__(
            rl_module=rl_module,
            batch=batch,
            episodes=episodes,
            explore=explore,
            shared_data=shared_data,
            **kwargs,
        )
        for mid, graphs in per_module.items():
            module = rl_module[mid]
            space, action_space = (getattr(module, n, None) for n in ("observation_space", "action_space"))
            edge_dim = _edge_dim(space, graphs[0] if graphs else None)
            level = selection_level(action_space)
            batch[mid][Columns.OBS] = graph_batch(graphs, edge_dim, level, typed_of(space, action_space))
        if obs is None:
            return batch
        graphs, order = graphs_in_order(obs)
        if isinstance(obs, dict) and shared_data is not None:
            shared_data["memorized_map_structure"] = order
        batch[Columns.OBS] = self.batch_graphs(rl_module, graphs)
        if states is not None:  # memory modules (offline_graph.rllib.env.env_states)
            counts = [int(np.shape(g["x"])[0]) for g in graphs]
            batch[Columns.STATE_IN] = batch_states(states_in_order(states), counts)
            if shared_data is not None:
                shared_data[NODE_COUNTS] = counts
        return batch

    def batch_graphs(self, rl_module: Any, graphs: list[GraphDict]) -> dict[str, np.ndarray]:
        """:func:`graph_batch` of ``graphs`` with this piece's (else the module's) spaces."""
        space, action_space = input_spaces(self, rl_module)
        known = self._known
        if known is not None and known[0] is space and known[1] is action_space:
            edge_dim, level, typed = known[2], known[3], known[4]
        else:
            edge_dim, level = _edge_dim(space, graphs[0] if graphs else None), selection_level(action_space)
            typed = typed_of(space, action_space)
            if isinstance(space, (gym.spaces.Graph, gym.spaces.Dict, TypedGraph)):  # fixed by the space
                self._known = (space, action_space, edge_dim, level, typed)
        return graph_batch(graphs, edge_dim, level, typed)

    _known: tuple[Any, Any, int | None, str | None, Any] | None = None
    """(spaces, D, selection level, typed) of the last call (the spaces rarely change)."""


def _pop_module_obs(rl_module: Any, batch: dict[str, Any]) -> dict[str, list[GraphDict]]:
    """Multi-agent batches (after RLlib's ``AgentToModuleMapping``, ``{module_id: {column:
    [item, ...]}}``): each module's ``obs`` list, taken out (batched per module's spaces)."""
    out = {}
    modules = set(rl_module.keys()) if hasattr(rl_module, "keys") else set()
    for mid, columns in batch.items():
        if mid in modules and isinstance(columns, dict) and isinstance(columns.get(Columns.OBS), list):
            out[mid] = columns.pop(Columns.OBS)
    return out


class TrimChoiceOutputs(ConnectorV2):
    """Module-to-env piece (after RLlib's ``UnBatchToIndividualItems``): each env's node /
    edge selection ``ACTION_DIST_INPUTS`` row cut to its own graph's choices.

    The module lays a batch out as ``[B, M]`` (``M`` = most choices in the batch, filler
    probability 0); the rows stored in the episodes keep only their own ``N`` / ``E``
    entries (at least one), so episodes stay unpadded. Graph-level actions pass through.
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
        action_space = getattr(rl_module, "action_space", None)
        level = selection_level(action_space)
        column = batch.get(Columns.ACTION_DIST_INPUTS)
        if level is None or not isinstance(column, dict):
            return batch
        node_type = getattr(action_space, "node_type", None)
        by_id = {episode.id_: episode for episode in episodes}
        for key, rows in column.items():
            episode = by_id.get(key[0])
            if episode is None:
                continue
            column[key] = [own_choices(row, episode, level, node_type) for row in rows]
        return batch


def own_choices(row: Any, episode: Any, level: str, node_type: str | None = None) -> Any:
    """A selection ``ACTION_DIST_INPUTS`` row cut to the choices of ``episode``'s newest graph
    (at least one; a typed graph's: its ``node_type`` nodes): what :class:`TrimChoiceOutputs`
    stores in the episode."""
    return row[..., : max(1, num_choices(episode.get_observations(-1), level, node_type))]


def graph_env_to_module(pipeline: ConnectorPipelineV2, mask_key: str | None = DEFAULT_MASK_KEY) -> None:
    """Edit a built env-to-module pipeline in place for graph observations (see the module
    docstring); running it again changes nothing. A pipeline without RLlib's
    ``BatchIndividualItems`` (defaults turned off) keeps its own batching."""
    if not any(isinstance(p, GraphObservationsToDicts) for p in pipeline.connectors):
        pipeline.prepend(GraphObservationsToDicts(mask_key=mask_key))
    if any(type(p) is AddTimeDimToBatchAndZeroPad for p in pipeline.connectors):
        pipeline.remove(AddTimeDimToBatchAndZeroPad)  # memory modules act in the step layout
    replace_batching(pipeline, BatchGraphObservations)


def replace_batching(pipeline: ConnectorPipelineV2, piece_class: type[BatchIndividualItems]) -> None:
    """Put ``piece_class`` (a graph-batching subclass) in place of RLlib's
    ``BatchIndividualItems`` in a built pipeline, multi-agent as the piece it replaces (in
    place; a pipeline without one is left as it is)."""
    for piece in list(pipeline.connectors):
        if type(piece) is BatchIndividualItems:
            multi_agent = bool(getattr(piece, "_multi_agent", False))
            pipeline.insert_before(BatchIndividualItems, piece_class(multi_agent=multi_agent))
            pipeline.remove(BatchIndividualItems)


def graph_module_to_env(pipeline: ConnectorPipelineV2) -> None:
    """Add :class:`TrimChoiceOutputs` to a built module-to-env pipeline (before RLlib's
    ``NormalizeAndClipActions``) when it unbatches per env; running it again changes nothing."""
    types = [type(p) for p in pipeline.connectors]
    if TrimChoiceOutputs in types or UnBatchToIndividualItems not in types:
        return
    pipeline.insert_before(UnBatchToIndividualItems, SplitNodeStates())
    if NormalizeAndClipActions in types:
        pipeline.insert_before(NormalizeAndClipActions, TrimChoiceOutputs())
    else:
        pipeline.insert_after(UnBatchToIndividualItems, TrimChoiceOutputs())


def graph_env_runner(runner: Any) -> None:
    """Set up a built (single- or multi-agent) EnvRunner for graph observations: episodes not
    turned to numpy (``to_numpy()`` stacks observations: impossible for ragged graphs), its
    pipelines edited by :func:`graph_env_to_module` (with the runner's ``mask_key``) and
    :func:`graph_module_to_env`."""
    runner.episodes_to_numpy = False
    graph_env_to_module(runner._env_to_module, mask_key=runner.mask_key)
    graph_module_to_env(runner._module_to_env)
