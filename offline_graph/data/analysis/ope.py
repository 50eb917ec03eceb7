"""Off-policy estimators of a policy's expected return from logged episodes (pure numpy).

Inputs are flat per-step arrays of ``E`` episodes laid end to end (no padding): episode ``i``
holds steps ``ptr[i]:ptr[i+1]`` (``ptr [E+1]``), its steps in order. Per step: the reward
``r``, the importance ratio ``rho = pi(a | s) / mu(a | s)`` of the logged action (target
``pi`` over behaviour ``mu``; :func:`step_ratios`), and for the doubly robust estimator the
model's ``q = Q(s, a)`` and ``v = E_{a ~ pi} Q(s, a)``.

With ``w[i, t] = rho[i, 0] * ... * rho[i, t]`` (the running product) and ``gamma``:

- ``"wis"`` (per-episode weighted IS): ``sum_i W_i G_i / sum_i W_i``, ``W_i = w[i, T_i - 1]``,
  ``G_i = sum_t gamma^t r[i, t]``;
- ``"pdis"`` (per-decision weighted IS): ``sum_{i,t} gamma^t (w[i, t] / S_t) r[i, t]``,
  ``S_t = sum_j w[j, min(t, T_j - 1)]``: an episode that has ended keeps its last weight (it
  sits in an absorbing state with reward 0), so episodes of different lengths share the
  normalizers;
- ``"dr"`` (weighted per-decision doubly robust, Thomas & Brunskill 2016's WDR):
  ``sum_{i,t} gamma^t [wn[i, t] (r[i, t] - q[i, t]) + wn[i, t-1] v[i, t]]
  + sum_i gamma^{T_i} wn[i, T_i - 1] v_end[i]`` with ``wn = w / S_t`` and ``wn[i, -1] = 1/E``;
  ``v_end`` is the model's value of a *truncated* episode's final observation (0 after a
  termination), so DR bootstraps through truncation as FQE does.

With every ratio 1 (target = behaviour) WIS and PDIS are exactly the mean discounted return
of the logged episodes. :func:`bootstrap_interval` resamples whole episodes; :func:`ess` is
Kish's effective sample size of the episode weights ``W_i``.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Callable

import numpy as np

from offline_graph.data.graphs.columns import concat_ranges
from offline_graph.data.errors import ConfigError

METHODS = ("wis", "pdis", "dr", "fqe")
"""``estimate_value`` methods: the IS family (``wis``, ``pdis``), ``dr`` and ``fqe``."""
IS_METHODS = ("wis", "pdis", "dr")
"""Methods that weight logged steps by importance ratios."""
LOW_ESS_SHARE = 0.1
"""An IS estimate whose effective sample size is below this share of the episodes is warned."""


def step_ratios(
    target_p: np.ndarray, behaviour_p: np.ndarray, clip: float | None = None
) -> tuple[np.ndarray, float]:
    """``(pi / mu per step, share of steps whose ratio was clipped)``; ``clip`` caps each
    ratio from above (None: no cap). ``behaviour_p`` must be > 0 (the action was taken)."""
    target_p = np.asarray(target_p, np.float64)
    behaviour_p = np.asarray(behaviour_p, np.float64)
    if (behaviour_p <= 0).any() or not np.isfinite(behaviour_p).all():
        bad = int(np.flatnonzero((behaviour_p <= 0) | ~np.isfinite(behaviour_p))[0])
        raise ConfigError(
            f"ope: the behaviour probability of every logged action must be > 0 (found "
            f"{behaviour_p[bad]!r} at step {bad}). The logged action_logp does not match the "
            "actions; drop it to fit the behaviour policy from the data instead."
        )
    ratios = target_p / behaviour_p
    if clip is None:
        return ratios, 0.0
    if clip <= 0:
        raise ConfigError(f"ope: clip must be > 0 or None (found {clip!r}).")
    clipped = ratios > clip
    return np.minimum(ratios, clip), float(clipped.mean()) if len(ratios) else 0.0


def _position(ptr: np.ndarray) -> np.ndarray:
    """Per step: its index ``t`` within its episode."""
    lengths = np.diff(ptr)
    return np.arange(int(ptr[-1])) - np.repeat(ptr[:-1], lengths)


def cumulative_weights(ratios: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """``w[i, t]``: the running product of the ratios within each episode (exact zeros kept)."""
    ratios = np.asarray(ratios, np.float64)
    zero = ratios == 0
    logs = np.log(np.where(zero, 1.0, ratios))
    starts = np.repeat(ptr[:-1], np.diff(ptr))

    def segment_cumsum(v: np.ndarray) -> np.ndarray:
        c = np.cumsum(v)
        before = np.concatenate([[0.0], c])[starts]
        return c - before

    return np.exp(segment_cumsum(logs)) * (segment_cumsum(zero.astype(np.float64)) == 0)


def episode_weights(ratios: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """``W_i``: the product of each episode's ratios."""
    return cumulative_weights(ratios, ptr)[np.asarray(ptr[1:]) - 1]


def discounted_sums(values: np.ndarray, ptr: np.ndarray, gamma: float) -> np.ndarray:
    """``sum_t gamma^t values[i, t]`` per episode."""
    disc = np.power(float(gamma), _position(ptr))
    return np.add.reduceat(disc * values, ptr[:-1]) if len(values) else np.zeros(len(ptr) - 1)


def _normalized(w: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """``w[i, t] / S_t`` (module doc: ended episodes keep their last weight)."""
    pos = _position(ptr)
    lengths = np.diff(ptr)
    horizon = int(lengths.max())
    alive = np.bincount(pos, weights=w, minlength=horizon)
    ended = np.cumsum(np.bincount(lengths, weights=w[ptr[1:] - 1], minlength=horizon + 1))[:horizon]
    total = alive + ended
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total[pos] > 0, w / total[pos], 0.0)


def wis(rewards: np.ndarray, ratios: np.ndarray, ptr: np.ndarray, gamma: float) -> float:
    """Per-episode weighted importance sampling (module doc); NaN when every weight is 0 (no
    logged episode the target policy could have produced: the estimate is undefined)."""
    weights = episode_weights(ratios, ptr)
    total = weights.sum()
    return (
        float((weights * discounted_sums(rewards, ptr, gamma)).sum() / total) if total > 0 else float("nan")
    )


def pdis(rewards: np.ndarray, ratios: np.ndarray, ptr: np.ndarray, gamma: float) -> float:
    """Per-decision weighted importance sampling (module doc)."""
    wn = _normalized(cumulative_weights(ratios, ptr), ptr)
    return float((np.power(float(gamma), _position(ptr)) * wn * rewards).sum())


def dr(
    rewards: np.ndarray,
    ratios: np.ndarray,
    ptr: np.ndarray,
    gamma: float,
    q: np.ndarray,
    v: np.ndarray,
    v_end: np.ndarray,
) -> float:
    """Weighted per-decision doubly robust (module doc)."""
    pos = _position(ptr)
    disc = np.power(float(gamma), pos)
    wn = _normalized(cumulative_weights(ratios, ptr), ptr)
    prev = np.concatenate([[0.0], wn[:-1]])
    prev[ptr[:-1]] = 1.0 / (len(ptr) - 1)
    lengths = np.diff(ptr)
    tail = np.power(float(gamma), lengths) * wn[ptr[1:] - 1] * v_end
    return float((disc * (wn * (rewards - q) + prev * v)).sum() + tail.sum())


def ess(weights: np.ndarray) -> float:
    """Kish's effective sample size ``(sum W)^2 / sum W^2`` (0 when every weight is 0)."""
    weights = np.asarray(weights, np.float64)
    sq = float((weights**2).sum())
    return float(weights.sum() ** 2 / sq) if sq > 0 else 0.0


def resample_episodes(ptr: np.ndarray, episodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, new ptr)`` of the episodes ``episodes`` (repeats allowed), laid end to end."""
    starts, stops = ptr[:-1][episodes], ptr[1:][episodes]
    new_ptr = np.concatenate([[0], np.cumsum(stops - starts)]).astype(np.int64)
    return concat_ranges(starts, stops), new_ptr


def bootstrap_interval(
    estimate: Callable[[np.ndarray, np.ndarray], float],
    ptr: np.ndarray,
    n_boot: int,
    seed: int,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile interval of ``estimate(steps, ptr)`` over ``n_boot`` resamples of whole
    episodes (with replacement); ``estimate`` gets the resample's step indices and ptr. A
    resample where the estimate is undefined (NaN: WIS without an episode of weight > 0) does
    not count; NaN when none is defined."""
    if n_boot < 1:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    n = len(ptr) - 1
    values = np.empty(int(n_boot))
    for b in range(int(n_boot)):
        steps, new_ptr = resample_episodes(ptr, rng.integers(0, n, size=n))
        values[b] = estimate(steps, new_ptr)
    values = values[np.isfinite(values)]
    if not len(values):
        return float("nan"), float("nan")
    low, high = np.quantile(values, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(low), float(high)


def is_estimate(
    method: str,
    rewards: np.ndarray,
    ratios: np.ndarray,
    ptr: np.ndarray,
    gamma: float,
    *,
    n_boot: int = 200,
    seed: int = 0,
    model: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> dict[str, float]:
    """``{"value", "ci_low", "ci_high", "ess"}`` of ``"wis"``, ``"pdis"`` or ``"dr"``
    (``model`` = ``(q, v, v_end)`` for DR), the interval by :func:`bootstrap_interval`."""
    if method not in IS_METHODS:
        raise ConfigError(f"ope: method must be one of {IS_METHODS} here (found {method!r}).")
    if method == "dr" and model is None:
        raise ConfigError("ope: method 'dr' needs the model's (q, v, v_end) (found None).")
    rewards = np.asarray(rewards, np.float64)
    ratios = np.asarray(ratios, np.float64)
    ptr = np.asarray(ptr, np.int64)
    episode_ends = np.asarray(ptr[1:]) - 1

    def estimate(steps: np.ndarray, p: np.ndarray) -> float:
        if method == "wis":
            return wis(rewards[steps], ratios[steps], p, gamma)
        if method == "pdis":
            return pdis(rewards[steps], ratios[steps], p, gamma)
        q, v, v_end = model  # type: ignore[misc]
        ends = np.searchsorted(episode_ends, steps[np.asarray(p[1:]) - 1])
        return dr(rewards[steps], ratios[steps], p, gamma, q[steps], v[steps], v_end[ends])

    value = estimate(np.arange(int(ptr[-1])), ptr)
    low, high = bootstrap_interval(estimate, ptr, n_boot, seed)
    return {"value": value, "ci_low": low, "ci_high": high, "ess": ess(episode_weights(ratios, ptr))}


def mean_estimate(per_episode: np.ndarray, n_boot: int = 200, seed: int = 0) -> dict[str, float]:
    """``{"value", "ci_low", "ci_high"}`` of a mean of per-episode values (FQE: ``V(s_0)``),
    episodes resampled."""
    per_episode = np.asarray(per_episode, np.float64)
    ptr = np.arange(len(per_episode) + 1)
    low, high = bootstrap_interval(lambda steps, _p: float(per_episode[steps].mean()), ptr, n_boot, seed)
    return {"value": float(per_episode.mean()), "ci_low": low, "ci_high": high}


def replicate_interval(value: float, replicates: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Normal bootstrap interval ``value -+ z * sd(replicates)`` (``z`` of ``level``; NaN with
    fewer than 2 replicates)."""
    replicates = np.asarray(replicates, np.float64)
    if len(replicates) < 2:
        return float("nan"), float("nan")
    z = float(NormalDist().inv_cdf(0.5 + level / 2))
    half = z * float(replicates.std(ddof=1))
    return float(value - half), float(value + half)


def widen_interval(
    value: float, low: float, high: float, model_values: np.ndarray, level: float = 0.95
) -> tuple[float, float]:
    """``[low, high]`` (an interval of the data's sampling error around ``value``) widened by
    the model's: each side's half-width ``h`` becomes ``sqrt(h^2 + (z * sd)^2)``, ``sd`` the
    spread of the estimates made with each bootstrap model (``model_values``), ``z`` of
    ``level`` (the two errors added as independent). Unchanged with fewer than 2 values."""
    model_values = np.asarray(model_values, np.float64)
    if len(model_values) < 2:
        return float(low), float(high)
    extra = (float(NormalDist().inv_cdf(0.5 + level / 2)) * float(model_values.std(ddof=1))) ** 2
    return (
        float(value - np.sqrt((value - low) ** 2 + extra)),
        float(value + np.sqrt((high - value) ** 2 + extra)),
    )


def ess_warnings(ess_value: float, episodes: int) -> list[str]:
    """A warning when the effective sample size is below :data:`LOW_ESS_SHARE` of the episodes
    (another when it is 0: every episode's weight is 0)."""
    if episodes and ess_value == 0:
        return [
            f"every logged episode has importance weight 0 ({episodes} episodes): the target "
            "policy gives probability 0 to at least one logged action of each (a greedy target, "
            "explore=False, rarely repeats a whole logged episode). WIS is undefined (value "
            "NaN) and PDIS / DR rest on the episodes' first steps only; use explore=True, or "
            "method='fqe'."
        ]
    if episodes and ess_value < LOW_ESS_SHARE * episodes:
        return [
            f"low effective sample size: {ess_value:.1f} of {episodes} episodes "
            f"(< {LOW_ESS_SHARE:.0%}); the target policy is far from the behaviour, the IS "
            "estimate rests on few episodes (compare with fqe / dr, or clip the ratios)."
        ]
    return []
