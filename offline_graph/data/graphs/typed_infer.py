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


def _text(key: Any) -> str:
    """A type key as text: bytes decoded, an edge type tuple joined (``a__to__b``)."""
    key = key.decode() if isinstance(key, bytes) else key
    return edge_type_text(key) if isinstance(key, (tuple, list)) else str(key)


def _width(value: Any) -> int | None:
    """The trailing width of a ``[N, W]`` array with rows (None: no rows to read it from)."""
    shape = np.shape(value)
    return int(shape[1]) if len(shape) == 2 and shape[0] > 0 else None


class _Widths:
    """Node and edge types with their widths, gathered over observations (order of first
    appearance; a width is read from any observation that has rows of that type)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.nodes: dict[str, int | None] = {}
        self.edges: dict[str, int | None] = {}

    def add(self, obs: Any, episode_id: Any = None) -> bool:
        if not isinstance(obs, Mapping) or not isinstance(obs.get("x"), Mapping):
            return False
        attrs = {_text(k): v for k, v in (obs.get("edge_attr") or {}).items()}
        for kind, seen, items in (
            ("node type", self.nodes, {_text(t): x for t, x in obs["x"].items()}),
            ("edge type", self.edges, {_text(r): attrs.get(_text(r)) for r in obs.get("edge_index") or {}}),
        ):
            for key, value in items.items():
                width, known = _width(value), seen.get(key)
                if known is not None and width is not None and width != known:
                    raise ConfigError(
                        f"{self.where}, episode {episode_id!r}: {kind} {key!r}'s width must be the "
                        f"same in every observation to infer the spaces (found {known} and {width}). "
                        "Pass --observation-space typed:... (or --env) explicitly."
                    )
                seen[key] = known if width is None else width
        return True

    def space(self) -> TypedGraph | None:
        if not self.nodes:
            return None

        def box(width: int) -> gym.spaces.Box:
            return gym.spaces.Box(-np.inf, np.inf, (int(width),), np.float32)

        try:
            nodes = {t: box(w or 1) for t, w in self.nodes.items()}
            return TypedGraph(nodes, {r: None if d is None else box(d) for r, d in self.edges.items()})
        except ConfigError:
            return None


def infer_typed(obs: Any) -> TypedGraph | None:
    """The :class:`TypedGraph` of one typed observation dict (widths from its arrays), None
    when ``obs`` is not one (its ``x`` not a dict of ``[N, F]`` arrays)."""
    widths = _Widths("observation")
    try:
        return widths.space() if widths.add(obs) else None
    except ConfigError:
        return None


def infer_typed_spaces(episodes: list[Any], where: str) -> tuple[TypedGraph, gym.Space]:
    """(observation, action space) of typed episodes with no spaces recorded: every node and
    edge type seen (widths from the observations that have rows of it; the order of first
    appearance), and ``NodeAction(most nodes, node_type=t)`` when the observations carry masks
    of one node type's length, else ``Discrete(largest action + 1)``."""
    widths = _Widths(where)
    mask_types: set[str] | None = None
    largest: dict[str, int] = {}
    top = -1
    for raw in episodes:
        for obs in raw.observations:
            if not widths.add(obs, raw.id):
                continue
            counts = {_text(t): int(np.shape(x)[0]) if np.ndim(x) else 0 for t, x in obs["x"].items()}
            for t, n in counts.items():
                largest[t] = max(largest.get(t, 0), n)
            if obs.get("action_mask") is not None:
                size = int(np.size(obs["action_mask"]))
                fits = {t for t, n in counts.items() if n == size}
                mask_types = fits if mask_types is None else mask_types & fits
        actions = [int(np.asarray(a)) for a in raw.actions]
        top = max([top, *actions])
    space = widths.space()
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
