"""What both conversion jobs (:mod:`offline_graph.jobs.convert`, single-agent, and
:mod:`offline_graph.jobs.ma_convert`, multi-agent) run the same way: the checks before a job
(:func:`start`), the Ray Data read -> map -> write with per-block accounting files
(:func:`run`, :func:`convert_block`, :func:`save_stats`) and the verified JSON report
(:func:`report`). The map step (a class taking ``(spec, gamma, on_error, stats_dir)``) and
the output check are each job's own."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import time
from typing import Any

import pyarrow as pa

from offline_graph.data.store import storage
from offline_graph.data.errors import (
    ConfigError,
    FormatVersionError,
    OutputExistsError,
    StorageError,
    reraise_project_error,
)
from offline_graph.data.store.files import FileScan, scan_files
from offline_graph.data.store.format import make_metadata
from offline_graph.data.episodes.reader import ReadStats
from offline_graph.rllib.offline import accounting
from offline_graph.jobs.source import episode_source

logger = logging.getLogger(__name__)
REPORT_NAME = "_conversion_report.json"
"""Side files start with "_" (the Hadoop/Spark convention, as in ``_SUCCESS``): pyarrow, pandas,
Polars, DuckDB and Ray Data then read the output directory as the data set. Directories
converted before 2026-11-23 hold ``conversion_report.json``; our readers list only Parquet
files, so they still read; other readers need that file moved away."""
STATS_DIR = "_block_stats"
"""Per-block accounting files of a running job (inside the output; removed at the end)."""


def save_stats(stats_dir: str, key: str, stats: ReadStats) -> None:
    # atomic (a local rename, an object store's whole-object PUT): a reader sees the old or
    # the new report, never half of one
    body = json.dumps(accounting.to_dict(stats)).encode()
    storage.write_bytes(storage.join(stats_dir, f"{key}.json"), body)


def load_stats(stats_dir: str) -> ReadStats:
    blocks = [json.loads(storage.read_bytes(f)) for f in storage.list_dir(stats_dir, ".json")]
    return accounting.from_dicts(blocks)


_WORKER_CACHE: dict[tuple, Any] = {}


def convert_block(
    batch: pa.Table, *, map_class: type, spec: Any, gamma: float, on_error: str, stats_dir: str | None
) -> pa.Table:
    """Ray Data task: one block of episode rows -> its transitions.

    Runs as a Ray *task* (workers are reused across jobs, no actor start-up per job); the
    ``map_class`` instance is cached per worker process.
    """
    key = (map_class, spec, gamma, on_error, stats_dir)
    fn = _WORKER_CACHE.get(key)
    if fn is None:
        fn = _WORKER_CACHE[key] = map_class(spec, gamma, on_error, stats_dir)
    return fn(batch)


def require_empty_output(output: str) -> None:
    """OutputExistsError unless ``output`` (a local path or URI) is absent or empty."""
    existing = storage.list_dir(output, recursive=True) if storage.is_dir(output) else []
    if existing:
        raise OutputExistsError(
            f"convert: output {output} must be empty or absent (found "
            f"{len(existing)} entries). Choose a new --output or delete it."
        )


def start(cfg: Any) -> tuple[FileScan, float]:
    """The checks before a conversion: options, empty output, the input's scan and kind.

    ``cfg``: a ``ConvertConfig`` or a multi-agent one; returns the scan and the start time.
    """
    for name in ("episodes_per_batch", "episodes_per_task", "num_workers", "cpus_per_worker"):
        value = getattr(cfg, name)
        if value is not None and not value > 0:
            raise ConfigError(
                f"convert: {name} must be > 0 (found {value!r}). Use a positive number"
                + (" or None for all CPUs." if name == "num_workers" else ".")
            )
    require_empty_output(cfg.output)
    start = time.perf_counter()
    # the input resolved already (offline-graph convert's DataInput) is not listed again
    scan = cfg.data.scan if getattr(cfg, "data", None) is not None else scan_files(cfg.input, cfg.on_error)
    if scan.kind == "transitions":
        raise FormatVersionError(
            f"convert: input {cfg.input} format kind must be 'episodes' (found 'transitions'). "
            "The input is already converted; train from it directly."
        )
    if not scan.files:
        raise FormatVersionError(
            f"convert: input {cfg.input} must hold at least one readable episode file (found "
            f"none; rejected files by reason: {dict(scan.rejected)})."
        )
    return scan, start


def run(scan: FileScan, cfg: Any, spec: Any, map_class: type, schema: pa.Schema) -> ReadStats:
    """read -> map_batches(convert_block) -> write of ``scan`` into ``cfg.output`` with the
    ``map_class`` map step (``spec``: its spec argument); returns the merged block accounting."""
    import ray

    from offline_graph.jobs.sink import OrderedParquetSink

    ctx = ray.data.DataContext.get_current()
    previous = (ctx.execution_options.preserve_order, ctx.op_resource_reservation_enabled)
    ctx.execution_options.preserve_order = True
    # The job is one fused operator: per-operator resource reservation only holds tasks back
    # (measured on 2 CPUs: ~1.1 tasks in flight with it, 2 without).
    ctx.op_resource_reservation_enabled = False
    cpus = cfg.cpus_per_worker
    if cfg.num_workers is not None:
        # Capped by each task's CPU request: a task-pool size would keep Ray Data from fusing
        # the read into the task, and a Data resource limit is not enforced without the
        # reservation turned off above.
        cpus = max(cpus, float(ray.cluster_resources().get("CPU", 1.0)) / cfg.num_workers)
    stats_dir = storage.join(cfg.output, STATS_DIR)
    # read -> convert -> write fuse into one task per input unit (same resources, default
    # retries: a task whose worker died is retried whole and rewrites its own file).
    source = episode_source(scan, cfg.episodes_per_task, cfg.episodes_per_batch)
    ds = ray.data.read_datasource(source, override_num_blocks=max(1, source.num_tasks), num_cpus=cpus)
    ds = ds.map_batches(
        convert_block,
        fn_kwargs={
            "map_class": map_class,
            "spec": spec,
            "gamma": cfg.gamma,
            "on_error": cfg.on_error,
            "stats_dir": stats_dir,
        },
        # One call per read block (episodes_per_batch rows): a batch size here would stop
        # Ray Data from fusing the read into this task.
        batch_size=None,
        batch_format="pyarrow",
        num_cpus=cpus,
    )
    storage.makedirs(cfg.output)  # also when no task writes (input files without rows)
    try:
        # one file per task, its blocks as row groups in order (offline_graph.jobs.sink)
        ds.write_datasink(
            OrderedParquetSink(cfg.output, schema, compression="zstd"), ray_remote_args={"num_cpus": cpus}
        )
    except Exception as err:
        remove(stats_dir)
        reraise_project_error(err)
        raise
    finally:
        ctx.execution_options.preserve_order, ctx.op_resource_reservation_enabled = previous
    total = load_stats(stats_dir)
    remove(stats_dir)
    return total


def report(
    cfg: Any,
    scan: FileScan,
    start: float,
    total: ReadStats,
    counts: dict[str, Any],
    verified: tuple[int, int, int],
    what: str,
    config: dict[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    """Check the output's rows against the accounting (``what``: the name of a row in the
    error), then build and write the report: ``counts`` (the accounting), ``verified`` (rows,
    episodes, bytes of the output), ``config`` and ``extra`` entries."""
    rows, episodes, bytes_out = verified
    bytes_in = sum(scan.sizes[f] if f in scan.sizes else storage.size(f) for f in scan.files)
    seconds = time.perf_counter() - start
    if rows != total.transitions_used:
        raise RuntimeError(
            f"convert: output rows must equal validated {what} {total.transitions_used} "
            f"(found {rows}). A worker's output was lost or duplicated; rerun the job."
        )
    report = {
        "input": storage.absolute(cfg.input),
        "output": storage.absolute(cfg.output),
        **extra,
        "files_in": len(scan.files) + sum(scan.rejected.values()),
        "files_rejected_by_reason": dict(scan.rejected),
        "first_file_error_by_reason": dict(scan.examples),
        **counts,
        "episodes_in": total.episodes_read,
        "transitions_out": rows,
        "episodes_out": episodes,
        "bytes_in": bytes_in,
        "bytes_out": bytes_out,
        "seconds": round(seconds, 3),
        "transitions_per_s": round(rows / seconds, 1) if seconds > 0 else None,
        "gamma": cfg.gamma,
        "on_error": cfg.on_error,
        "format": json.loads(make_metadata("transitions")[b"offline_graph"]),
        "config": config,
    }
    text = json.dumps(report, indent=2, sort_keys=True)
    storage.write_bytes(storage.join(cfg.output, REPORT_NAME), text.encode())
    return report


def settings(cfg: Any, *leave_out: str) -> dict[str, Any]:
    """The report's ``config``: ``cfg``'s fields as ``dataclasses.asdict`` gives them, but
    ``leave_out`` and the resolved input (``data``: no setting, and no JSON)."""
    names = [f.name for f in dataclasses.fields(cfg) if f.name not in {"data", *leave_out}]
    return {name: copy.deepcopy(getattr(cfg, name)) for name in names}


def remove(directory: str) -> None:
    try:
        storage.remove_tree(directory)
    except (OSError, StorageError) as err:  # the job's result does not depend on it
        logger.warning("convert: could not remove %s (%s)", directory, err)
