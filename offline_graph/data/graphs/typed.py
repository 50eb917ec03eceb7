"""Typed (heterogeneous) graphs: node types with their own feature widths and counts, edge
types ``(src_type, relation, dst_type)`` with their own edge features (PyG ``HeteroData``'s
model), as a gymnasium space and as an observation dict (pure numpy / gymnasium).

The space::

    TypedGraph(
        node_types={"job": Box(-inf, inf, (3,)), "machine": Box(-inf, inf, (2,))},
        edge_types={("job", "fits", "machine"): Box(-inf, inf, (1,)),
                    ("machine", "runs", "job"): None},    # None: no edge features
    )

An edge type is a ``(src, relation, dst)`` tuple or its text ``"src__relation__dst"`` (PyG's
``"__".join``, what msgpack and Arrow keep: map keys must be strings); names are letters, digits
and ``_`` (no ``__`` inside a name). One observation::

    {"x": {"job": float [N_job, 3], "machine": float [N_machine, 2]},
     "edge_index": {"job__fits__machine": int [2, E1], "machine__runs__job": int [2, E2]},
     "edge_attr": {"job__fits__machine": float [E1, 1]},
     "action_mask": bool [N_job]}      # only with NodeAction(max_nodes, node_type="job")

``edge_index`` row 0 indexes the source type's nodes (``0..N_src-1``), row 1 the target type's.
Every node type of the space is present (no nodes: any empty array, ``[]`` or ``[0, F]``); an
edge type without edges is an empty array or left out; one without features has no
``edge_attr`` entry. A node type may have no
nodes; the graph must have at least one node, and a ``NodeAction`` type at least one per step.
Text form: ``typed:job=3,machine=2|job__fits__machine=1,machine__runs__job``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import gymnasium as gym
import numpy as np

from offline_graph.data.errors import ConfigError

SEP = "__"
"""Joins an edge type's ``(src, relation, dst)`` into its text (PyG's separator)."""
_NAME = re.compile(r"^[A-Za-z0-9]+(?:_[A-Za-z0-9]+)*$")


def edge_type_text(edge_type: Any, where: str = "TypedGraph") -> str:
    """``("a", "to", "b")`` or ``"a__to__b"`` -> ``"a__to__b"``; ConfigError for anything else."""
    parts = tuple(edge_type) if isinstance(edge_type, (tuple, list)) else str(edge_type).split(SEP)
    if len(parts) != 3 or not all(isinstance(p, str) and _NAME.match(p) for p in parts):
        raise ConfigError(
            f"{where}: edge type must be (src_type, relation, dst_type) or 'src__relation__dst' "
            f"with names of letters, digits and single '_' (found {edge_type!r})."
        )
    return SEP.join(parts)


def edge_ends(edge_type: str) -> tuple[str, str]:
    """(source node type, target node type) of an edge type's text."""
    src, _, dst = edge_type.split(SEP)
    return src, dst


def _width(space: Any, what: str, allow_none: bool) -> int | None:
    if space is None and allow_none:
        return None
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1 or space.shape[0] < 1:
        expected = "a Box of shape (width,) or None" if allow_none else "a Box of shape (width,)"
        raise ConfigError(f"TypedGraph: {what} must be {expected} (found {space!r}).")
    return int(space.shape[0])


class TypedGraph(gym.Space):
    """A heterogeneous graph observation space (see the module doc)."""

    def __init__(
        self,
        node_types: Mapping[str, gym.spaces.Box],
        edge_types: Mapping[Any, gym.spaces.Box | None],
        seed: int | np.random.Generator | None = None,
    ):
        if not isinstance(node_types, Mapping) or not node_types:
            raise ConfigError(
                f"TypedGraph: node_types must be a non-empty dict of name -> Box(F) (found {node_types!r})."
            )
        if not isinstance(edge_types, Mapping):
            raise ConfigError(
                f"TypedGraph: edge_types must be a dict of (src, relation, dst) -> Box(D) or None "
                f"(found {type(edge_types).__name__})."
            )
        for name in node_types:
            if not isinstance(name, str) or not _NAME.match(name):
                raise ConfigError(
                    f"TypedGraph: node type must be a name of letters, digits and single '_' "
                    f"(found {name!r})."
                )
        self.node_spaces: dict[str, gym.spaces.Box] = dict(node_types)
        self.node_dims: dict[str, int] = {
            t: int(_width(s, f"node type {t!r}", False) or 0) for t, s in node_types.items()
        }
        self.edge_spaces: dict[str, gym.spaces.Box | None] = {}
        self.edge_dims: dict[str, int | None] = {}
        for key, space in edge_types.items():
            text = edge_type_text(key)
            for end in edge_ends(text):
                if end not in self.node_dims:
                    raise ConfigError(
                        f"TypedGraph: edge type {text!r}'s node types must be among node_types "
                        f"{list(self.node_dims)} (found {end!r})."
                    )
            if text in self.edge_dims:
                raise ConfigError(f"TypedGraph: edge types must be distinct (found {text!r} twice).")
            self.edge_spaces[text] = space
            self.edge_dims[text] = _width(space, f"edge type {text!r}", True)
        super().__init__(None, None, seed)

    @property
    def node_types(self) -> list[str]:
        """The node types, in the space's order."""
        return list(self.node_dims)

    @property
    def edge_types(self) -> list[str]:
        """The edge types' texts (``src__relation__dst``), in the space's order."""
        return list(self.edge_dims)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:  # type: ignore[override]
        """A random observation: 1..5 nodes of each type, 0..2N edges of each edge type."""
        rng = self.np_random
        counts = {t: int(rng.integers(1, 6)) for t in self.node_dims}
        obs: dict[str, Any] = {
            "x": {t: rng.normal(size=(counts[t], f)).astype(np.float32) for t, f in self.node_dims.items()},
            "edge_index": {},
            "edge_attr": {},
        }
        for r, d in self.edge_dims.items():
            src, dst = edge_ends(r)
            num_e = int(rng.integers(0, 2 * counts[src] + 1))
            obs["edge_index"][r] = np.stack(
                [rng.integers(0, counts[src], num_e), rng.integers(0, counts[dst], num_e)]
            ).astype(np.int64)
            if d is not None:
                obs["edge_attr"][r] = rng.normal(size=(num_e, d)).astype(np.float32)
        return obs

    def contains(self, x: Any) -> bool:
        try:
            typed_observation(x, self)
        except (TypedPartError, TypeError, ValueError):
            return False
        return True

    def __repr__(self) -> str:
        nodes = ", ".join(f"{t}={f}" for t, f in self.node_dims.items())
        edges = ", ".join(r if d is None else f"{r}={d}" for r, d in self.edge_dims.items())
        return f"TypedGraph(nodes: {nodes}; edges: {edges})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, TypedGraph)
            and list(other.node_dims.items()) == list(self.node_dims.items())
            and list(other.edge_dims.items()) == list(self.edge_dims.items())
        )

    def __hash__(self) -> int:
        return hash((tuple(self.node_dims.items()), tuple(self.edge_dims.items())))

    def __reduce__(self) -> Any:
        return (TypedGraph, (self.node_spaces, self.edge_spaces))

    def text(self) -> str:
        """The compact text form ``typed:a=3,b=2|a__to__b=1,b__of__a``."""
        nodes = ",".join(f"{t}={f}" for t, f in self.node_dims.items())
        edges = ",".join(r if d is None else f"{r}={d}" for r, d in self.edge_dims.items())
        return f"typed:{nodes}|{edges}"


def parse_typed(rest: str) -> TypedGraph:
    """The space of a text form's part after ``typed:`` (ConfigError on bad text)."""
    nodes_text, bar, edges_text = rest.partition("|")
    box = lambda w: gym.spaces.Box(-np.inf, np.inf, (w,), np.float32)  # noqa: E731
    nodes: dict[str, gym.spaces.Box] = {}
    edges: dict[str, gym.spaces.Box | None] = {}
    try:
        for part in filter(None, nodes_text.split(",")):
            name, eq, width = part.partition("=")
            if not eq or int(width) < 1:
                raise ValueError(part)
            nodes[name.strip()] = box(int(width))
        for part in filter(None, edges_text.split(",")):
            name, eq, width = part.partition("=")
            edges[name.strip()] = box(int(width)) if eq and int(width) > 0 else None
    except ValueError as err:
        raise ConfigError(
            "--observation-space: a typed graph's text must be "
            "typed:<type>=<F>,...|<src__rel__dst>[=<D>],... "
            f"(found {('typed:' + rest)!r}: {err} is not name=<int>)."
        ) from None
    if not bar and not nodes:
        raise ConfigError(
            f"--observation-space: a typed graph's text must name its node types, "
            f"typed:job=3,machine=2|job__fits__machine=1 (found {('typed:' + rest)!r})."
        )
    return TypedGraph(nodes, edges)


class TypedPartError(ValueError):
    """A part of a typed observation that does not fit its space: ``column`` names it
    (``x['job']``, ``edge_index['job__fits__machine']``), ``reason`` is the check's key."""

    def __init__(self, reason: str, column: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.column = column


def _typed_dict(value: Any, name: str, keys: list[str], edge: bool) -> dict[str, Any]:
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise TypedPartError(
            "obs_type", name, f"{name} must be a dict keyed by type (found {type(value).__name__})"
        )
    out: dict[str, Any] = {}
    for key, v in value.items():
        k = key.decode() if isinstance(key, bytes) else key
        if edge:
            try:
                k = edge_type_text(k)
            except ConfigError:
                pass
        out[str(k) if not isinstance(k, str) else k] = v
    unknown = [k for k in out if k not in keys]
    if unknown:
        raise TypedPartError(
            "obs_type",
            f"{name}[{unknown[0]!r}]",
            f"{name}'s keys must be among the space's {keys} (found {unknown[0]!r})",
        )
    return out


def _array(value: Any) -> np.ndarray:
    try:
        return np.asarray(value)
    except (ValueError, TypeError):
        return np.asarray(None)


def _shown(arr: np.ndarray) -> str:
    return f"{arr.dtype} {list(arr.shape)}"


def typed_observation(obs: Any, space: TypedGraph) -> dict[str, Any]:
    """One observation of ``space`` checked and normalized: ``{"x": {type: float32 [N, F]},
    "edge_index": {edge type text: int64 [2, E]}, "edge_attr": {edge type: float32 [E, D]}}``
    plus ``action_mask`` and ``globals`` as given (checked by the caller, which knows the
    action space and the Dict's flat parts).
    Raises :class:`TypedPartError` naming the part that does not fit."""
    if not isinstance(obs, Mapping) or "x" not in obs:
        found = sorted(map(str, obs)) if isinstance(obs, Mapping) else type(obs).__name__
        raise TypedPartError(
            "obs_type",
            "observations",
            f"a typed observation must be a dict with 'x' and 'edge_index' keyed by type (found {found})",
        )
    xs = _typed_dict(obs["x"], "x", space.node_types, edge=False)
    eis = _typed_dict(obs.get("edge_index"), "edge_index", space.edge_types, edge=True)
    eas = _typed_dict(obs.get("edge_attr"), "edge_attr", space.edge_types, edge=True)
    out_x: dict[str, np.ndarray] = {}
    for t, feat in space.node_dims.items():
        column = f"x[{t!r}]"
        if t not in xs:
            raise TypedPartError(
                "x_shape",
                column,
                f"{column} must be present: every node type of the space (found {sorted(xs)})",
            )
        x = _array(xs[t])
        if x.dtype != object and (x.shape[:1] == (0,) or x.shape == (0,)):  # no nodes: [], [0, F]
            x = np.zeros((0, feat), np.float32)
        if x.ndim != 2 or x.shape[1] != feat or x.dtype.kind not in "fiu":
            raise TypedPartError("x_shape", column, f"{column} must be float [N, {feat}] (found {_shown(x)})")
        x = x.astype(np.float32, copy=False)
        if not np.isfinite(x).all():
            raise TypedPartError(
                "nonfinite", column, f"{column} must be finite (found {x[~np.isfinite(x)][:3].tolist()})"
            )
        out_x[t] = x
    if sum(len(x) for x in out_x.values()) == 0:
        raise TypedPartError("empty_graph", "x", "number of nodes must be >= 1 over all node types (found 0)")
    out_ei: dict[str, np.ndarray] = {}
    out_ea: dict[str, np.ndarray] = {}
    for r, dim in space.edge_dims.items():
        column = f"edge_index[{r!r}]"
        ei = _array(eis.get(r, np.zeros((2, 0), np.int64)))
        if ei.size == 0 and ei.dtype != object:  # no edges of this type ([], np.zeros((2, 0)), ...)
            ei = np.zeros((2, 0), np.int64)
        if ei.ndim != 2 or ei.shape[0] != 2 or ei.dtype.kind not in "iu":
            raise TypedPartError(
                "edge_index_shape", column, f"{column} must be integer [2, E] (found {_shown(ei)})"
            )
        src, dst = edge_ends(r)
        for row, end in ((0, src), (1, dst)):
            n = len(out_x[end])
            if ei.shape[1] and (int(ei[row].min()) < 0 or int(ei[row].max()) >= n):
                bad = int(ei[row].max()) if int(ei[row].max()) >= n else int(ei[row].min())
                raise TypedPartError(
                    "edge_index_range",
                    column,
                    f"{column} row {row} ({'source' if row == 0 else 'target'} type {end!r}) must index "
                    f"0..{n - 1} (found {bad})",
                )
        out_ei[r] = ei.astype(np.int64, copy=False)
        ea_given = eas.get(r)
        column = f"edge_attr[{r!r}]"
        if dim is None:
            if ea_given is not None:
                raise TypedPartError(
                    "edge_attr",
                    column,
                    f"{column} must be absent: edge type {r!r} has no features (found "
                    f"{_shown(_array(ea_given))})",
                )
            continue
        ea = _array(np.zeros((0, dim), np.float32) if ea_given is None and ei.shape[1] == 0 else ea_given)
        if ei.shape[1] == 0 and ea.size == 0 and ea.dtype != object:  # no edges: any empty array
            ea = np.zeros((0, dim), np.float32)
        if ea.shape != (ei.shape[1], dim) or ea.dtype.kind not in "fiu":
            found = "missing" if ea_given is None else _shown(ea)
            raise TypedPartError(
                "edge_attr", column, f"{column} must be float [E={ei.shape[1]}, {dim}] (found {found})"
            )
        ea = ea.astype(np.float32, copy=False)
        if not np.isfinite(ea).all():
            raise TypedPartError(
                "nonfinite", column, f"{column} must be finite (found {ea[~np.isfinite(ea)][:3].tolist()})"
            )
        out_ea[r] = ea
    out: dict[str, Any] = {"x": out_x, "edge_index": out_ei, "edge_attr": out_ea}
    for key in ("action_mask", "globals"):  # checked by the caller (the action / Dict space)
        if obs.get(key) is not None:
            out[key] = obs[key]
    return out


def typed_space(space: Any) -> TypedGraph | None:
    """The :class:`TypedGraph` of an observation space (itself, or a Dict's graph entry)."""
    if isinstance(space, TypedGraph):
        return space
    if isinstance(space, gym.spaces.Dict):
        found = [s for s in space.spaces.values() if isinstance(s, TypedGraph)]
        return found[0] if len(found) == 1 else None
    return None


def text_keys(obs: dict[str, Any]) -> dict[str, Any]:
    """A typed observation with its edge types keyed by text (``("a", "to", "b")`` ->
    ``"a__to__b"``: msgpack and Arrow keep string keys only); other observations as they are."""
    if not isinstance(obs.get("edge_index"), Mapping):
        return obs
    out = dict(obs)
    for key in ("edge_index", "edge_attr"):
        if isinstance(out.get(key), Mapping):
            out[key] = {edge_type_text(k) if isinstance(k, tuple) else k: v for k, v in out[key].items()}
    return out
