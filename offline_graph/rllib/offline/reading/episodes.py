"""Reading strategy ``episodes``: recorded episode rows -> ``k * B`` sampled transitions.

Each call decodes and validates its episode rows (:meth:`Reading.read_episodes`), adds their
transitions to the FIFO buffer and samples ``k * B`` of them uniformly, ``k = max(1,
round(new / B))``. One Arrow row per transition (:mod:`offline_graph.data.learning.transitions`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.learning.transitions import LEARNER_COLUMNS, Transitions, transition_schema
from offline_graph.rllib.offline.reading.base import Reading

KEEP = LEARNER_COLUMNS
"""The columns emitted for the learners (bookkeeping columns such as ``eps_id`` stay here)."""


def keep_columns(sample: Transitions) -> list[str]:
    """The :data:`KEEP` columns ``sample`` has (``edge_attr``, the masks and ``globals`` are
    optional)."""
    if not isinstance(sample.obs, GraphColumns):  # typed graphs: each part's own columns
        return list(KEEP)
    cols = ["actions", "x", "edge_index", "value_targets"]
    if sample.obs.edge_attr is not None:
        cols.append("edge_attr")
    return cols + [m for m in ("node_mask", "edge_mask", "globals") if getattr(sample.obs, m) is not None]


class EpisodeTransitions(Reading):
    """Episode rows -> buffer -> ``k * B`` transitions per call."""

    kind = "episodes"
    takes_user_pieces = True

    def read(self, batch: Any) -> int:
        return self.read_buffered(batch, episodes=True)

    def sample(self, new: int) -> Transitions:
        return self.buffer.sample(self.num_batches(new) * self.batch_size)

    def rows(self, sample: Transitions) -> pa.Table:
        return sample.to_arrow(columns=keep_columns(sample))

    def empty_table(self) -> pa.Table:
        assert self.spec is not None  # noqa: S101
        return pa.schema([f for f in transition_schema(self.spec) if f.name in KEEP]).empty_table()
