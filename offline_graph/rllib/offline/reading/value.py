"""Reading strategy ``value`` (IQL, CQL): episode rows or converted rows -> ``k * B / L``
value runs, each ``L`` consecutive steps plus the graph after them
(:mod:`offline_graph.data.learning.value_runs`), so a learner batch holds every graph once and its
``next_index`` points each trained step at its next graph.

One learner batch is ``train_batch_size_per_learner`` *rows*; ``configure`` sets the run
length so a batch trains about ``B`` transitions (``L = value_run_length``, rows ``B / L``).
``k`` makes an epoch about one pass over the data.

Rewards are emitted times the reward scale measured by ``configure``
(``settings.reward_scale``, :mod:`offline_graph.data.learning.reward_scale`): episode files and
converted rows of the same episodes train on the same numbers.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from offline_graph.data.learning.transitions import GRAPH_COLUMNS, column_kind, transition_schema
from offline_graph.data.learning.value_runs import (
    MARKER,
    STEP_COLUMNS,
    sample_value_runs,
    value_runs_to_arrow,
)
from offline_graph.rllib.offline.reading.base import BufferedRuns


class ValueRuns(BufferedRuns):
    """Episodes (or rows rebuilt into episodes) -> buffer -> value runs per call."""

    kind = "value"

    def sample(self, new: int) -> pa.Table:
        length = self.settings.value_runs
        data = self.buffer.all()
        num = self.num_runs(data, new, length)
        start, stop = sample_value_runs(data, self.buffer.rng, num, length)
        if not len(start):  # no buffered step has its next observation yet (a cut episode)
            return self.empty_table()
        scale = float(self.settings.reward_scale.get("scale", 1.0))
        if scale != 1.0:
            data = dataclasses.replace(data, rewards=(data.rewards * scale).astype(data.rewards.dtype))
        return value_runs_to_arrow(data, start, stop)

    def empty_table(self) -> pa.Table:
        assert self.spec is not None  # noqa: S101
        schema = transition_schema(self.spec)
        fields = [pa.field(n, pa.list_(schema.field(n).type)) for n in STEP_COLUMNS]
        fields += [pa.field(f.name, pa.list_(f.type)) for f in schema if column_kind(f.name) in GRAPH_COLUMNS]
        return pa.schema(fields + [pa.field(MARKER, pa.int32())]).empty_table()
