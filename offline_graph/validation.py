"""Validation of decoded graph episodes against the spaces (pure numpy, no Ray).

Checks, each with a short ``reason`` key used for skip-mode accounting:

=====================  ==================================================================
``not_finished``       the episode is neither terminated nor truncated
``length``             ``len(observations) != len(actions) + 1`` or rewards != actions, or T == 0
``obs_type``           an observation is not a dict with ``x`` and ``edge_index``
``x_shape``            ``x`` is not float [N, F] with the space's F
``empty_graph``        N == 0 (empty graphs are illegal: a graph-level action needs a node)
``edge_index_shape``   ``edge_index`` is not integer [2, E]
``edge_index_range``   an edge index outside ``0..N-1``
``edge_attr``          ``edge_attr`` missing / not [E, D] when the space has edge features,
                       or present when it has none
``nonfinite``          NaN or inf in ``x`` or ``edge_attr``
``action``             an action outside the action space
``reward``             a non-finite reward
=====================  ==================================================================

Every check is vectorized over the whole episode after one pass that collects shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from offline_graph.columns import GraphColumns, counts_to_ptr
from offline_graph.episode_codec import RawEpisode
from offline_graph.errors import GraphValidationError, where


@dataclass(frozen=True)
class EpisodeSpec:
    """What a valid episode looks like."""

    num_features: int
    """F: node feature size of the observation space."""
    edge_dim: int | None
    """D: edge feature size, or None when the space has no edge features."""
    num_actions: int
    """k: actions must be integers in ``0..k-1``."""


@dataclass
class Episode:
    """A validated episode: T+1 observations as columns, T actions and rewards."""

    id: str
    obs: GraphColumns
    actions: np.ndarray
    rewards: np.ndarray
    terminated: bool
    truncated: bool

    def __len__(self) -> int:
        return len(self.actions)


def _fail(reason: str, msg: str) -> GraphValidationError:
    err = GraphValidationError(msg)
    err.reason = reason  # type: ignore[attr-defined]
    return err


def validate_episode(
    raw: RawEpisode, spec: EpisodeSpec, *, file: str | None = None, row: int | None = None
) -> Episode:
    """Check ``raw`` and build its columns; raises :class:`GraphValidationError` (``.reason``)."""
    eid = raw.id

    def ctx(t: int | None = None, column: str | None = None) -> str:
        return where(file=file, row=row, episode_id=eid, t=t, column=column)

    if not (raw.terminated or raw.truncated):
        raise _fail(
            "not_finished",
            f"{ctx()}: episode must be finished, terminated or truncated (found "
            "terminated=False, truncated=False). Record only finished episodes.",
        )
    obs: list[Any] = list(raw.observations)
    actions = np.asarray(raw.actions)
    rewards = np.asarray(raw.rewards)
    num_t = actions.shape[0] if actions.ndim else -1
    if num_t < 1 or len(obs) != num_t + 1 or rewards.shape != (num_t,):
        raise _fail(
            "length",
            f"{ctx()}: lengths must be observations = actions + 1 = rewards + 1 with at least "
            f"one action (found {len(obs)} observations, {max(num_t, 0)} actions, "
            f"{rewards.size} rewards). The episode is truncated or mis-assembled.",
        )
    for t, o in enumerate(obs):
        if not isinstance(o, dict) or "x" not in o or "edge_index" not in o:
            found = sorted(o) if isinstance(o, dict) else type(o).__name__
            raise _fail(
                "obs_type",
                f"{ctx(t, 'observations')}: observation must be a dict with keys 'x' and "
                f"'edge_index' (found {found}). Store graphs as offline_graph.graph_to_dict().",
            )
    xs = [np.asarray(o["x"]) for o in obs]
    eis = [np.asarray(o["edge_index"]) for o in obs]
    feat = spec.num_features
    for t, x in enumerate(xs):
        if x.ndim != 2 or x.shape[1] != feat or x.dtype.kind != "f":
            raise _fail(
                "x_shape",
                f"{ctx(t, 'x')}: node features must be float [N, {feat}] (found "
                f"{x.dtype} {list(x.shape)}). F comes from the observation space's node_space.",
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
                f"(found {ei.dtype} {list(ei.shape)}). GraphInstance.edge_links [E, 2] must "
                "be transposed; use offline_graph.graph_to_dict().",
            )
    edge_attr = None
    if spec.edge_dim is not None:
        eas = []
        for t, o in enumerate(obs):
            ea = o.get("edge_attr")
            ea = None if ea is None else np.asarray(ea)
            num_e = eis[t].shape[1]
            if ea is None or ea.shape != (num_e, spec.edge_dim) or ea.dtype.kind != "f":
                found = "missing" if ea is None else f"{ea.dtype} {list(ea.shape)}"
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
                    f"{list(np.shape(o['edge_attr']))}) because the observation space has "
                    "edge_space=None. Give the space an edge_space=Box(D) to use edge features.",
                )
    num_nodes = np.fromiter((len(x) for x in xs), np.int64, len(xs))
    num_edges = np.fromiter((ei.shape[1] for ei in eis), np.int64, len(eis))
    x_all = np.concatenate(xs).astype(np.float32, copy=False)
    ei_all = np.concatenate(eis, axis=1).astype(np.int64, copy=False)
    graphs = GraphColumns(x_all, counts_to_ptr(num_nodes), ei_all, counts_to_ptr(num_edges), edge_attr)
    check_values(graphs, ctx)
    check_actions_rewards(actions, rewards, spec, ctx)
    return Episode(
        id=eid,
        obs=graphs,
        actions=actions.astype(np.int64, copy=False),
        rewards=rewards.astype(np.float32, copy=False),
        terminated=raw.terminated,
        truncated=raw.truncated and not raw.terminated,
    )


def _first_bad_step(bad: np.ndarray, ptr: np.ndarray) -> int:
    """Step of the first flagged element of a ragged array with offsets ``ptr``."""
    return int(np.searchsorted(ptr, int(np.argmax(bad)), side="right") - 1)


def check_values(graphs: GraphColumns, ctx: Any) -> None:
    bad_x = ~np.isfinite(graphs.x).all(axis=1)
    if bad_x.any():
        t = _first_bad_step(bad_x, graphs.node_ptr)
        raise _fail(
            "nonfinite",
            f"{ctx(t, 'x')}: node features must be finite (found "
            f"{int(bad_x.sum())} node rows with NaN/inf in the episode). Clean the recorder.",
        )
    if graphs.edge_attr is not None and graphs.edge_attr.size:
        bad_e = ~np.isfinite(graphs.edge_attr).all(axis=1)
        if bad_e.any():
            t = _first_bad_step(bad_e, graphs.edge_ptr)
            raise _fail(
                "nonfinite",
                f"{ctx(t, 'edge_attr')}: edge features must be finite (found "
                f"{int(bad_e.sum())} edges with NaN/inf in the episode). Clean the recorder.",
            )
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


def check_actions_rewards(actions: np.ndarray, rewards: np.ndarray, spec: EpisodeSpec, ctx: Any) -> None:
    if actions.ndim != 1 or actions.dtype.kind not in "iu":
        raise _fail(
            "action",
            f"{ctx(None, 'actions')}: actions must be integers [T] for Discrete("
            f"{spec.num_actions}) (found {actions.dtype} {list(actions.shape)}). "
            "Record the action index the env received.",
        )
    bad = (actions < 0) | (actions >= spec.num_actions)
    if bad.any():
        t = int(np.argmax(bad))
        raise _fail(
            "action",
            f"{ctx(t, 'actions')}: action must be in 0..{spec.num_actions - 1} (found "
            f"{int(actions[t])}). The action space is Discrete({spec.num_actions}).",
        )
    if rewards.dtype.kind not in "fiub" or not np.isfinite(rewards.astype(np.float64)).all():
        t = int(np.argmax(~np.isfinite(rewards.astype(np.float64)))) if rewards.dtype.kind in "fiub" else None
        raise _fail(
            "reward",
            f"{ctx(t, 'rewards')}: rewards must be finite numbers (found "
            f"{rewards[t] if t is not None else rewards.dtype}). Clean the recorder.",
        )
