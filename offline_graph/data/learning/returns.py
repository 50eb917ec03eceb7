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


def discounted_returns(rewards: np.ndarray, episode_ptr: np.ndarray, gamma: float) -> np.ndarray:
    """Returns-to-go of every step; ``episode_ptr`` [E+1] are the episodes' step offsets.

    Vectorized across episodes: one numpy pass per distance-to-episode-end, so the cost is
    O(max episode length) array operations regardless of the number of episodes.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    out = np.zeros(len(rewards), dtype=np.float64)
    ends = np.asarray(episode_ptr[1:], dtype=np.int64)
    lengths = np.diff(episode_ptr)
    if len(lengths) == 0:
        return out.astype(np.float32)
    for d in range(int(lengths.max())):
        live = lengths > d
        idx = ends[live] - 1 - d
        if d == 0:
            out[idx] = rewards[idx]
        else:
            out[idx] = rewards[idx] + gamma * out[idx + 1]
    return out.astype(np.float32)
