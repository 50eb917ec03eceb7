"""Behaviour policies for :class:`~offline_graph.env.jobshop.JobShopEnv`: dispatching rules.

A policy is ``policy(obs, info) -> int`` (the contract of :mod:`offline_graph.env.policies`)
on the observation dict (``graph_to_dict(obs, 1)``, with or without ``action_mask``). The rules
read only the node columns (:data:`~offline_graph.env.jobshop.JOBSHOP_FEATURES`), so they also
run on recorded data. Among the allowed operations (``obs["action_mask"]`` if present, else
the ``candidate`` column), each picks:

* ``"spt"``: the shortest processing time;
* ``"mwkr"``: the job with the most work remaining (this operation and the job's later ones);
* ``"fdd_mwkr"``: the smallest flow due date over most work remaining, ``(work before +
  duration) / work remaining``;
* ``"mopnr"``: the job with the most operations remaining;

ties to the lowest node index (the lowest job). ``"random"`` is uniform over the allowed
operations; :func:`noisy_policy` wraps any policy (a random allowed operation with
probability ``p``). :func:`make_jobshop_policy` builds them by name, and ``"expert"`` /
``"mixed"`` (the noisy expert) around a given expert (``JobShopEnv.make_policy`` gives it the
CP-SAT expert of :mod:`~offline_graph.env.jobshop_expert`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict
from offline_graph.env.policies import RANDOM_ACTION_HINT, check_epsilon, check_name

Policy = Callable[[GraphDict, dict[str, Any]], int]

JOBSHOP_RULES = ("spt", "mwkr", "fdd_mwkr", "mopnr")
"""The dispatching rules, by name."""
JOBSHOP_POLICY_NAMES = (
    *JOBSHOP_RULES,
    "random",
    "expert",
    "mixed",
    *(f"noisy_{r}" for r in JOBSHOP_RULES),
)
"""Names :func:`make_jobshop_policy` (and ``JobShopEnv.make_policy``) accept."""

# len(JOBSHOP_FEATURES) (+ 2 with JobShopConfig.extra_features): offline_graph.env.jobshop
# imports this module, not the other way round
_NUM_FEATURES = 7


def allowed_operations(obs: GraphDict, where: str = "jobshop rule") -> np.ndarray:
    """Int64 indices of the allowed operations: ``obs["action_mask"]`` if present, else the
    ``candidate`` column; raises if there is none (a terminal observation)."""
    x = np.asarray(obs["x"])
    if x.ndim != 2 or x.shape[1] not in (_NUM_FEATURES, _NUM_FEATURES + 2):
        raise ConfigError(
            f"{where}: obs['x'] must be [N, {_NUM_FEATURES}] or [N, {_NUM_FEATURES + 2}] with the "
            f"extra features (found shape {list(x.shape)}). "
            "Pass an observation of offline_graph/JobShop-v0 (graph_to_dict(obs, 1))."
        )
    mask = obs.get("action_mask")
    allowed = np.flatnonzero(np.asarray(mask, bool) if mask is not None else x[:, 2] > 0.5)
    if allowed.size == 0:
        raise ConfigError(
            f"{where}: the observation must allow an operation (found none). "
            "Do not act on a terminal observation."
        )
    return allowed


def _pick(obs: GraphDict, name: str, score: Callable[[np.ndarray], np.ndarray]) -> int:
    """The allowed operation with the highest ``score(x rows)`` (ties: lowest index)."""
    allowed = allowed_operations(obs, name)
    rows = np.asarray(obs["x"], dtype=np.float64)[allowed]
    return int(allowed[int(np.argmax(score(rows)))])


def spt(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
    """Shortest processing time first."""
    return _pick(obs, "spt", lambda r: -r[:, 3])


def mwkr(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
    """Most work remaining first."""
    return _pick(obs, "mwkr", lambda r: r[:, 5])


def fdd_mwkr(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
    """Smallest flow due date / most work remaining first."""
    return _pick(obs, "fdd_mwkr", lambda r: -(r[:, 4] + r[:, 3]) / r[:, 5])


def mopnr(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
    """Most operations remaining first."""
    return _pick(obs, "mopnr", lambda r: r[:, 6])


RULES: dict[str, Policy] = {"spt": spt, "mwkr": mwkr, "fdd_mwkr": fdd_mwkr, "mopnr": mopnr}
"""The rules by name."""


def random_rule(rng: np.random.Generator) -> Policy:
    """A uniformly random allowed operation."""

    def policy(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        allowed = allowed_operations(obs, "random_rule")
        return int(allowed[rng.integers(allowed.size)])

    return policy


def noisy_policy(policy: Policy, p: float, rng: np.random.Generator) -> Policy:
    """``policy``, except with probability ``p`` a uniformly random allowed operation."""
    eps = check_epsilon("noisy_policy", p, RANDOM_ACTION_HINT)
    rand = random_rule(rng)

    def noisy(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        info = {} if info is None else info
        return rand(obs, info) if rng.random() < eps else policy(obs, info)

    return noisy


def make_jobshop_policy(
    name: str, epsilon: float, rng: np.random.Generator, expert: Policy | None = None
) -> Policy:
    """Policy by name (:data:`JOBSHOP_POLICY_NAMES`): a rule, ``"random"``, ``"noisy_<rule>"``
    (the rule, else with probability ``epsilon`` random), ``"expert"`` (``expert``, e.g.
    :func:`~offline_graph.env.jobshop_expert.cpsat_expert`; ``JobShopEnv.make_policy`` makes
    it) or ``"mixed"`` (the noisy expert). ``epsilon`` is used only by the noisy ones."""
    where = "make_jobshop_policy"
    check_name(
        where,
        name,
        JOBSHOP_POLICY_NAMES,
        "'noisy_<rule>' and 'mixed' take a random allowed operation with probability epsilon.",
    )
    if name == "random":
        return random_rule(rng)
    if name in ("expert", "mixed"):
        if expert is None:
            raise ConfigError(
                f"{where}: expert must be a policy for {name!r} (found None). "
                "Use JobShopEnv.make_policy, which solves the env's instances with CP-SAT."
            )
        return expert if name == "expert" else noisy_policy(expert, epsilon, rng)
    base = name.removeprefix("noisy_")
    return RULES[base] if base == name else noisy_policy(RULES[base], epsilon, rng)
