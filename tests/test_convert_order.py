"""The conversion's output bytes do not depend on the workers' Arrow thread pools.

Ray Data's ``write_parquet`` wrote a task's blocks with ``pyarrow.dataset.write_dataset``
(threads on, order not preserved): on a worker whose Arrow CPU pool had several threads the
row groups of a file came in another order from run to run. Ray Data's own Parquet reader sets
that pool to 32 threads in every worker that ran one of its reads (training from Parquet), so a
conversion after a training in the same Ray could give other bytes. Here every worker gets an
8-thread pool from the start (``OMP_NUM_THREADS``, which Arrow sizes its pool by) and each
output block is one row, so a reordering shows in almost every conversion (the old code failed
this test in 14 of 14 runs, measured).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offline_graph.data.episodes.validation import EpisodeSpec
from offline_graph.rllib.offline.episodes import encode_episode
from tests.helpers import write_episode_file

pytestmark = [pytest.mark.slow, pytest.mark.own_ray]  # its workers must see OMP_NUM_THREADS

ray = pytest.importorskip("ray")

SPEC = EpisodeSpec(num_features=2, edge_dim=None, num_actions=3)
LENGTHS = {"a": [20, 36, 12, 48, 28, 16], "b": [32, 8, 44, 24, 40, 20]}
"""Episode lengths (transitions) of the two input files: 160 and 168 rows."""


def episode(eps_id: str, length: int) -> bytes:
    graphs = [
        {"x": np.full((3, 2), t, np.float32), "edge_index": np.array([[0, 1], [1, 2]], np.int64)}
        for t in range(length + 1)
    ]
    actions, rewards = [t % 3 for t in range(length)], [float(t) for t in range(length)]
    return encode_episode(graphs, actions, rewards, terminated=True, truncated=False, episode_id=eps_id)


def digests(out: str) -> dict[str, str]:
    return {
        f: hashlib.sha256(open(os.path.join(out, f), "rb").read()).hexdigest()
        for f in sorted(os.listdir(out))
        if f.endswith(".parquet")
    }


@pytest.fixture
def many_threads_ray():
    assert not ray.is_initialized()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "8"}},
    )
    ctx = ray.data.DataContext.get_current()
    block = ctx.target_max_block_size
    ctx.target_max_block_size = 1  # one row per output block (a row is ~300 bytes)
    try:
        yield
    finally:
        ctx.target_max_block_size = block
        ray.shutdown()


def test_row_groups_come_in_input_order_whatever_the_arrow_threads(many_threads_ray, tmp_path):
    from offline_graph.jobs.convert import ConvertConfig, convert

    @ray.remote
    def arrow_threads() -> int:
        return pa.cpu_count()

    assert ray.get(arrow_threads.remote()) == 8  # the condition under which the old code failed
    src = tmp_path / "eps"
    src.mkdir()
    for name, lengths in LENGTHS.items():
        write_episode_file(src / f"{name}.parquet", [episode(f"{name}{i}", n) for i, n in enumerate(lengths)])
    runs = []
    for run in range(2):  # each run checks its own row order; the second its bytes too
        out = str(tmp_path / f"rows{run}")
        report = convert(ConvertConfig(input=str(src), output=out, spec=SPEC, episodes_per_batch=2))
        assert report["transitions_out"] == 328
        runs.append(digests(out))
        # one file per input file (one task each), its rows in input order: episode by
        # episode, step by step, one row group per row (block)
        for task, (name, lengths) in enumerate(LENGTHS.items()):
            file = pq.ParquetFile(os.path.join(out, f"transitions-{task:06d}-0.parquet"))
            assert file.metadata.num_row_groups == sum(lengths)
            rows = file.read(columns=["eps_id", "t"])
            expected = [(f"{name}{i}", t) for i, n in enumerate(lengths) for t in range(n)]
            assert (
                list(zip(rows.column("eps_id").cast(pa.string()).to_pylist(), rows.column("t").to_pylist()))
                == expected
            )
    assert list(runs[0]) == ["transitions-000000-0.parquet", "transitions-000001-0.parquet"]
    assert runs[1] == runs[0]


def test_sink_writes_each_batch_as_a_row_group_in_order(tmp_path):
    """The sink alone (no Ray running): a task's blocks -> one file, each record batch a row
    group in block order, empty blocks skipped, other column types cast; no file for no rows."""
    from ray.data._internal.execution.interfaces import TaskContext

    from offline_graph.jobs.sink import OrderedParquetSink

    schema = pa.schema([("v", pa.int64())]).with_metadata({b"k": b"x"})
    sink = OrderedParquetSink(str(tmp_path), schema, compression="zstd")
    empty = pa.table({"v": pa.array([], pa.int64())})
    two_chunks = pa.concat_tables([pa.table({"v": [9]}), pa.table({"v": [0, 5]})])
    blocks = [pa.table({"v": [3, 1]}), empty, two_chunks, pa.table({"v": pa.array([7], pa.int32())})]
    assert sink.write(iter(blocks), TaskContext(task_idx=4, op_name="Write")) == 6
    assert sink.write(iter([empty]), TaskContext(task_idx=5, op_name="Write")) == 0
    assert os.listdir(tmp_path) == ["transitions-000004-0.parquet"]
    file = pq.ParquetFile(tmp_path / "transitions-000004-0.parquet")
    assert [file.metadata.row_group(g).num_rows for g in range(file.metadata.num_row_groups)] == [2, 1, 2, 1]
    assert file.read().column("v").to_pylist() == [3, 1, 9, 0, 5, 7]
    assert file.schema_arrow.metadata[b"k"] == b"x" and file.schema_arrow.field("v").type == pa.int64()
    assert file.metadata.row_group(0).column(0).compression == "ZSTD"
