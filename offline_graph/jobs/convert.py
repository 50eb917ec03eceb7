"""The batch conversion job: episode files -> transition rows, every transition exactly once.

``read (episode files) -> map_batches(ConvertEpisodes) -> write`` on Ray Data, fused
into one task per input unit (whole row groups of one file, ``episodes_per_task`` rows): the
task reads its rows, converts them and writes its own output file, so nothing but file names
crosses the object store. The read is planned on the driver from the footers that
:func:`offline_graph.data.store.files.scan_files` already checked
(:func:`offline_graph.data.store.files.episode_source`;
Ray Data's ``read_parquet`` would start footer-reading actors for every job). The map step
calls the same decode / validate / transition code as ``GraphOfflinePreLearner``
(:func:`offline_graph.data.episodes.reader.read_transitions`) but emits every recorded transition once
instead of replay-sampling, each episode's final observation on its last row (the
``final_*`` columns; the metadata says ``"final_obs": true``). Files are named by task
(``transitions-<task>-0.parquet``) and each task writes its blocks as row groups in the order
it made them (:class:`offline_graph.jobs.sink.OrderedParquetSink`; Ray Data's
``write_parquet`` may reorder them on a worker with several Arrow threads), so the same input
gives the same output bytes, and a retried task (a killed worker) rewrites the same file
instead of adding one.

Skip-mode accounting goes to one small JSON file per input block under the output's
``_block_stats/`` (named by a digest of the block, so a retried block replaces its earlier
report instead of counting twice); the driver merges them into the report and removes the
directory. Whole damaged files (truncated, unknown version, wrong column type) are found
before the job starts (``offline_graph.data.store.files``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from offline_graph.data.store import storage
from offline_graph.jobs import conversion
from offline_graph.rllib.offline import accounting
from offline_graph.data.errors import (
    GraphValidationError,
)
from offline_graph.data.store.format import make_metadata
from offline_graph.data.episodes.reader import ReadStats, batch_columns, read_transitions
from offline_graph.data.graphs.space_text import spec_texts
from offline_graph.data.learning.transitions import transition_schema
from offline_graph.data.episodes.validation import EpisodeSpec

logger = logging.getLogger(__name__)


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
    data: Any = field(default=None, compare=False, repr=False)
    """``input`` resolved already (:class:`offline_graph.env.data_input.DataInput`, as
    ``offline-graph convert`` makes it): its scan is used, the input is not listed again.
    None: listed and checked here."""


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
            conversion.save_stats(self.stats_dir, accounting.block_key(items, paths), stats)
        if not parts:
            return self.schema.empty_table()
        return pa.concat_tables([p.to_arrow().cast(self.schema) for p in parts])


def convert(cfg: ConvertConfig, map_class: type = ConvertEpisodes) -> dict[str, Any]:
    """Run the job; returns (and writes next to the rows) the JSON report.

    ``map_class`` is the map step (a ``ConvertEpisodes`` subclass; tests inject faults).
    """
    scan, start = conversion.start(cfg)
    from offline_graph.data.analysis.ma_stats import is_multi_agent_data

    multi = cfg.data.multi_agent if cfg.data is not None else is_multi_agent_data(scan, scan.metadata)
    if multi:  # per-agent spaces; cfg.spec unused
        from offline_graph.jobs.ma_convert import convert_multi_agent, from_convert_config

        return convert_multi_agent(from_convert_config(cfg))
    schema = transition_schema(cfg.spec).with_metadata(
        # the rows record the spaces they were checked against (offline_graph.env.data_spaces)
        # final_obs: each episode's final observation rides on its last row (value-based training)
        make_metadata(
            "transitions", **{**cfg.source, **spec_texts(cfg.spec), "gamma": cfg.gamma, "final_obs": True}
        )
    )
    total = conversion.run(scan, cfg, cfg.spec, map_class, schema)
    rows, episode_ids, bytes_out = _verify_output(cfg.output)
    spec = asdict(replace(cfg.spec, globals=None, typed=None))
    if cfg.spec.globals is not None:  # a Dict space's parts, as their text (JSON has no spaces)
        spec["globals"] = spec_texts(cfg.spec)["observation_space"]
    if cfg.spec.typed is not None:  # a typed graph, as its text
        spec["typed"] = cfg.spec.typed.text()
    config = conversion.settings(cfg, "spec") | {"spec": spec}
    return conversion.report(
        cfg, scan, start, total, total.as_dict(), (rows, episode_ids, bytes_out), "transitions", config
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
