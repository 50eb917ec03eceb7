"""Checks of an episode's actions and rewards (pure numpy): the ``action``, ``action_mask``,
``masked_action``, ``too_many_choices`` and ``reward`` rows of
:mod:`offline_graph.data.episodes.validation`'s table, shared by the full and the fast path.

Actions arrive as whatever RLlib stored: Python ints, numpy scalars of any int or float
width, 0-d arrays or one array (``tests/test_encodings_zoo.py``). :func:`integer_actions`
reads them as int64 or names the first step that holds no integer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.errors import GraphValidationError
from offline_graph.data.episodes.spec import EpisodeSpec


def _fail(reason: str, msg: str) -> GraphValidationError:
    return GraphValidationError(msg, reason=reason)


def check_actions_rewards(
    actions: np.ndarray, rewards: np.ndarray, spec: EpisodeSpec, ctx: Any, graphs: GraphColumns
) -> None:
    """Actions are integers in the action space (selection spaces: in their step's graph and
    allowed by its mask, see ``graphs``), rewards are finite numbers."""
    if spec.action_level is None:
        _check_discrete_actions(actions, spec, ctx)
    else:
        _check_selection_actions(actions, spec, ctx, graphs)
    kind = rewards.dtype.kind
    if kind in "fiub":
        bad = ~float32_finite(rewards)
    else:  # object (None in a list, ...) or text
        bad = np.fromiter((not _finite_number(v) for v in rewards.reshape(-1)), bool, rewards.size)
    if bad.any():
        t = int(np.argmax(bad))
        raise _fail(
            "reward",
            f"{ctx(t, 'rewards')}: rewards must be finite numbers in float32's range (found "
            f"{_item(rewards, t)!r}). "
            "Clean the recorder.",
        )


FLOAT32_MAX = float(np.finfo(np.float32).max)


def float32_finite(values: np.ndarray) -> np.ndarray:
    """Elementwise: finite and within float32's range (rewards and features are stored as
    float32: a finite 1e300 would become inf)."""
    return np.asarray(np.abs(np.asarray(values, np.float64)) <= FLOAT32_MAX)  # NaN compares False


def _finite_number(value: Any) -> bool:
    if isinstance(value, (int, np.integer)):  # also a Python int too large for any dtype
        return abs(int(value)) <= FLOAT32_MAX
    return isinstance(value, (float, np.floating)) and abs(float(value)) <= FLOAT32_MAX


def _item(values: np.ndarray, t: int) -> Any:
    value = values.reshape(-1)[t]
    return value.item() if isinstance(value, np.generic) else value


_INT64_LIMIT = 2.0**63


def integer_actions(actions: np.ndarray, ctx: Any, expected: str) -> np.ndarray:
    """``actions`` [T] as int64, or a ``GraphValidationError`` naming the first step whose
    value is no integer an int64 holds: a float that holds an integer exactly is read as it
    (``2.0`` -> 2; ``1.5``, NaN are rejected), a uint64 above the int64 range is rejected.
    ``expected`` words the valid values for the message."""
    kind = actions.dtype.kind
    if kind == "i":
        return actions.astype(np.int64, copy=False)
    if kind == "u":
        bad = actions > np.iinfo(np.int64).max
    elif kind == "f":
        wide = actions.astype(np.float64, copy=False)  # float16 cannot hold the int64 limit
        with np.errstate(invalid="ignore"):
            bad = ~(np.isfinite(wide) & (wide == np.trunc(wide)) & (np.abs(wide) < _INT64_LIMIT))
    elif kind == "O":  # a list mixing numbers and other things
        bad = np.fromiter((not _integer(v) for v in actions), bool, len(actions))
    else:  # bool, text
        bad = np.ones(len(actions), bool)
    if bad.any():
        t = int(np.argmax(bad))
        raise _fail(
            "action",
            f"{ctx(t, 'actions')}: action must be an integer {expected} (found "
            f"{_item(actions, t)!r}). Record the index the env received.",
        )
    return actions.astype(np.int64)


def _integer(value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (int, np.integer)):  # a Python int may exceed every numpy dtype
        return -(2**63) <= int(value) < 2**63
    if isinstance(value, (float, np.floating)):
        wide = float(value)
        return bool(np.isfinite(wide)) and wide == np.trunc(wide) and abs(wide) < _INT64_LIMIT
    return False


def _check_discrete_actions(actions: np.ndarray, spec: EpisodeSpec, ctx: Any) -> None:
    if actions.ndim != 1:
        raise _fail(
            "action",
            f"{ctx(None, 'actions')}: actions must be integers [T] for Discrete("
            f"{spec.num_actions}) (found {actions.dtype} {list(actions.shape)}). "
            "Record the action index the env received.",
        )
    actions = integer_actions(actions, ctx, f"in 0..{spec.num_actions - 1}")
    bad = (actions < 0) | (actions >= spec.num_actions)
    if bad.any():
        t = int(np.argmax(bad))
        raise _fail(
            "action",
            f"{ctx(t, 'actions')}: action must be in 0..{spec.num_actions - 1} (found "
            f"{int(actions[t])}). The action space is Discrete({spec.num_actions}).",
        )


def _check_selection_actions(actions: np.ndarray, spec: EpisodeSpec, ctx: Any, graphs: GraphColumns) -> None:
    level = spec.action_level
    space = f"{'NodeAction(max_nodes' if level == 'node' else 'EdgeAction(max_edges'}={spec.num_actions})"
    size = "N" if level == "node" else "E"
    if actions.ndim != 1:
        raise _fail(
            "action",
            f"{ctx(None, 'actions')}: actions must be integers [T] for {space} (found "
            f"{actions.dtype} {list(actions.shape)}). Record the {level} index the env received.",
        )
    actions = integer_actions(actions, ctx, f"{level} index for {space}")
    num_t = len(actions)
    ptr = graphs.choice_ptr(level)  # type: ignore[arg-type]
    counts = np.diff(ptr)[:num_t]
    over = counts > spec.num_actions
    if over.any():
        t = int(np.argmax(over))
        raise _fail(
            "too_many_choices",
            f"{ctx(t, 'x' if level == 'node' else 'edge_index')}: number of {level}s must be "
            f"<= {spec.num_actions} for {space} (found {size}={int(counts[t])}). Raise the "
            f"space's limit to the largest graph of the data set.",
        )
    bad = (actions < 0) | (actions >= counts)
    if bad.any():
        t = int(np.argmax(bad))
        raise _fail(
            "action",
            f"{ctx(t, 'actions')}: action must be a {level} index in 0..{int(counts[t]) - 1} of "
            f"step {t}'s graph ({size}={int(counts[t])}) (found action {int(actions[t])}). "
            f"{space} actions index this step's {level}s"
            + (" in the order of edge_index's columns." if level == "edge" else "."),
        )
    mask = graphs.mask(level)  # type: ignore[arg-type]
    if mask is None:
        return
    seg = np.repeat(np.arange(num_t), counts)
    allowed_any = np.bincount(seg, weights=mask[: ptr[num_t]], minlength=num_t) > 0
    if not allowed_any.all():
        t = int(np.argmin(allowed_any))
        raise _fail(
            "action_mask",
            f"{ctx(t, 'action_mask')}: action_mask must allow at least one {level} on a step "
            f"where an action is taken (found 0 of {size}={int(counts[t])} allowed, action "
            f"{int(actions[t])}). A mask that allows nothing is legal only on an episode's "
            "final observation.",
        )
    ok = mask[ptr[:num_t] + actions]
    if not ok.all():
        t = int(np.argmin(ok))
        m = mask[ptr[t] : ptr[t + 1]]
        raise _fail(
            "masked_action",
            f"{ctx(t, 'actions')}: action must be allowed by step {t}'s action_mask (found "
            f"action {int(actions[t])}, forbidden; the mask allows {int(m.sum())} of "
            f"{size}={len(m)}: {np.flatnonzero(m)[:8].tolist()}"
            f"{'...' if m.sum() > 8 else ''}). The recorded action must be one the env allowed.",
        )
