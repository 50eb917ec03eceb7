"""What every reading strategy of :class:`~offline_graph.rllib.offline.prelearner.GraphOfflinePreLearner`
shares: the run's counts (:class:`~offline_graph.data.episodes.reader.ReadStats`), the episode ids seen
so far, the accounting actor, and the two ways a batch comes in:

* episode rows (``item`` [+ ``path``]): decoded, validated, held-out episodes dropped
  (:meth:`Reading.read_episodes`);
* converted transition rows: held-out episodes' rows dropped (:meth:`Reading.read_rows`).

A strategy (one module each, chosen once by :func:`offline_graph.rllib.offline.reading.choose_reading`)
adds :meth:`Reading.read` (a batch -> buffered, returns the new transitions),
:meth:`Reading.sample` (what one call emits) and :meth:`Reading.rows` (that as Arrow rows);
the strategies that emit runs of steps share :class:`BufferedRuns`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import ray

from offline_graph.data.learning.buffer import TransitionBuffer
from offline_graph.data.episodes.holdout import drop_held_out, split_rows
from offline_graph.data.episodes.row_checks import check_rows
from offline_graph.data.episodes.reader import ReadStats, batch_columns, log_rejections, read_transitions
from offline_graph.data.store.storage import uri_names
from offline_graph.data.learning.transitions import Transitions
from offline_graph.data.episodes.validation import EpisodeSpec
from offline_graph.rllib.offline import accounting
from offline_graph.rllib.core.settings import GraphSettings

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

WHERE = "GraphOfflinePreLearner"


class Reading:
    """Shared state and input handling of the reading strategies (see the module doc)."""

    kind = "base"
    takes_user_pieces = False
    """Whether the learner connector pipeline's user pieces run on :meth:`sample`'s output."""
    """The strategy's name (``repr`` and errors)."""

    def __init__(self, config: "AlgorithmConfig", settings: GraphSettings, spec: EpisodeSpec | None) -> None:
        self.settings = settings
        self.spec = spec
        self.batch_size = int(config.train_batch_size_per_learner)
        self.gamma = float(getattr(config, "gamma", 0.99))
        self.stats = ReadStats()
        self.seen_ids: dict[str, bytes] = {}
        self.capacity = int(config.prelearner_buffer_kwargs.get("capacity", 10 * self.batch_size))
        self.buffer = TransitionBuffer(self.capacity, seed=settings.seed)
        self._uris = uri_names(config.input_)  # bucket/key (Ray Data's path) -> s3://bucket/key
        self._collector: Any = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, buffered={len(self.buffer)})"

    # ------------------------------------------------------------------ the strategy's steps
    def read(self, batch: Any) -> int:
        """Decode, validate, account and buffer ``batch``; returns its new transitions."""
        raise NotImplementedError

    def ready(self) -> bool:
        """Whether :meth:`sample` has anything to draw from."""
        return len(self.buffer) > 0

    def sample(self, new: int) -> Any:
        """What this call emits, about ``new`` transitions' worth (a multiple of the batch size)."""
        raise NotImplementedError

    def rows(self, sample: Any) -> pa.Table:
        """``sample`` as the Arrow rows the learners' collate function reads."""
        raise NotImplementedError

    def empty_table(self) -> pa.Table:
        """Zero rows with the columns a non-empty call emits."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared input handling
    def items(self, batch: Any) -> tuple[list[Any], list[str | None]]:
        """(items, paths) of episode rows; paths named as the input gave them (s3://...)."""
        items, paths = batch_columns(batch)
        if self._uris:
            paths = [self._uris.get(p, p) if p is not None else None for p in paths]
        return items, paths

    def read_episodes(self, batch: Any) -> list[Transitions]:
        """Episode rows -> the transitions of the valid, not held-out episodes (in row order);
        rejections raised or counted as ``settings.on_error`` says, the counts reported."""
        assert self.spec is not None  # noqa: S101 (single-agent strategies have a spec)
        items, paths = self.items(batch)
        call_stats = ReadStats()
        parts = read_transitions(
            items,
            paths,
            self.spec,
            self.gamma,
            on_error=self.settings.on_error,
            seen_ids=self.seen_ids,
            stats=call_stats,
        )
        if self.settings.holdout > 0.0:
            parts = drop_held_out(parts, self.settings.holdout, self.settings.holdout_seed, call_stats)
        self.account(call_stats, items, paths)
        return parts

    def read_rows(self, batch: Any) -> pa.Table:
        """Converted transition rows without the held-out episodes' rows (accounted like
        episode input); damaged rows raise (:func:`~offline_graph.data.episodes.row_checks.check_rows`)."""
        table = batch if isinstance(batch, pa.Table) else pa.table(batch)
        check_rows(table)
        if self.settings.holdout <= 0.0:
            return table
        kept, call_stats, _ = split_rows(table, self.settings.holdout, self.settings.holdout_seed)
        ids = table.column("eps_id").cast(pa.string()).to_pylist()
        steps = table.column("t").to_pylist() if "t" in table.column_names else range(len(ids))
        keys = [f"{e}:{t}".encode() for e, t in zip(ids, steps)]
        self.account(call_stats, keys, [None], log=False)
        return kept

    def read_buffered(self, batch: Any, episodes: bool) -> int:
        """Episode rows or converted rows (rebuilt per episode from ``eps_id`` / ``t``) into
        the buffer; returns the new transitions (strategies that need whole episodes)."""
        parts = self.read_episodes(batch) if episodes else [Transitions.from_table(self.read_rows(batch))]
        for part in parts:
            self.buffer.add(part)
        return sum(len(p) for p in parts)

    def account(self, call_stats: ReadStats, items: Any, paths: Any, log: bool = True) -> None:
        """Log this call's rejections, add its counts, and report them to the run's collector."""
        if log:
            log_rejections(call_stats, WHERE)
        self.stats.merge(call_stats)
        if self.settings.stats_name and ray.is_initialized():
            if self._collector is None:
                self._collector = accounting.get_collector()
            accounting.report(self._collector, self.settings.stats_name, items, paths, call_stats)

    def num_batches(self, new: float) -> int:
        """``k = max(1, round(new / B))``: an epoch is about one pass over the data and each
        learner batch holds exactly B rows."""
        return max(1, int(round(new / self.batch_size)))


class BufferedRuns(Reading):
    """A strategy that emits runs of consecutive steps (``runs``, ``value``): episode rows, or
    converted rows rebuilt per episode (``episodes=False``), buffered whole; each call's rows
    are its sample as it is."""

    def __init__(self, *args: Any, episodes: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.episodes = episodes

    def read(self, batch: Any) -> int:
        return self.read_buffered(batch, self.episodes)

    def rows(self, sample: pa.Table) -> pa.Table:
        return sample

    def num_runs(self, data: Transitions, new: int, length: int) -> int:
        """Runs of up to ``length`` trained steps drawn from the buffered ``data`` for ``new``
        transitions: ``k * B`` with ``k`` from :meth:`num_batches` of ``new`` over the mean
        trained steps per run (at most ``length``, at most an episode's mean length)."""
        per_run = min(length, max(1.0, len(data) / max(1, episode_count(data))))
        return self.num_batches(new / per_run) * self.batch_size


def episode_count(data: Transitions) -> int:
    """Distinct episodes in ``data``."""
    return int(np.unique(data.episode_index).size)
