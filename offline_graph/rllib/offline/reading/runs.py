"""Reading strategy ``runs`` (memory modules: ``frame_stack > 1`` or ``memory``): episode rows
or converted rows -> ``k * B`` runs of consecutive steps.

A run is a chunk of up to ``seq_length`` trained steps plus up to ``seq_context`` earlier steps
of the same episode (:mod:`offline_graph.data.learning.sequences`), one Arrow row per run, each graph
once. Converted rows are rebuilt into episodes from ``eps_id`` / ``t`` (no re-recording).
``k`` makes an epoch about one pass over the data: ``k = max(1, round(new / (B * L)))`` with
``L`` the mean trained steps per run.
"""

from __future__ import annotations

import pyarrow as pa

from offline_graph.data.learning.sequences import runs_to_arrow, sample_runs
from offline_graph.data.learning.transitions import transition_schema
from offline_graph.rllib.offline.reading.base import BufferedRuns
from offline_graph.rllib.offline.reading.episodes import KEEP


class MemoryRuns(BufferedRuns):
    """Episodes (or rows rebuilt into episodes) -> buffer -> ``k * B`` runs per call."""

    kind = "runs"

    def sample(self, new: int) -> pa.Table:
        length, context = self.settings.seq_length, self.settings.seq_context
        data = self.buffer.all()
        num = self.num_runs(data, new, length)
        ctx0, start, stop = sample_runs(data, self.buffer.rng, num, length, context)
        return runs_to_arrow(data, ctx0, start, stop)

    def empty_table(self) -> pa.Table:
        """Zero run rows: every column of a transition row one level deeper, plus ``context``."""
        assert self.spec is not None  # noqa: S101
        fields = [pa.field(f.name, pa.list_(f.type)) for f in transition_schema(self.spec) if f.name in KEEP]
        return pa.schema(fields + [pa.field("context", pa.int32())]).empty_table()
