"""Bench case ``ope`` and the DOPE-style check of off-policy evaluation on Graph-v0.

Graph-v0 (default settings: ``k`` colors, reward 1 for the correct color, the episode ends
after ``max_mistakes`` wrong actions, a per-step hazard, truncation after ``max_steps``) has
policies whose value is known exactly: the epsilon-mixture of the expert (the correct action
with probability ``1 - eps``, else uniform) is right with probability
``p = 1 - eps + eps / k`` at every step, independently, so (:func:`true_value`)::

    V(eps) = sum_{t < max_steps} p * (1 - hazard)^t * P(fewer than max_mistakes misses in t steps)

:func:`expert_mixture` is that policy as an RLModule
(:mod:`offline_graph.bench.ope_targets`). The behaviour logs are the ``mixed`` policy's
(epsilon ``eps_b``), whose probabilities are known too (:func:`behaviour_logp`:
``eps_b / k + (1 - eps_b) * 1[a correct]``). The protocol that checks every method against
these values (and on NextHop-v0 and Team-v0) is :mod:`offline_graph.bench.ope_protocol`.

Bench case ``ope``: the seconds each method takes per 10k logged transitions (FQE / DR with
``FQE_EPOCHS`` epochs) on freshly recorded Graph-v0 logs, then :func:`accuracy_rows`: each
method's normalized absolute error in the DOPE protocol on Graph-v0, one recording per repeat.
"""

from __future__ import annotations

import math
import tempfile
import time
from typing import Any

import numpy as np

from offline_graph.bench.harness import BenchContext, Row
from offline_graph.bench.ope_targets import expert_mixture_module, with_mixture_logp
from offline_graph.data.episodes.logged import Logged

ENV = "offline_graph/Graph-v0"
METHODS = ("wis", "pdis", "fqe", "dr")
FQE_EPOCHS = 5


def true_value(eps: float, k: int, max_steps: int, max_mistakes: int, hazard: float) -> float:
    """The exact expected undiscounted return of the expert mixture (module doc)."""
    p = 1.0 - eps + eps / k
    q = 1.0 - p
    total = 0.0
    for t in range(max_steps):
        alive = sum(math.comb(t, m) * q**m * p ** (t - m) for m in range(min(max_mistakes, t + 1)))
        total += p * (1.0 - hazard) ** t * alive
    return total


def expert_mixture(eps: float, observation_space: Any, action_space: Any) -> Any:
    """The Graph-v0 expert mixed with ``eps`` uniform actions, as an RLModule
    (:func:`~offline_graph.bench.ope_targets.expert_mixture_module`)."""
    return expert_mixture_module(ENV, eps, observation_space, action_space)


def behaviour_logp(data: Any, eps_b: float, observation_space: Any, action_space: Any) -> Logged:
    """The logs of ``data`` with the mixed policy's exact ``log mu(a | s)`` (module doc)."""
    return with_mixture_logp(data, expert_mixture(eps_b, observation_space, action_space))


def case_ope(ctx: BenchContext) -> list[Row]:
    """Seconds per 10k transitions of each method, then the DOPE protocol's accuracy rows
    (module doc)."""
    from offline_graph.bench.ope_protocol import record_logs
    from offline_graph.env.making import make_env
    from offline_graph.rllib.ope.estimate import estimate_value

    env = make_env(ENV, {})
    episodes = 40 if ctx.quick else 200
    with tempfile.TemporaryDirectory() as out:
        record_logs(ENV, 0.5, 0, episodes, out)
        logged = behaviour_logp(out, 0.5, env.observation_space, env.action_space)
    module = expert_mixture(0.2, env.observation_space, env.action_space)
    rows = []
    for method in METHODS:
        times = []
        for r in range(ctx.repeats):
            t = time.perf_counter()
            estimate_value(module, logged, method=method, gamma=1.0, explore=True, epochs=FQE_EPOCHS, seed=r)  # type: ignore[arg-type]
            times.append((time.perf_counter() - t) * 1e4 / len(logged.trans))
        note = f"{FQE_EPOCHS} FQE epochs" if method in ("fqe", "dr") else "200 bootstrap resamples"
        rows.append(
            Row("ope", f"{method} seconds per 10k transitions", "s", times, lower_is_better=True, note=note)
        )
    return rows + accuracy_rows(ctx)


def accuracy_rows(ctx: BenchContext) -> list[Row]:
    """The DOPE protocol on Graph-v0 (:mod:`offline_graph.bench.ope_protocol`), one recording
    per repeat: per method the normalized absolute error (Spearman, regret@1 and coverage in
    the note). ``--quick``: 100 logged episodes, 500 true-value episodes, FQE_EPOCHS epochs."""
    from offline_graph.bench.ope_protocol import METHODS as ALL, run

    quick: dict[str, Any] = dict(log_episodes=100, true_episodes=500, epochs=FQE_EPOCHS) if ctx.quick else {}
    res = run(ENV, list(range(ctx.repeats)), **quick)
    rows = []
    for m in ALL:
        per_seed = [r[m] for r in res["seeds"].values()]
        mean = {k: float(np.mean([p[k] for p in per_seed])) for k in ("spearman", "regret_at_1", "coverage")}
        note = "Spearman {spearman:.2f}, regret@1 {regret_at_1:.2f}, coverage {coverage:.2f}".format(**mean)
        errors = [100 * p["abs_error"] for p in per_seed]
        rows.append(
            Row("ope", f"{m} normalized abs error (DOPE)", "%", errors, lower_is_better=True, note=note)
        )
    return rows
