"""Reading strategy ``rows``: converted transition rows (``offline-graph convert``) passed
through.

Rows are already one transition each: each call drops the held-out episodes' rows
(``holdout > 0``) and the bookkeeping columns (``eps_id``, ``t``, ...) and emits the rest,
zero-copy. No buffer, no resampling: Ray Data's shuffle and epochs decide the order.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from offline_graph.data.learning.transitions import is_bookkeeping
from offline_graph.rllib.offline.reading.base import Reading


class RowTransitions(Reading):
    """Converted rows -> the same rows without held-out episodes and bookkeeping columns."""

    kind = "rows"
    takes_user_pieces = True

    def read(self, batch: Any) -> int:
        table = self.read_rows(batch)
        self._table = table.select([c for c in table.column_names if not is_bookkeeping(c)])
        return self._table.num_rows

    def ready(self) -> bool:
        return True  # an empty table passes through as it is

    def sample(self, new: int) -> pa.Table:
        return self._table

    def rows(self, sample: pa.Table) -> pa.Table:
        return sample

    def empty_table(self) -> pa.Table:
        return self._table.schema.empty_table()
