"""One FQE fit read for ``estimate_value`` (:mod:`offline_graph.rllib.ope.estimate`): the Q model at the
logged steps for DR, its bootstrap heads, the FQE estimate with its interval, and what to warn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from offline_graph.data.analysis import ope
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.rllib.ope.fqe import MIN_STEPS, FQESettings, fit_fqe
from offline_graph.rllib.ope.ope_policy import Choices

Model = tuple[np.ndarray, np.ndarray, np.ndarray]
"""``(Q(s_t, a_t) [T], V(s_t) [T], V(final observation) [E]``, 0 where not bootstrapped)."""


@dataclass
class FittedModel:
    """One fit, read for OPE (module doc)."""

    model: Model
    heads: list[Model]
    """The bootstrap heads' models."""
    estimate: dict[str, Any]
    """``value``, ``ci_low``, ``ci_high`` of FQE: the mean ``V(s_0)`` and the heads' interval."""
    loss: float | None
    iterations: int
    warnings: list[str]


def fitted_model(
    graphs: GraphColumns,
    ptr: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    ends: np.ndarray,
    ended: np.ndarray,
    pi: Choices,
    gamma: float,
    observation_space: gym.Space,
    action_space: gym.Space,
    settings: FQESettings,
    *,
    seed: int,
    n_boot: int,
) -> FittedModel:
    """:func:`~offline_graph.rllib.ope.fqe.fit_fqe` on the steps (``ends``: not bootstrapped;
    ``ended [E]``: episodes whose final observation is bootstrapped), read for OPE."""
    fitted = fit_fqe(
        graphs, ptr, actions, rewards, ends, pi, gamma, observation_space, action_space, settings, seed
    )  # fmt: skip
    warnings = []
    if not fitted.converged:
        warnings.append(
            f"fqe: the estimate had not settled after {len(fitted.estimates)} iterations "
            f"(last {fitted.estimates[-10:]}); pass epochs= to fit longer, or check that the "
            "target policy ends its episodes."
        )
    per_pass = fitted.steps_per_iteration
    if settings.epochs is not None and per_pass * settings.epochs < MIN_STEPS:
        warnings.append(
            f"fqe: epochs={settings.epochs} made {per_pass * settings.epochs} gradient steps in "
            f"all ({per_pass} per pass over {len(actions)} transitions at batch_size="
            f"{settings.batch_size}), fewer than the {MIN_STEPS} the horizon schedule makes at "
            "least: the Q model may be under-fit. Leave epochs unset (or pass horizon=) on "
            "small logs."
        )
    n = len(actions)
    model = (fitted.q, fitted.v[:n], np.where(ended, fitted.v[n:], 0.0))
    heads = [(q, v[:n], np.where(ended, v[n:], 0.0)) for q, v in zip(fitted.heads_q, fitted.heads_v)]
    estimate = ope.mean_estimate(fitted.v[ptr[:-1]], n_boot, seed)
    if len(fitted.boot) >= 2:
        estimate["ci_low"], estimate["ci_high"] = ope.replicate_interval(estimate["value"], fitted.boot)
    loss = fitted.losses[-1] if fitted.losses else None
    return FittedModel(model, heads, estimate, loss, len(fitted.estimates), warnings)
