"""A FIFO buffer of columnar transitions with uniform sampling (pure numpy).

Holds whole episodes' transitions up to ``capacity`` transitions (the oldest added chunks are
evicted first; the newest chunk is always kept whole) and samples rows uniformly with
replacement, like RLlib's ``EpisodeReplayBuffer`` but over columns instead of episode objects.
"""

from __future__ import annotations

import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.learning.transitions import Transitions


class TransitionBuffer:
    """Columnar FIFO replay of transitions.

    Layout: one consolidated ``Transitions`` (rows ``start..`` are live, rows before ``start``
    were evicted) followed by up to ``max_pending`` chunks added since the last consolidation.
    A sample is one gather from the consolidated part plus one per pending chunk; the pending
    chunks are merged in (one copy of the live rows) only every ``max_pending`` additions,
    not on every call. Eviction is exact, chunk by chunk, oldest first.
    """

    def __init__(self, capacity: int, seed: int | None = 0, max_pending: int = 4) -> None:
        if capacity < 1:
            raise ConfigError(
                f"TransitionBuffer: capacity must be >= 1 transition (found {capacity}). "
                "Set config.offline_data(prelearner_buffer_kwargs={'capacity': ...})."
            )
        self.capacity = int(capacity)
        self.max_pending = int(max_pending)
        self._rng = np.random.default_rng(seed)
        self._data: Transitions | None = None  # consolidated rows (live from self._start)
        self._start = 0
        self._pending: list[Transitions] = []
        self._lens: list[int] = []  # live chunk lengths, oldest first
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return (
            f"TransitionBuffer(size={len(self)}, capacity={self.capacity}, "
            f"chunks={len(self._lens)}, pending={len(self._pending)})"
        )

    def _consolidated_live(self) -> int:
        return 0 if self._data is None else len(self._data) - self._start

    def add(self, chunk: Transitions) -> None:
        """Append ``chunk`` and evict the oldest chunks beyond capacity."""
        if len(chunk) == 0:
            return
        self._pending.append(chunk)
        self._lens.append(len(chunk))
        self._size += len(chunk)
        while len(self._lens) > 1 and self._size - self._lens[0] >= self.capacity:
            oldest = self._lens.pop(0)
            self._size -= oldest
            if self._consolidated_live() > 0:
                self._start += oldest
            else:
                self._pending.pop(0)
        if len(self._pending) > self.max_pending:
            self._consolidate()

    def _consolidate(self) -> None:
        parts = list(self._pending)
        if self._data is not None and self._consolidated_live():
            parts.insert(0, self._data.take(np.arange(self._start, len(self._data))))
        self._data = Transitions.concat(parts)
        self._start = 0
        self._pending = []

    @property
    def rng(self) -> np.random.Generator:
        """The buffer's sampling generator (also used to draw runs)."""
        return self._rng

    def all(self) -> Transitions:
        """Every live transition as one :class:`Transitions`, oldest first (episodes stay
        contiguous and in step order: chunks hold whole episodes)."""
        if self._size == 0:
            raise ConfigError(
                "TransitionBuffer: buffer must hold transitions before sampling (found 0). "
                "Every input batch was empty or rejected."
            )
        if self._pending:
            self._consolidate()
        assert self._data is not None  # noqa: S101 (size > 0)
        if self._start:
            self._data = self._data.take(np.arange(self._start, len(self._data)))
            self._start = 0
        return self._data

    def sample(self, num: int) -> Transitions:
        """``num`` rows drawn uniformly with replacement, in draw order."""
        if self._size == 0:
            raise ConfigError(
                "TransitionBuffer: buffer must hold transitions before sampling (found 0). "
                "Every input batch was empty or rejected."
            )
        idx = self._rng.integers(0, self._size, size=num)
        live = self._consolidated_live()
        sources = ([self._data] if live and self._data is not None else []) + self._pending
        offsets = ([self._start] if live else []) + [0] * len(self._pending)
        if len(sources) == 1:
            return sources[0].take(idx + offsets[0])
        starts: np.ndarray = np.cumsum([0] + [len(src) - off for src, off in zip(sources, offsets)])
        which = np.searchsorted(starts, idx, side="right") - 1
        order = np.argsort(which, kind="stable")
        parts = [
            sources[c].take(idx[which == c] - starts[c] + offsets[c])
            for c in range(len(sources))
            if (which == c).any()
        ]
        sample = Transitions.concat(parts)
        # Rows were grouped by source; put them back in draw order.
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return sample.take(inverse)
