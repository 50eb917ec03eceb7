"""A Ray Data datasink writing each write task's blocks, in the order the task made them, as
the row groups of one Parquet file (the conversion jobs' output; :mod:`offline_graph.jobs.convert`).

Ray Data's ``write_parquet`` hands a task's blocks to ``pyarrow.dataset.write_dataset`` with
``use_threads=True`` and without ``preserve_order``: on a worker whose Arrow CPU pool has
several threads the row groups come out in whatever order the threads finish them, so the same
input could give other bytes. Ray workers are reused, and Ray Data 2.60's own Parquet reader
sets the process-wide pool of every worker that ran one of its reads to 32 threads
(``RAY_DATA_PARQUET_READER_CPU_COUNT``): a conversion after a training in the same Ray came out
in another order (measured), as with ``OMP_NUM_THREADS`` > 1 in the workers. Here one thread
writes the blocks one after another, the same row groups as ``write_parquet`` (the same bytes
where its order was right, measured) but always in the task's order.
"""

from __future__ import annotations

from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq
from ray.data.block import Block, BlockAccessor
from ray.data.datasource import Datasink

from offline_graph.data.store import storage


BATCH_ROWS = 128 * 1024
"""Rows of a row group at most: each record batch of a block (a chunk of its columns, cut to
this size) is one row group, the layout ``write_parquet`` gave (``pyarrow.dataset`` scans
in-memory tables in batches of up to 128 Ki rows and writes each as a row group)."""


def task_file_name(task_index: int) -> str:
    """The output file of write task ``task_index`` (the ``-0`` keeps the names that Ray
    Data's ``write_parquet`` gave, ``<task>-<file of the task>``, so older outputs look alike)."""
    return f"transitions-{task_index:06d}-0.parquet"


class OrderedParquetSink(Datasink[int]):
    """Writes the blocks of write task ``i`` to ``<output>/transitions-<i>-0.parquet`` in the
    order the task made them, each record batch of a block (:data:`BATCH_ROWS` rows at most) one
    row group; a task without rows writes no file. A retried task (its worker died) rewrites
    its own file.

    ``output``: a local directory or a URI (:mod:`offline_graph.data.store.storage`; it must exist
    before the job, an object store's prefix needs nothing); ``schema``: the files' Arrow
    schema, its metadata included (each block is cast to it); ``parquet_args``:
    ``pyarrow.parquet.ParquetWriter`` options (``compression`` ...).
    """

    def __init__(self, output: str, schema: pa.Schema, **parquet_args: Any) -> None:
        self.output, self.schema, self.parquet_args = output, schema, parquet_args

    def write(self, blocks: Iterable[Block], ctx: Any) -> int:
        """Write one task's blocks; returns its rows."""
        # All blocks first (Ray Data keeps them until the task ends anyway): a map step that
        # fails half-way (raise mode) leaves no file behind.
        tables = [BlockAccessor.for_block(b).to_arrow() for b in blocks]
        tables = [t for t in tables if t.num_rows > 0]
        if not tables:
            return 0
        location = storage.join(self.output, task_file_name(ctx.task_idx))
        fs, path = storage.resolve(location)
        with (
            storage.reaching(location),
            pq.ParquetWriter(path, self.schema, filesystem=fs, **self.parquet_args) as writer,
        ):
            for table in tables:
                if not table.schema.equals(self.schema, check_metadata=False):
                    table = table.select(self.schema.names).cast(self.schema)
                for batch in table.to_batches(max_chunksize=BATCH_ROWS):
                    if batch.num_rows:
                        writer.write_batch(batch)  # one row group each
        return sum(t.num_rows for t in tables)

    def get_name(self) -> str:
        return "OrderedParquet"
