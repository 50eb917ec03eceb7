"""A FIFO buffer of columnar transitions with uniform sampling (pure numpy).

Holds whole episodes' transitions up to ``capacity`` transitions (the oldest added chunks are
evicted first; the newest chunk is always kept whole) and samples rows uniformly with
replacement, like RLlib's ``EpisodeReplayBuffer`` but over columns instead of episode objects.
"""

from __future__ import annotations

import numpy as np

from offline_graph.errors import ConfigError
from offline_graph.transitions import Transitions


class TransitionBuffer:
    """Columnar FIFO replay of transitions."""

    def __init__(self, capacity: int, seed: int | None = 0) -> None:
        if capacity < 1:
            raise ConfigError(
                f"TransitionBuffer: capacity must be >= 1 transition (found {capacity}). "
                "Set config.offline_data(prelearner_buffer_kwargs={'capacity': ...})."
            )
        self.capacity = int(capacity)
        self._rng = np.random.default_rng(seed)
        self._chunks: list[Transitions] = []
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"TransitionBuffer(size={len(self)}, capacity={self.capacity}, chunks={len(self._chunks)})"

    def add(self, chunk: Transitions) -> None:
        """Append ``chunk`` and evict the oldest chunks beyond capacity (no copy of the rest)."""
        if len(chunk) == 0:
            return
        self._chunks.append(chunk)
        total = sum(len(c) for c in self._chunks)
        while len(self._chunks) > 1 and total - len(self._chunks[0]) >= self.capacity:
            total -= len(self._chunks.pop(0))
        self._size = total

    def sample(self, num: int) -> Transitions:
        """``num`` rows drawn uniformly with replacement (gathered chunk by chunk)."""
        if not self._chunks:
            raise ConfigError(
                "TransitionBuffer: buffer must hold transitions before sampling (found 0). "
                "Every input batch was empty or rejected."
            )
        idx = self._rng.integers(0, self._size, size=num)
        if len(self._chunks) == 1:
            return self._chunks[0].take(idx)
        starts = np.cumsum([0] + [len(c) for c in self._chunks])
        which = np.searchsorted(starts, idx, side="right") - 1
        parts = [
            self._chunks[c].take(idx[which == c] - starts[c])
            for c in range(len(self._chunks))
            if (which == c).any()
        ]
        order = np.argsort(which, kind="stable")
        sample = Transitions.concat(parts)
        # Restore the drawn order (rows were grouped by chunk).
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return sample.take(inverse)
