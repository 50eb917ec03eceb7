"""The batch conversion job: episode files -> transition rows, every transition exactly once.

``read (episode files) -> map_batches(ConvertEpisodes) -> write_parquet`` on Ray Data, fused
into one task per input unit (whole row groups of one file, ``episodes_per_task`` rows): the
task reads its rows, converts them and writes its own output file, so nothing but file names
crosses the object store. The read is planned on the driver from the footers that
:func:`offline_graph.data.files.scan_files` already checked (:func:`offline_graph.data.files.episode_source`;
Ray Data's ``read_parquet`` would start footer-reading actors for every job). The map step
calls the same decode / validate / transition code as ``GraphOfflinePreLearner``
(:func:`offline_graph.data.reader.read_transitions`) but emits every recorded transition once
instead of replay-sampling. Files are named by task (``transitions-<task>-<n>.parquet``) and
the row order is preserved, so the same input gives the same output bytes, and a retried task
(a killed worker) rewrites the same file instead of adding one.

Skip-mode accounting goes to one small JSON file per input block under the output's
``_block_stats/`` (named by a digest of the block, so a retried block replaces its earlier
report instead of counting twice); the driver merges them into the report and removes the
directory. Whole damaged files (truncated, unknown version, wrong column type) are found
before the job starts (``offline_graph.data.files``).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from offline_graph.data import storage
from offline_graph.jobs import accounting
from offline_graph.data.errors import (
    ConfigError,
    FormatVersionError,
    GraphValidationError,
    reraise_project_error,
)
from offline_graph.data.files import FileScan, scan_files
from offline_graph.jobs.source import episode_source
from offline_graph.data.format import make_metadata
from offline_graph.data.reader import ReadStats, batch_columns, read_transitions
from offline_graph.data.space_text import spec_texts
from offline_graph.data.transitions import transition_schema
from offline_graph.data.validation import EpisodeSpec

logger = logging.getLogger(__name__)
REPORT_NAME = "_conversion_report.json"
"""Side files start with "_" (the Hadoop/Spark convention, as in ``_SUCCESS``): pyarrow, pandas,
Polars, DuckDB and Ray Data then read the output directory as the data set. Directories
converted before 2026-11-23 hold ``conversion_report.json``; our readers list only Parquet
files, so they still read; other readers need that file moved away."""
STATS_DIR = "_block_stats"
"""Per-block accounting files of a running job (inside the output; removed at the end)."""


@dataclass(frozen=True)
class ConvertConfig:
    """Settings of one conversion run."""

    input: str
    """Episode Parquet file or directory."""
    output: str
    """Output directory for transition rows (created; must be empty or absent)."""
    spec: EpisodeSpec
    """Feature sizes and action count the episodes must match."""
    gamma: float = 0.99
    """Discount of the ``value_targets`` column (returns-to-go), stored in the metadata."""
    on_error: Literal["raise", "skip"] = "raise"
    """Bad episodes: stop with an error naming file/row/episode/step, or skip and count."""
    episodes_per_batch: int = 256
    """Episode rows per map call."""
    episodes_per_task: int = 512
    """Episode rows per task (read + convert + write one output file; the retry unit). A
    task covers whole row groups of one input file, so a larger row group makes a larger
    task."""
    num_workers: int | None = None
    """Concurrent tasks at most (None: as many as the cluster's CPUs allow). Enforced by
    raising each task's CPU request to ``cluster CPUs / num_workers`` when that is larger."""
    cpus_per_worker: float = 1.0
    """CPUs per task."""
    source: dict = field(default_factory=dict)
    """Recording facts copied into the output metadata (env, env_config, mask_key, policy,
    seed, epsilon), so training from the rows finds the env the episodes came from. The
    metadata also records the spaces of ``spec`` (``observation_space`` / ``action_space``)."""


class ConvertEpisodes:
    """Ray Data map function: a batch of episode rows -> all of their transitions.

    ``stats_dir``: where each batch's accounting (episodes read / used / rejected by reason)
    goes, as ``<block digest>.json``; a retried batch rewrites its own file, so the totals
    count every block once (no accounting actor: one process fewer to start per job).
    """

    def __init__(self, spec: EpisodeSpec, gamma: float, on_error: str, stats_dir: str | None) -> None:
        self.spec, self.gamma, self.on_error = spec, gamma, on_error
        self.schema = transition_schema(spec)
        self.stats_dir = stats_dir

    def __call__(self, batch: pa.Table) -> pa.Table:
        items, paths = batch_columns(batch)
        stats = ReadStats()
        parts = read_transitions(
            items,
            paths,
            self.spec,
            self.gamma,
            on_error=self.on_error,  # type: ignore[arg-type]
            stats=stats,
        )
        if self.stats_dir is not None:
            _save_stats(self.stats_dir, accounting.block_key(items, paths), stats)
        if not parts:
            return self.schema.empty_table()
        return pa.concat_tables([p.to_arrow().cast(self.schema) for p in parts])


def _save_stats(stats_dir: str, key: str, stats: ReadStats) -> None:
    # atomic (a local rename, an object store's whole-object PUT): a reader sees the old or
    # the new report, never half of one
    body = json.dumps(accounting.to_dict(stats)).encode()
    storage.write_bytes(storage.join(stats_dir, f"{key}.json"), body)


def _load_stats(stats_dir: str) -> ReadStats:
    blocks = [json.loads(storage.read_bytes(f)) for f in storage.list_dir(stats_dir, ".json")]
    return accounting.from_dicts(blocks)


_WORKER_CACHE: dict[tuple, ConvertEpisodes] = {}


def convert_block(
    batch: pa.Table, *, map_class: type, spec: EpisodeSpec, gamma: float, on_error: str, stats_dir: str | None
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


def _start(cfg: Any) -> tuple[FileScan, float]:
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
    existing = storage.list_dir(cfg.output, recursive=True) if storage.is_dir(cfg.output) else []
    if existing:
        raise FileExistsError(
            f"convert: output {cfg.output} must be empty or absent (found "
            f"{len(existing)} entries). Choose a new --output or delete it."
        )
    start = time.perf_counter()
    scan = scan_files(cfg.input, cfg.on_error)
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


def _run(scan: FileScan, cfg: Any, spec: Any, map_class: type, schema: pa.Schema) -> ReadStats:
    """read -> map_batches(convert_block) -> write of ``scan`` into ``cfg.output`` with the
    ``map_class`` map step (``spec``: its spec argument); returns the merged block accounting."""
    import ray
    from ray.data.datasource import FilenameProvider

    class _Names(FilenameProvider):
        def get_filename_for_task(self, write_uuid: str, task_index: int) -> str:
            return f"transitions-{task_index:06d}.parquet"

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
    try:
        _write(ds, cfg.output, _Names(), schema, cpus)
    except Exception as err:
        _remove(stats_dir)
        reraise_project_error(err)
        raise
    finally:
        ctx.execution_options.preserve_order, ctx.op_resource_reservation_enabled = previous
    storage.makedirs(cfg.output)  # input files without rows: no task wrote anything
    total = _load_stats(stats_dir)
    _remove(stats_dir)
    return total


def convert(cfg: ConvertConfig, map_class: type = ConvertEpisodes) -> dict[str, Any]:
    """Run the job; returns (and writes next to the rows) the JSON report.

    ``map_class`` is the map step (a ``ConvertEpisodes`` subclass; tests inject faults).
    """
    scan, start = _start(cfg)
    from offline_graph.data.ma_stats import is_multi_agent_data

    if is_multi_agent_data(scan.files, scan.metadata):  # per-agent spaces; cfg.spec unused
        from offline_graph.jobs.ma_convert import convert_multi_agent, from_convert_config

        return convert_multi_agent(from_convert_config(cfg))
    schema = transition_schema(cfg.spec).with_metadata(
        # the rows record the spaces they were checked against (offline_graph.jobs.spaces)
        make_metadata("transitions", **{**cfg.source, **spec_texts(cfg.spec), "gamma": cfg.gamma})
    )
    total = _run(scan, cfg, cfg.spec, map_class, schema)
    rows, episode_ids, bytes_out = _verify_output(cfg.output)
    config = {k: v for k, v in asdict(cfg).items() if k != "spec"} | {"spec": asdict(cfg.spec)}
    return _report(
        cfg, scan, start, total, total.as_dict(), (rows, episode_ids, bytes_out), "transitions", config
    )


def _report(
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
    bytes_in = sum(storage.size(f) for f in scan.files)
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


def _remove(directory: str) -> None:
    try:
        storage.remove_tree(directory)
    except OSError as err:  # the job's result does not depend on it
        logger.warning("convert: could not remove %s (%s)", directory, err)


def _write(ds: Any, output: str, names: Any, schema: pa.Schema, num_cpus: float) -> None:
    from ray.data._internal.savemode import SaveMode

    ds.write_parquet(
        output,
        filename_provider=names,
        arrow_parquet_args_fn=lambda: {"schema": schema, "compression": "zstd"},
        ray_remote_args={"num_cpus": num_cpus},
        # Names are per write task and the directory was checked empty: a retried task
        # overwrites its own file, never another's.
        mode=SaveMode.OVERWRITE,
    )


def _verify_output(output: str) -> tuple[int, int, int]:
    """(rows, distinct episodes, bytes) of the output; (eps_id, t) must be unique."""
    files = storage.list_dir(output, ".parquet")
    if not files:
        return 0, 0, 0
    tables = []
    for f in files:
        with storage.open_input_file(f) as fh:
            tables.append(pq.read_table(fh, columns=["eps_id", "t"]))
    keys = pa.concat_tables(tables)
    rows = keys.num_rows
    eps = keys.column("eps_id").cast(pa.string())
    pairs = (
        pa.table({"e": eps, "t": keys.column("t"), "n": keys.column("t")})
        .group_by(["e", "t"])
        .aggregate([("n", "count")])
    )
    if pairs.num_rows != rows:
        repeated = pairs.filter(pc.greater(pairs.column("n_count"), 1))
        dup = repeated.column("e")[0].as_py()
        err = GraphValidationError(
            f"convert, output {output}: (eps_id, t) must be unique (found "
            f"{rows - pairs.num_rows} repeated transitions, e.g. of episode {dup!r}). The same "
            "episode id occurs in several input blocks; de-duplicate the input files "
            "(within one block duplicates are skipped/raised like any bad episode).",
            reason="duplicate_id",
        )
        raise err
    return rows, len(pc.unique(eps)), sum(storage.size(f) for f in files)
