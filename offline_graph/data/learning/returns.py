"""Discounted Monte-Carlo returns-to-go over whole recorded episodes (pure numpy).

MARWIL's value targets. RLlib's stock episode path computes ``r + gamma * V(s')`` from the
prelearner's never-synced value net; we use the recorded rewards of the whole episode instead:
``G_t = r_t + gamma * G_{t+1}`` with ``G_T = 0`` at the end of every episode. At a *truncated*
end we also bootstrap with 0 (the value net in a prelearner is stale, so a bootstrap from it
would be noise); this under-estimates returns near truncation by at most
``gamma**(T-t) * V(s_T)``, documented in docs/guides/data-format.md.
"""

from __future__ import annotations

import numpy as np

FEW_EPISODES = 64
"""Up to this many episodes the returns are summed step by step in Python floats (the same
float64 operations, in the same order, as the vectorized passes: the same bits): one numpy
pass per distance to the episode end costs more than a loop over the steps of a few episodes
(measured: 16 episodes of ~30 steps 7x faster, of ~300 steps 7x; 64 of ~30 1.5x; 256 of ~100
2.4x slower)."""


def discounted_returns(rewards: np.ndarray, episode_ptr: np.ndarray, gamma: float) -> np.ndarray:
    """Returns-to-go of every step; ``episode_ptr`` [E+1] are the episodes' step offsets.

    Vectorized across episodes: one numpy pass per distance-to-episode-end, so the cost is
    O(max episode length) array operations regardless of the number of episodes (a loop over
    the steps for up to :data:`FEW_EPISODES` episodes; the same values).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    lengths = np.diff(episode_ptr)
    if len(lengths) <= FEW_EPISODES:
        return _stepwise(rewards, episode_ptr, float(gamma))
    out = np.zeros(len(rewards), dtype=np.float64)
    ends = np.asarray(episode_ptr[1:], dtype=np.int64)
    for d in range(int(lengths.max())):
        live = lengths > d
        idx = ends[live] - 1 - d
        if d == 0:
            out[idx] = rewards[idx]
        else:
            out[idx] = rewards[idx] + gamma * out[idx + 1]
    return out.astype(np.float32)


def _stepwise(rewards: np.ndarray, episode_ptr: np.ndarray, gamma: float) -> np.ndarray:
    """:func:`discounted_returns` by a Python loop over the steps (float64 arithmetic)."""
    r = rewards.tolist()
    out = [0.0] * len(r)
    bounds = np.asarray(episode_ptr, dtype=np.int64).tolist()
    for start, stop in zip(bounds[:-1], bounds[1:]):
        if stop <= start:
            continue
        g = out[stop - 1] = r[stop - 1]  # the last step: its reward (no 0.0 added: keeps -0.0)
        for i in range(stop - 2, start - 1, -1):
            g = out[i] = r[i] + gamma * g
    return np.array(out, dtype=np.float64).astype(np.float32)
