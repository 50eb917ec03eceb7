"""Validation of decoded graph episodes against the spaces (pure numpy, no Ray).

Checks, each with a short ``reason`` key used for skip-mode accounting:

=====================  ==================================================================
``not_finished``       the episode is neither terminated nor truncated (unless
                       ``spec.unfinished``: off-policy evaluation joins RLlib's chunks)
``length``             ``len(observations) != len(actions) + 1`` or rewards != actions, or T == 0
``obs_type``           an observation is not a dict with ``x`` and ``edge_index``
``x_shape``            ``x`` is not float [N, F] with the space's F
``empty_graph``        N == 0 (empty graphs are illegal: a graph-level action needs a node)
``edge_index_shape``   ``edge_index`` is not integer [2, E]
``edge_index_range``   an edge index outside ``0..N-1``
``edge_attr``          ``edge_attr`` missing / not [E, D] when the space has edge features
                       (missing is fine for a graph without edges: gymnasium's
                       ``GraphInstance(nodes, None, None)``), or present when it has none
``nonfinite``          NaN or inf in ``x`` or ``edge_attr``
``action``             an action outside the action space (selection spaces: outside ``0..N_t-1``
                       / ``0..E_t-1`` of its step's graph, or above the space's limit), or not
                       an integer (a float is read when it holds one exactly: ``2.0`` is 2)
``action_mask``        ``action_mask`` not bool ``[N_t]`` / ``[E_t]``, present for a graph-level
                       action space, or allowing nothing on a step where an action was taken
``masked_action``      the recorded action is forbidden by its step's ``action_mask``
``too_many_choices``   a step's graph has more nodes (edges) than ``NodeAction(max_nodes)``
                       (``EdgeAction(max_edges)``) allows
``reward``             a non-finite reward, or one that is not a number
``globals``            a ``Dict`` observation space's part missing, or not fitting its space
                       (``Box`` shape, finite; ``Discrete`` an integer in range)
=====================  ==================================================================

Every check is vectorized over the whole episode after one pass that collects shapes.
Observations arrive as dicts: :func:`offline_graph.data.episodes.codec.decode_state` turns gymnasium
``GraphInstance`` rows into dicts and drops lookback steps (see its module doc).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from offline_graph.data.episodes.action_checks import check_actions_rewards
from offline_graph.data.graphs.columns import GraphColumns, counts_to_ptr, masks_or_allowed
from offline_graph.data.episodes.codec import RawEpisode, instance_to_dict
from offline_graph.data.graphs.globals import GlobalsLayout, PartError, split_observation
from offline_graph.data.graphs.typed import TypedPartError, typed_observation
from offline_graph.data.graphs.typed_columns import TypedColumns
from offline_graph.data.errors import GraphValidationError, where
from offline_graph.data.episodes.spec import EpisodeSpec

__all__ = ["Episode", "EpisodeSpec", "check_actions_rewards", "check_values", "validate_episode", "values_ok"]


@dataclass
class Episode:
    """A validated episode: T+1 observations as columns, T actions and rewards."""

    id: str
    obs: GraphColumns
    actions: np.ndarray
    rewards: np.ndarray
    terminated: bool
    truncated: bool
    t_started: int = 0
    """RLlib's timestep of the first step (non-zero for a later chunk of a cut episode)."""

    def __len__(self) -> int:
        return len(self.actions)


def _fail(reason: str, msg: str) -> GraphValidationError:
    return GraphValidationError(msg, reason=reason)


def _array(value: Any) -> np.ndarray:
    """``np.asarray(value)``; what numpy makes no array of (ragged or too deeply nested lists,
    undecodable bytes), and an array header left undecoded because it does not describe its
    bytes (:func:`offline_graph.data.episodes.codec.decode_map`), become a 0-d object array, which
    every shape check refuses."""
    if not isinstance(value, dict):
        try:
            return np.asarray(value)
        except (ValueError, TypeError, RecursionError):
            pass
    out = np.empty((), object)
    out[()] = value
    return out


def _found(arr: np.ndarray) -> str:
    """``dtype [shape]`` of a value for a message; an undecoded array header as what it claims."""
    value = arr[()] if arr.dtype == object and arr.ndim == 0 else None
    if isinstance(value, dict) and b"nd" in value:
        data = value.get(b"data")
        size = len(data) if isinstance(data, bytes) else type(data).__name__
        return (
            f"an array header claiming {value.get(b'type')!r} {value.get(b'shape')!r} over {size} "
            "bytes: the row is corrupt"
        )
    return f"{arr.dtype} {list(arr.shape)}"


def validate_episode(
    raw: RawEpisode, spec: EpisodeSpec, *, file: str | None = None, row: int | None = None
) -> Episode:
    """Check ``raw`` and build its columns; raises :class:`GraphValidationError` (``.reason``)."""
    eid = raw.id

    def ctx(t: int | None = None, column: str | None = None) -> str:
        return where(file=file, row=row, episode_id=eid, t=t, column=column)

    if not (raw.terminated or raw.truncated or spec.unfinished):
        raise _fail(
            "not_finished",
            f"{ctx()}: episode must be finished, terminated or truncated (found "
            "terminated=False, truncated=False). RLlib's recorder writes an episode still running "
            "when sample() returns as an unfinished chunk: record with sample(num_episodes=...), or "
            "leave such chunks out with on_error='skip' (--on-error skip; counted in the report). "
            "estimate_value joins an episode's chunks.",
        )
    obs: list[Any] = list(raw.observations) if isinstance(raw.observations, (list, tuple)) else []
    actions = _array(raw.actions)
    rewards = _array(raw.rewards)
    num_t = actions.shape[0] if actions.ndim else -1
    if num_t < 1 or len(obs) != num_t + 1 or rewards.shape != (num_t,):
        raise _fail(
            "length",
            f"{ctx()}: lengths must be observations = actions + 1 = rewards + 1 with at least "
            f"one action (found {len(obs)} observations, {max(num_t, 0)} actions, "
            f"{rewards.size} rewards). The episode is truncated or mis-assembled.",
        )
    rows = None if spec.globals is None else _split_globals(obs, spec.globals, ctx)
    if spec.typed is not None:
        typed = _typed_graphs(obs, spec, ctx)
        typed.globals = rows
        return checked_episode(raw, cast(GraphColumns, typed), actions, rewards, spec, ctx)
    for t, o in enumerate(obs):
        if not isinstance(o, dict) or "x" not in o or "edge_index" not in o:
            found = sorted(o, key=repr) if isinstance(o, dict) else type(o).__name__  # keys of any type
            raise _fail(
                "obs_type",
                f"{ctx(t, 'observations')}: observation must be a dict with keys 'x' and "
                f"'edge_index' or a gymnasium GraphInstance (found {found}). Store graphs as "
                "offline_graph.graph_to_dict() or GraphInstance(nodes, edges, edge_links).",
            )
    xs = [_array(o["x"]) for o in obs]
    eis = [_array(o["edge_index"]) for o in obs]
    feat = spec.num_features
    for t, x in enumerate(xs):
        if x.ndim != 2 or x.shape[1] != feat or x.dtype.kind != "f":
            raise _fail(
                "x_shape",
                f"{ctx(t, 'x')}: node features must be float [N, {feat}] (found "
                f"{_found(x)}). F comes from the observation space's node_space.",
            )
        if x.shape[0] == 0:
            raise _fail(
                "empty_graph",
                f"{ctx(t, 'x')}: number of nodes must be >= 1 (found 0). Empty graphs are not "
                "legal observations; give the graph at least one (dummy) node.",
            )
    for t, ei in enumerate(eis):
        if ei.ndim != 2 or ei.shape[0] != 2 or ei.dtype.kind not in "iu":
            raise _fail(
                "edge_index_shape",
                f"{ctx(t, 'edge_index')}: edge_index must be integer [2, E] (PyG order) "
                f"(found {_found(ei)}). A dict's edge_index is "
                "GraphInstance.edge_links [E, 2] transposed (a GraphInstance's edge_links are read "
                "so); use offline_graph.graph_to_dict().",
            )
    edge_attr = None
    if spec.edge_dim is not None:
        eas = []
        for t, o in enumerate(obs):
            ea = o.get("edge_attr")
            num_e = eis[t].shape[1]
            if ea is None and num_e == 0:  # no edges, no edge features to give
                ea = np.zeros((0, spec.edge_dim), np.float32)
            ea = None if ea is None else _array(ea)
            if ea is not None and num_e == 0 and ea.size == 0 and ea.dtype != object:  # [] as well
                ea = np.zeros((0, spec.edge_dim), np.float32)
            if ea is None or ea.shape != (num_e, spec.edge_dim) or ea.dtype.kind != "f":
                found = "missing" if ea is None else _found(ea)
                raise _fail(
                    "edge_attr",
                    f"{ctx(t, 'edge_attr')}: edge features must be float [E={num_e}, "
                    f"{spec.edge_dim}] (found {found}). The observation space has edge "
                    "features, so every observation needs edge_attr.",
                )
            eas.append(ea)
        edge_attr = np.concatenate(eas).astype(np.float32, copy=False)
    else:
        for t, o in enumerate(obs):
            if o.get("edge_attr") is not None:
                raise _fail(
                    "edge_attr",
                    f"{ctx(t, 'edge_attr')}: edge_attr must be absent (found "
                    f"{_found(_array(o['edge_attr']))}) because the observation space has "
                    "edge_space=None. Give the space an edge_space=Box(D) to use edge features.",
                )
    num_nodes = np.fromiter((len(x) for x in xs), np.int64, len(xs))
    num_edges = np.fromiter((ei.shape[1] for ei in eis), np.int64, len(eis))
    x_all = np.concatenate(xs).astype(np.float32, copy=False)
    ei_all = np.concatenate(eis, axis=1).astype(np.int64, copy=False)
    graphs = GraphColumns(x_all, counts_to_ptr(num_nodes), ei_all, counts_to_ptr(num_edges), edge_attr)
    graphs.globals = rows
    _collect_masks(obs, graphs, spec, ctx)
    return checked_episode(raw, graphs, actions, rewards, spec, ctx)


def checked_episode(
    raw: RawEpisode,
    graphs: GraphColumns,
    actions: np.ndarray,
    rewards: np.ndarray,
    spec: EpisodeSpec,
    ctx: Any,
) -> Episode:
    """The :class:`Episode` of ``raw``'s built columns once its features and edge indices
    (:func:`check_values`), actions and rewards (``check_actions_rewards``) pass (both the
    full and the fast path, :mod:`offline_graph.data.episodes.fast_episode`)."""
    check_values(graphs, ctx)
    check_actions_rewards(actions, rewards, spec, ctx, graphs)
    return Episode(
        id=raw.id,
        obs=graphs,
        actions=actions.astype(np.int64, copy=False),
        rewards=rewards.astype(np.float32, copy=False),
        terminated=raw.terminated,
        truncated=raw.truncated and not raw.terminated,
        t_started=raw.t_started,
    )


def _split_globals(obs: list[Any], layout: GlobalsLayout, ctx: Any) -> np.ndarray:
    """Replace each observation of a ``Dict`` space by its graph (in place) and return the
    flat parts as ``globals`` rows ``[T+1, G]``."""
    rows = []
    for t, o in enumerate(obs):
        try:
            graph, row = split_observation(o, layout)
        except PartError as err:
            parts = ", ".join(f"{k!r}" for k, _ in layout.parts)
            raise _fail(
                "globals",
                f"{ctx(t, f'observations.{err.key}')}: {err}. The observation space is a Dict "
                f"of the graph {layout.graph_key!r} and the parts {parts}: every observation "
                "holds each of them (or the graph dict with the parts beside 'x').",
            ) from None
        obs[t] = instance_to_dict(graph)
        rows.append(row)
    return np.stack(rows) if rows else np.zeros((0, layout.dim), np.float32)


def _typed_graphs(obs: list[Any], spec: EpisodeSpec, ctx: Any) -> TypedColumns:
    """The columns of a typed graph's observations, each checked against the space
    (:func:`~offline_graph.data.graphs.typed.typed_observation`), masks collected."""
    space = spec.typed
    assert space is not None  # noqa: S101 (the caller's branch)
    normalized = []
    for t, o in enumerate(obs):
        try:
            normalized.append(typed_observation(instance_to_dict(o), space))
        except TypedPartError as err:
            raise _fail(
                err.reason,
                f"{ctx(t, err.column if err.column == 'observations' else f'observations.{err.column}')}: "
                f"{err}. The observation space is "
                f"{space!r}: every step holds each node type's x [N_t, F_t] and each edge "
                "type's edge_index [2, E] (keys 'src__rel__dst'), as the typed-graphs guide shows.",
            ) from None
    graphs = TypedColumns.from_graphs(normalized, space)
    graphs.mask_type = spec.node_type if spec.action_level == "node" else None
    _collect_masks(obs, graphs, spec, ctx)
    return graphs


def _collect_masks(obs: list[Any], graphs: GraphColumns | TypedColumns, spec: EpisodeSpec, ctx: Any) -> None:
    """Check every observation's ``action_mask`` and, for selection spaces, store the masks on
    ``graphs`` (an observation without one allows every choice)."""
    raw = [o.get("action_mask") for o in obs]
    level = spec.action_level
    if level is None:
        t = next((i for i, m in enumerate(raw) if m is not None), None)
        if t is not None:
            raise _fail(
                "action_mask",
                f"{ctx(t, 'action_mask')}: action_mask must be absent for a graph-level action "
                f"space Discrete({spec.num_actions}) (found {_found(_array(raw[t]))}). Masks "
                "belong to NodeAction / EdgeAction spaces; drop the key or use one of those "
                "spaces.",
            )
        return
    counts = np.diff(graphs.choice_ptr(level))
    size = "N" if level == "node" else "E"
    masks = [None if m is None else _array(m) for m in raw]
    for t, m in enumerate(masks):
        if m is not None and (m.dtype != np.bool_ or m.shape != (int(counts[t]),)):
            raise _fail(
                "action_mask",
                f"{ctx(t, 'action_mask')}: action_mask must be bool [{size}={int(counts[t])}] "
                f"(one entry per {level} of this step's graph) (found {m.dtype} "
                f"{list(m.shape)}). Record masks as np.asarray(mask, dtype=bool).",
            )
    graphs.set_mask(level, masks_or_allowed(masks, counts))


def _first_bad_step(bad: Any, ptr: np.ndarray) -> int:
    """Step of the first flagged element of a ragged array with offsets ``ptr``."""
    return int(np.searchsorted(ptr, int(np.argmax(bad)), side="right") - 1)


def _check_finite(values: np.ndarray, ptr: np.ndarray, column: str, kind: str, rows: str, ctx: Any) -> None:
    """Raise naming the first step of a row of ``values`` (node or edge features, offsets
    ``ptr``) that holds NaN/inf."""
    bad = ~np.isfinite(values).all(axis=1)
    if bad.any():
        raise _fail(
            "nonfinite",
            f"{ctx(_first_bad_step(bad, ptr), column)}: {kind} features must be finite (found "
            f"{int(bad.sum())} {rows} with NaN/inf in the episode). Clean the recorder.",
        )


def values_ok(graphs: GraphColumns) -> bool:
    """Whether every feature is finite and every edge index in its graph's ``0..N-1``: whole-
    array reductions, no per-row temporaries (:func:`check_values` words the failures)."""
    if not np.isfinite(graphs.x).all():
        return False
    if graphs.edge_attr is not None and not np.isfinite(graphs.edge_attr).all():
        return False
    ei = graphs.edge_index
    if not ei.size:
        return True
    if ei.min() < 0:
        return False
    counts = graphs.num_edges
    has = counts > 0
    top = np.maximum.reduceat(np.maximum(ei[0], ei[1]), graphs.edge_ptr[:-1][has])
    return bool((top < graphs.num_nodes[has]).all())


def check_values(graphs: GraphColumns | TypedColumns, ctx: Any) -> None:
    """Features finite, edge indices in range; raises naming the first bad step."""
    if isinstance(graphs, TypedColumns):
        _check_typed_values(graphs, ctx)
        return
    if values_ok(graphs):
        return
    _check_finite(graphs.x, graphs.node_ptr, "x", "node", "node rows", ctx)
    if graphs.edge_attr is not None and graphs.edge_attr.size:
        _check_finite(graphs.edge_attr, graphs.edge_ptr, "edge_attr", "edge", "edges", ctx)
    if graphs.edge_index.size:
        limit = np.repeat(graphs.num_nodes, graphs.num_edges)
        bad = ((graphs.edge_index < 0) | (graphs.edge_index >= limit[None, :])).any(axis=0)
        if bad.any():
            t = _first_bad_step(bad, graphs.edge_ptr)
            j = int(np.argmax(bad))
            raise _fail(
                "edge_index_range",
                f"{ctx(t, 'edge_index')}: edge indices must be in 0..N-1 with N="
                f"{int(limit[j])} (found edge {graphs.edge_index[:, j].tolist()}). "
                "edge_index holds local node indices of its own graph.",
            )


def _check_typed_values(graphs: TypedColumns, ctx: Any) -> None:
    """:func:`check_values` of typed graphs: each type's features finite, each edge type's
    indices within its source / target type's nodes."""
    for key, part in graphs.parts.items():
        if part.x.size and not np.isfinite(part.x).all():
            _check_finite(part.x, part.node_ptr, f"x:{key}", "node", "node rows", ctx)
        if part.edge_attr is not None and part.edge_attr.size and not np.isfinite(part.edge_attr).all():
            _check_finite(part.edge_attr, part.edge_ptr, f"edge_attr:{key}", "edge", "edges", ctx)
    bad = graphs.bad_edge()
    if bad is not None:
        edge_type, t, row, index = bad
        end = edge_type.split("__")[2 * row]
        raise _fail(
            "edge_index_range",
            f"{ctx(t, f'edge_index:{edge_type}')}: edge indices in row {row} must be in 0..N-1 of "
            f"node type {end!r} (found {index}). edge_index holds each type's local node indices.",
        )
