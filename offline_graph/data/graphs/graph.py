"""One graph observation: the dict layout, gymnasium ``GraphInstance`` conversion, space sizes.

An observation is a dict::

    {"x": float32 [N, F],                 # node features
     "edge_index": int64 [2, E],          # PyG convention: row 0 sources, row 1 targets
     "edge_attr": float32 [E, D]}         # only if the space has edge features

gymnasium's ``GraphInstance(nodes [N, F], edges [E, D] | None, edge_links [E, 2] | None)``
stores edges the other way round (``edge_links`` is ``edge_index.T``); both directions are
lossless.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import GraphInstance

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.globals import graph_part
from offline_graph.data.graphs.typed import TypedGraph

GraphDict = dict[str, np.ndarray]


def graph_to_dict(graph: GraphInstance, edge_dim: int | None = None) -> GraphDict:
    """``GraphInstance`` -> observation dict (``edge_links [E,2]`` -> ``edge_index [2,E]``).

    ``edge_dim`` is the space's edge feature size (None: the space has no edge features, then
    no ``edge_attr`` key is written even if ``graph.edges`` is set).
    """
    x = np.asarray(graph.nodes, dtype=np.float32)
    if x.ndim == 1:
        x = x.reshape(-1, 1)
    links = graph.edge_links
    if links is None:
        edge_index = np.zeros((2, 0), dtype=np.int64)
    else:
        edge_index = np.ascontiguousarray(np.asarray(links, dtype=np.int64).reshape(-1, 2).T)
    out: GraphDict = {"x": x, "edge_index": edge_index}
    if edge_dim is not None:
        num_edges = edge_index.shape[1]
        if graph.edges is None:
            out["edge_attr"] = np.zeros((num_edges, edge_dim), dtype=np.float32)
        else:
            out["edge_attr"] = (
                np.asarray(graph.edges, dtype=np.float32).reshape(num_edges, -1)
                if num_edges
                else np.zeros((0, edge_dim), dtype=np.float32)
            )
    return out


def dict_to_graph(obs: GraphDict) -> GraphInstance:
    """Observation dict -> ``GraphInstance`` (``edge_index [2,E]`` -> ``edge_links [E,2]``)."""
    edge_index = np.asarray(obs["edge_index"], dtype=np.int64).reshape(2, -1)
    edge_attr = obs.get("edge_attr")
    return GraphInstance(
        nodes=np.asarray(obs["x"], dtype=np.float32),
        edges=None if edge_attr is None else np.asarray(edge_attr, dtype=np.float32),
        edge_links=np.ascontiguousarray(edge_index.T),
    )


def space_sizes(space: Any) -> tuple[int, int | None]:
    """(F, D) of a graph observation space; D is None when edges carry no features.

    Accepts a ``gymnasium.spaces.Graph``, a ``Dict`` with one ``Graph`` entry and flat ones
    (its graph's sizes; :func:`~offline_graph.data.graphs.globals.globals_size` gives G), or a
    ``Dict`` with ``x`` / ``edge_attr`` Box entries. A typed graph
    (:class:`~offline_graph.data.graphs.typed.TypedGraph`, alone or in a Dict) has a width per
    type (its ``node_dims`` / ``edge_dims``): ``(0, None)`` here.
    """
    node_space: Any
    edge_space: Any
    space = graph_part(space)
    if isinstance(space, TypedGraph):
        return 0, None
    if isinstance(space, gym.spaces.Graph):
        node_space, edge_space = space.node_space, space.edge_space
    elif isinstance(space, gym.spaces.Dict) and "x" in space.spaces:
        node_space, edge_space = space["x"], space.spaces.get("edge_attr")
    else:
        raise ConfigError(
            f"observation space: space must be a gymnasium.spaces.Graph or a Dict with one Graph "
            f"entry (found {space!r}). Pass observation_space=gymnasium.spaces.Graph("
            "node_space=Box(F), edge_space=Box(D) or None) in config.environment(...)."
        )
    feat = int(np.prod(node_space.shape[-1:])) if node_space.shape else 1
    if edge_space is None:
        return feat, None
    edim = int(np.prod(edge_space.shape[-1:])) if edge_space.shape else 1
    return feat, edim
