"""Reward scaling measured once from the training data, for value-based training (IQL, CQL).

IQL's actor weighs each logged action by ``exp(beta * (Q - V))``: how much the critic's error
moves that weight grows with the size of the rewards, so with returns of tens or hundreds a
fixed ``beta`` turns critic noise into weights at the clip, and the actor collapses onto
whichever action the critic over-estimates (issue 40: per-step rewards of 1, returns 4-16:
13 of the first 16 iterations a constant policy; the same logs with rewards x 0.1 train).
The anchors rescale rewards from the data: the IQL paper by the dataset's return range,
d3rlpy's ``ReturnBasedRewardScaler`` / ``StandardRewardScaler``, CORL before IQL.

Methods (``configure(reward_scaling=...)``, ``offline-graph train --reward-scaling``):

- ``return_range`` (the default for IQL and CQL): ``r * 1 / (max_return - min_return)``, the
  undiscounted returns of the training episodes (held-out episodes excluded), so the returns
  span a range of 1 whatever the reward's unit. Returns that are all equal (a range of 0):
  ``1 / max |return|``; all 0: 1 (nothing to scale).
- ``standard``: ``r / std(r)`` over every training step (``1 / |mean r|`` when all rewards are
  equal, 1 when all are 0).
- ``none``: rewards as logged.

Only a factor, never a shift: subtracting a constant from every step's reward (d3rlpy's
``StandardRewardScaler`` subtracts the mean) changes which policy is optimal when episodes
end at different times (the shift pays or charges per step survived), and a factor keeps
every value exactly convertible back: ``Q_logged = Q_trained / scale``. The factor is measured
once, before training, never per batch; it travels in the config's settings (so it is in every
checkpoint) and :func:`offline_graph.data_report` shows it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable

import numpy as np
import pyarrow.parquet as pq

from offline_graph.data.store import storage
from offline_graph.data.episodes.codec import decode_state
from offline_graph.data.errors import ConfigError, OfflineGraphError
from offline_graph.data.episodes.holdout import held_out

METHODS = ("none", "return_range", "standard")
"""The reward scaling methods (module doc)."""


@dataclass(frozen=True)
class RewardScale:
    """A measured reward scale: trained rewards are ``logged * scale``."""

    method: str = "none"
    scale: float = 1.0
    episodes: int = 0
    """Training episodes the scale was measured on."""
    return_min: float = 0.0
    return_max: float = 0.0
    reward_std: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_method(method: Any, where: str) -> str:
    """``method`` if it is one of :data:`METHODS`, else a ConfigError."""
    if method not in METHODS:
        raise ConfigError(
            f"{where}: reward_scaling must be one of {METHODS} (found {method!r}). "
            "'return_range' (the default for IQL / CQL) divides rewards by the training "
            "episodes' return range; 'none' trains on the logged rewards."
        )
    return str(method)


def _inverse(value: float) -> float:
    return 1.0 / value if value > 0.0 and np.isfinite(value) else 1.0


def fit_scale(method: str, returns: np.ndarray, rewards: np.ndarray) -> RewardScale:
    """The :class:`RewardScale` of ``method`` from the training episodes' undiscounted
    ``returns`` and all their step ``rewards`` (module doc)."""
    method = check_method(method, "reward scaling")
    returns = np.asarray(returns, np.float64)
    rewards = np.asarray(rewards, np.float64)
    if not len(returns) or not len(rewards):
        return RewardScale(method=method, episodes=len(returns))
    lo, hi = float(returns.min()), float(returns.max())
    std = float(rewards.std())
    if method == "return_range":
        spread = hi - lo
        scale = _inverse(spread if spread > 1e-12 * max(abs(lo), abs(hi)) else max(abs(lo), abs(hi)))
    elif method == "standard":
        scale = _inverse(std if std > 1e-12 * float(np.abs(rewards).max()) else float(np.abs(rewards).mean()))
    else:
        scale = 1.0
    return RewardScale(method, scale, len(returns), lo, hi, std)


def _episode_rows(file: str, on_error: str) -> Iterable[tuple[str, np.ndarray]]:
    """(episode id, rewards) of each episode row of ``file``."""
    with storage.open_input_file(file) as fh:
        items = pq.read_table(fh, columns=["item"]).column("item").to_pylist()
    for row, item in enumerate(items):
        try:
            raw = decode_state(item, file=file, row=row, raw_arrays=True)
            rewards = np.asarray(raw.rewards, np.float64).reshape(-1)
        except (OfflineGraphError, ValueError, TypeError):
            if on_error == "skip":
                continue  # the prelearner rejects and counts the same row
            raise
        yield raw.id, rewards


def _row_episodes(file: str) -> Iterable[tuple[str, np.ndarray]]:
    """(episode id, rewards) per episode of a converted transition-row ``file``."""
    with storage.open_input_file(file) as fh:
        table = pq.read_table(fh, columns=["eps_id", "rewards"])
    ids = np.asarray(table.column("eps_id").cast("string").to_pylist(), dtype=object)
    rewards = table.column("rewards").to_numpy().astype(np.float64)
    uniq, inv = np.unique(ids, return_inverse=True)
    parts = np.split(rewards[np.argsort(inv, kind="stable")], np.cumsum(np.bincount(inv))[:-1])
    for eid, part in zip(uniq.tolist(), parts):
        yield str(eid), part


def training_rewards(
    files: list[str], kind: str | None, holdout: float = 0.0, holdout_seed: int = 0, on_error: str = "raise"
) -> tuple[np.ndarray, np.ndarray]:
    """``(returns per episode, all rewards)`` of the training episodes in ``files`` (episode
    files or converted rows; held-out episodes excluded, as the prelearner excludes them; an
    episode whose rows are in several files counted once, as one)."""
    per_episode: dict[str, list[np.ndarray]] = {}
    for file in files:
        rows = _row_episodes(file) if kind == "transitions" else _episode_rows(file, on_error)
        for eid, rewards in rows:
            per_episode.setdefault(eid, []).append(rewards)
    ids = list(per_episode)
    keep = ~held_out(ids, holdout, holdout_seed)
    chosen = [np.concatenate(per_episode[i]) for i, k in zip(ids, keep) if k]
    if not chosen:
        return np.zeros(0), np.zeros(0)
    return np.array([c.sum() for c in chosen]), np.concatenate(chosen)
