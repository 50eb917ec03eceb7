"""Graph-level features: an observation space of one graph plus flat parts, and the one float
vector ``globals [G]`` per observation that the flat parts become (pure numpy / gymnasium).

The space is a ``gymnasium.spaces.Dict`` with exactly one ``Graph`` entry (any key) and flat
entries (``Box`` of any shape, ``Discrete``, ``MultiBinary``)::

    Dict({"graph": Graph(Box(F), Box(D)), "clock": Box(0, 1, (2,)), "mode": Discrete(3)})

An observation is the Dict's own nesting, ``{"graph": <graph dict or GraphInstance>, "clock":
[2] floats, "mode": an int}``, or the graph dict itself with the flat parts as extra keys
(``{"x", "edge_index", ..., "clock", "mode"}``; part names must then differ from the graph
keys), or that graph dict with ``globals`` [G], the parts flattened already (how our
EnvRunner's episodes hold them, and so what RLlib's recorder writes). The flat parts become
``globals``: ``gymnasium.spaces.flatten`` of them in the Dict's key order (a ``Box`` raveled,
a ``Discrete`` one-hot, as RLlib's encoders take them), float32 ``[G]`` with ``G = flatdim``.
In a learner batch ``globals`` is ``[B, G]``: one row per graph, never repeated per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.typed import TypedGraph

_GRAPHS = (gym.spaces.Graph, TypedGraph)

GRAPH_KEYS = ("x", "edge_index", "edge_attr", "action_mask")
"""The keys of a graph observation dict (flat parts of a flat observation must not use them)."""
FLAT_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary)


@dataclass(frozen=True)
class GlobalsLayout:
    """Where an observation's graph and flat parts are, and how the parts flatten."""

    graph_key: str
    """The Dict key of the graph."""
    parts: tuple[tuple[str, gym.Space], ...] = field(hash=False)
    """The flat parts, in the Dict's key order (the order of their features in ``globals``;
    compared, not hashed: a ``Box`` has no hash, and specs are cache keys)."""

    @property
    def dim(self) -> int:
        """G: the length of ``globals``."""
        return int(sum(gym.spaces.flatdim(space) for _, space in self.parts))

    def columns(self) -> list[str]:
        """``globals``'s features by name: ``clock[0]``, ``clock[1]``, ``mode=0``, ..."""
        names = []
        for key, space in self.parts:
            if isinstance(space, gym.spaces.Discrete):
                names += [f"{key}={int(space.start) + i}" for i in range(int(space.n))]
            else:
                names += [f"{key}[{i}]" for i in range(gym.spaces.flatdim(space))]
        return names


def globals_layout(space: Any) -> GlobalsLayout | None:
    """The layout of a Dict observation space with one Graph entry (None for a plain Graph);
    raises :class:`ConfigError` for any other Dict."""
    if not isinstance(space, gym.spaces.Dict) or "x" in space.spaces:
        return None
    graphs = [k for k, s in space.spaces.items() if isinstance(s, _GRAPHS)]
    others = [(k, s) for k, s in space.spaces.items() if not isinstance(s, _GRAPHS)]
    bad = [(k, s) for k, s in others if not isinstance(s, FLAT_SPACES)]
    if len(graphs) != 1 or bad or not all(isinstance(k, str) for k, _ in others):
        found = f"{len(graphs)} Graph entries" if len(graphs) != 1 else f"{bad[0][0]!r}: {bad[0][1]!r}"
        raise ConfigError(
            f"observation space: a Dict space must have exactly one gymnasium.spaces.Graph entry "
            f"and Box / Discrete / MultiBinary entries with str keys (found {found}). "
            "Nest other structures as separate flat entries, e.g. Dict({'graph': Graph(...), "
            "'clock': Box(0, 1, (2,)), 'mode': Discrete(3)})."
        )
    return GlobalsLayout(graph_key=str(graphs[0]), parts=tuple((str(k), s) for k, s in others))


def dict_layout(space: Any) -> GlobalsLayout | None:
    """:func:`globals_layout`, or None for a space it refuses (a multi-agent Dict keyed by
    agent, a Box): for code that takes any space and acts only on graph-and-parts ones."""
    try:
        return globals_layout(space)
    except ConfigError:
        return None


def split_parts(obs: Any, layout: GlobalsLayout | None) -> tuple[Any, np.ndarray | None]:
    """:func:`split_observation`, or ``(obs, None)`` without a layout, for a non-dict (a
    ``GraphInstance`` of a plain Graph space) and for a graph dict that carries its ``globals``
    already (converted before)."""
    if layout is None or not isinstance(obs, dict):
        return obs, None
    if "x" in obs and "globals" in obs and not any(k in obs for k, _ in layout.parts if k != "globals"):
        return obs, None
    return split_observation(obs, layout)


def with_globals(obs: Any, layout: GlobalsLayout | None) -> Any:
    """A graph dict whose flat parts (nested or beside ``x``) are its ``globals`` vector, as
    batching takes it (:meth:`~offline_graph.data.graphs.columns.GraphColumns.from_graphs`)."""
    graph, row = split_parts(obs, layout)
    return graph if row is None else {**graph, "globals": row}


def graph_part(space: Any) -> Any:
    """The Graph entry of a Dict observation space; the space itself otherwise."""
    layout = globals_layout(space)
    return space if layout is None else space[layout.graph_key]


def globals_size(space: Any) -> int:
    """G of an observation space (0: no graph-level features)."""
    layout = globals_layout(space)
    return 0 if layout is None else layout.dim


class PartError(ValueError):
    """A flat part that does not fit its space: ``key`` names it, the message says how."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def split_observation(obs: Any, layout: GlobalsLayout) -> tuple[Any, np.ndarray]:
    """``(graph, globals [G] float32)`` of one observation of ``layout``'s space (nested or
    flat, see the module doc); raises :class:`PartError` naming the part that does not fit."""
    if not isinstance(obs, dict):
        raise PartError(layout.graph_key, f"observation must be a dict (found {type(obs).__name__})")
    nested = layout.graph_key in obs
    graph = obs[layout.graph_key] if nested else {k: obs[k] for k in GRAPH_KEYS if k in obs}
    if not nested and "x" not in obs:
        key, found = layout.graph_key, sorted(map(str, obs))
        raise PartError(key, f"observation must have the key {key!r} (found {found})")
    if not nested and "globals" in obs and not any(key in obs for key, _ in layout.parts):
        return graph, _flat_globals(obs["globals"], layout)  # the parts flattened already
    values = []
    for key, space in layout.parts:
        if key not in obs:
            raise PartError(key, f"observation must have the key {key!r} (found {sorted(map(str, obs))})")
        values.append(flat_part(obs[key], key, space))
    return graph, (np.concatenate(values) if values else np.zeros(0, np.float32))


def _flat_globals(value: Any, layout: GlobalsLayout) -> np.ndarray:
    """A ``globals`` vector given in place of the parts (how our EnvRunner's episodes, and so
    RLlib's recorder, hold them): ``G`` finite numbers."""
    try:
        arr = np.asarray(value, dtype=np.float32).reshape(-1)
    except (ValueError, TypeError):
        arr = np.asarray([np.nan], np.float32)  # not numbers: refused below
    if arr.size != layout.dim or not np.isfinite(arr).all():
        found = f"{arr.size} values" if np.isfinite(arr).all() else "values that are not finite numbers"
        raise PartError(
            "globals",
            f"globals must be {layout.dim} finite numbers, the parts {[k for k, _ in layout.parts]} "
            f"flattened (found {found})",
        )
    return arr


def flat_part(value: Any, key: str, space: gym.Space) -> np.ndarray:
    """One flat part checked against its space and flattened to float32."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        arr = np.asarray(None)
    if isinstance(space, gym.spaces.Discrete):
        numeric = arr.dtype.kind in "iub" or arr.dtype.kind == "f"
        ok = arr.ndim == 0 and numeric and bool(np.isfinite(arr) and arr == np.round(arr))
        lo, n = int(space.start), int(space.n)
        if not ok or not lo <= int(arr) < lo + n:
            raise PartError(key, f"{key} must be an integer in {lo}..{lo + n - 1} (found {_shown(arr)})")
        out = np.zeros(n, np.float32)
        out[int(arr) - lo] = 1.0
        return out
    shape = tuple(space.shape or ())
    if arr.shape != shape or arr.dtype.kind not in "fiub":
        raise PartError(key, f"{key} must be numbers of shape {list(shape)} (found {_shown(arr)})")
    out = arr.astype(np.float32).reshape(-1)
    if not np.isfinite(out).all():
        raise PartError(key, f"{key} must be finite (found {out[~np.isfinite(out)][:3].tolist()})")
    if isinstance(space, gym.spaces.MultiBinary) and not np.isin(out, (0.0, 1.0)).all():
        raise PartError(key, f"{key} must be 0s and 1s (found {out[~np.isin(out, (0.0, 1.0))][:3].tolist()})")
    return out


def _shown(arr: np.ndarray) -> str:
    if arr.dtype == object:
        return type(arr[()]).__name__ if arr.ndim == 0 else f"object {list(arr.shape)}"
    return f"{arr.dtype} {list(arr.shape)}" if arr.ndim else f"{arr.dtype} {arr[()].item()!r}"
