"""Typed graphs' spaces read off what is there: the :class:`~offline_graph.data.graphs.typed.TypedGraph`
of one observation, of a set of episodes with no spaces recorded, and the node type a
``NodeAction`` picks from (pure numpy / gymnasium)."""

from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.data.graphs.typed import TypedGraph, edge_type_text


def action_node_type(typed: TypedGraph | None, action_space: Any, where: str = "action space") -> str | None:
    """The node type a ``NodeAction`` picks from (None for other actions); ConfigError where
    the action space does not fit the observation space (an ``EdgeAction`` or a ``NodeAction``
    without a node type on a typed graph, a ``node_type`` on a plain one)."""
    level = getattr(action_space, "level", None)
    node_type = getattr(action_space, "node_type", None)
    if typed is None:
        if node_type is not None:
            raise ConfigError(
                f"{where}: NodeAction's node_type must be None for a plain Graph observation "
                f"space (found node_type={node_type!r}). node_type names a TypedGraph's node type."
            )
        return None
    if level == "edge":
        raise ConfigError(
            f"{where}: the action of a typed graph must be Discrete(k) or NodeAction(max, "
            f"node_type=...) (found {action_space!r}). Edge actions on typed graphs are not built."
        )
    if level == "node" and node_type not in typed.node_dims:
        raise ConfigError(
            f"{where}: NodeAction's node_type must be one of the observation's node types "
            f"{typed.node_types} (found {node_type!r}). E.g. NodeAction({int(action_space.n)}, "
            f"node_type={typed.node_types[0]!r})."
        )
    return node_type if level == "node" else None


def infer_typed(obs: Any) -> TypedGraph | None:
    """The :class:`TypedGraph` of one typed observation dict (widths from its arrays), None
    when ``obs`` is not one (its ``x`` not a dict of ``[N, F]`` arrays)."""
    if not isinstance(obs, Mapping) or not isinstance(obs.get("x"), Mapping):
        return None

    def box(width: int) -> gym.spaces.Box:
        return gym.spaces.Box(-np.inf, np.inf, (int(width),), np.float32)

    try:
        nodes = {str(t): box(np.shape(x)[1]) for t, x in obs["x"].items()}
        attrs = {edge_type_text(k): v for k, v in (obs.get("edge_attr") or {}).items()}
        edges = {
            edge_type_text(r): (
                box(np.shape(attrs[edge_type_text(r)])[1]) if edge_type_text(r) in attrs else None
            )
            for r in obs.get("edge_index") or {}
        }
        return TypedGraph(nodes, edges)
    except (IndexError, TypeError, ValueError):
        return None


def infer_typed_spaces(episodes: list[Any], where: str) -> tuple[TypedGraph, gym.Space]:
    """(observation, action space) of typed episodes with no spaces recorded: the typed graph
    of their observations (the same in every one), and ``NodeAction(most nodes, node_type=t)``
    when they carry masks of one node type's length, else ``Discrete(largest action + 1)``."""
    space: TypedGraph | None = None
    mask_types: set[str] | None = None
    largest: dict[str, int] = {}
    top = -1
    for raw in episodes:
        for obs in raw.observations:
            one = infer_typed(obs)
            if one is None:
                continue
            if space is not None and one != space:
                raise ConfigError(
                    f"{where}, episode {raw.id!r}: the typed graph must be the same in every "
                    f"observation to infer the spaces (found {space.text()} and {one.text()}). "
                    "Pass --observation-space typed:... (or --env) explicitly."
                )
            space = one
            for t, x in obs["x"].items():
                largest[str(t)] = max(largest.get(str(t), 0), int(np.shape(x)[0]))
            if obs.get("action_mask") is not None:
                size = int(np.size(obs["action_mask"]))
                fits = {str(t) for t, x in obs["x"].items() if np.shape(x)[0] == size}
                mask_types = fits if mask_types is None else mask_types & fits
        actions = [int(np.asarray(a)) for a in raw.actions]
        top = max([top, *actions])
    if space is None:
        raise ConfigError(
            f"{where}: observations must be typed graph dicts to infer a typed space (found none)."
        )
    if mask_types is None:
        return space, gym.spaces.Discrete(max(top + 1, 1))
    if len(mask_types) != 1:
        raise ConfigError(
            f"{where}: action_mask must have one entry per node of one node type in every "
            f"observation to infer the action (found it fits {sorted(mask_types) or 'none'}). Pass "
            "--action-space node:MAX@<node type>."
        )
    node_type = mask_types.pop()
    return space, NodeAction(max(largest[node_type], 1), node_type=node_type)
