"""A FIFO buffer of columnar transitions with uniform sampling (pure numpy).

Holds whole episodes' transitions up to ``capacity`` transitions (the oldest added chunks are
evicted first; the newest chunk is always kept whole) and samples rows uniformly with
replacement, like RLlib's ``EpisodeReplayBuffer`` but over columns instead of episode objects.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.graphs.typed_columns import TypedColumns
from offline_graph.data.learning.arena import GraphArena, TypedArena, arena_for
from offline_graph.data.learning.transitions import Transitions, one_agent_kind

_ROW_COLUMNS = ("actions", "rewards", "terminateds", "truncateds", "value_targets", "t", "env_t")


class TransitionBuffer:
    """Columnar FIFO replay of transitions.

    Layout: the live transitions in one :class:`~offline_graph.data.learning.arena.GraphArena`
    (observations, per-transition columns, the global number of each transition's episode
    entry), their episodes' final observations in another (one graph per episode entry, a
    graph without nodes where a chunk kept none), the episode ids in a list. Adding copies the
    chunk once into preallocated columns (no merge of the buffer); a sample is one gather per
    column, in draw order; eviction is exact, chunk by chunk, oldest first.
    """

    def __init__(self, capacity: int, seed: int | None = 0) -> None:
        if capacity < 1:
            raise ConfigError(
                f"TransitionBuffer: capacity must be >= 1 transition (found {capacity}). "
                "Set config.offline_data(prelearner_buffer_kwargs={'capacity': ...})."
            )
        self.capacity = int(capacity)
        self._rng = np.random.default_rng(seed)
        self._rows: Any = GraphArena(reserve=self.capacity)  # obs + per-row columns (TypedArena: typed)
        self._finals: Any = GraphArena()  # per episode entry: its final observation
        self._ids: list[str] = []  # episode ids (entries) from self._ids_lo on
        self._agents: list[Any] = []
        self._ids_lo = 0
        self._episodes = 0  # episode entries ever added: the stored episode index is global
        self._chunks: list[tuple[int, int, bool]] = []  # live chunks: rows, entries, has finals
        self._size = 0
        self._multi = False

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"TransitionBuffer(size={len(self)}, capacity={self.capacity}, chunks={len(self._chunks)})"

    @property
    def chunks(self) -> int:
        """Live chunks (each added, not yet evicted, non-empty :class:`Transitions`)."""
        return len(self._chunks)

    def add(self, chunk: Transitions) -> None:
        """Append ``chunk`` and evict the oldest chunks beyond capacity (evicted first, so
        the newest chunk is always kept whole)."""
        if len(chunk) == 0:
            return
        while self._chunks and self._size + len(chunk) - self._chunks[0][0] >= self.capacity:
            rows, entries, _ = self._chunks.pop(0)
            self._size -= rows
            self._rows.pop()
            self._finals.pop()
            self._ids_lo += entries
        if self._ids_lo > len(self._ids) // 2:  # forget the evicted ids now and then
            del self._ids[: self._ids_lo], self._agents[: self._ids_lo]
            self._ids_lo = 0
        multi = chunk.agent_ids is not None
        one_agent_kind("TransitionBuffer.add", [multi, self._multi] if self._chunks else [multi])
        entries = len(chunk.episode_ids)
        if not self._chunks and isinstance(chunk.obs, TypedColumns) != isinstance(self._rows, TypedArena):
            self._rows = arena_for(chunk.obs, self.capacity)  # the kind of graphs sets the arenas
            self._finals = arena_for(chunk.obs)
        if not self._finals.reserve:  # room for about as many episodes as the buffer holds
            self._finals.reserve = -(-self.capacity * entries // len(chunk))
        extra = {k: v for k in _ROW_COLUMNS if (v := getattr(chunk, k)) is not None}
        extra["episode_index"] = chunk.episode_index.astype(np.int64) + self._episodes
        self._rows.push(chunk.obs, extra)
        finals = chunk.final_obs if chunk.final_obs is not None else chunk.obs.without_nodes(entries)
        self._finals.push(finals, {})
        self._ids += chunk.episode_ids
        self._agents += chunk.agent_ids or ()
        self._multi = multi
        self._episodes += entries
        self._chunks.append((len(chunk), entries, chunk.final_obs is not None))
        self._size += len(chunk)

    @property
    def rng(self) -> np.random.Generator:
        """The buffer's sampling generator (also used to draw runs)."""
        return self._rng

    def all(self) -> Transitions:
        """Every live transition as one :class:`Transitions`, oldest first (episodes stay
        contiguous and in step order: chunks hold whole episodes); ``episode_ids`` are the live
        chunks' entries. Its arrays are views of the buffer: read them (or gather from them)
        before the next :meth:`add`, which may write over evicted rows."""
        self._check_not_empty()
        return self._transitions(*self._rows.view())

    def sample(self, num: int) -> Transitions:
        """``num`` rows drawn uniformly with replacement, in draw order (the rows of
        :meth:`all` at ``rng.integers(0, len(self), num)``, gathered once)."""
        self._check_not_empty()
        return self._transitions(*self._rows.take(self._rng.integers(0, self._size, size=num)))

    def _transitions(self, obs: GraphColumns, cols: dict[str, np.ndarray]) -> Transitions:
        """Rows of the buffer (``obs`` and their columns) with the live episode entries."""
        first = self._episodes - sum(e for _, e, _ in self._chunks)  # global index of entry 0
        finals = self._finals.view()[0] if all(f for _, _, f in self._chunks) else None
        return Transitions(
            obs=obs,
            actions=cols["actions"],
            rewards=cols["rewards"],
            terminateds=cols["terminateds"],
            truncateds=cols["truncateds"],
            value_targets=cols["value_targets"],
            episode_index=(cols["episode_index"] - first).astype(np.int32),
            episode_ids=self._ids[self._ids_lo :],
            t=cols["t"],
            agent_ids=self._agents[self._ids_lo :] if self._multi else None,
            env_t=cols.get("env_t"),
            final_obs=finals,
        )

    def _check_not_empty(self) -> None:
        if self._size == 0:
            raise ConfigError(
                "TransitionBuffer: buffer must hold transitions before sampling (found 0). "
                "Every input batch was empty or rejected."
            )
