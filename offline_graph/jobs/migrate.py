"""The migration job: old padded ``Repeated`` transition files -> our ragged episode files.

In-process, no Ray: one pass over the input files in sorted order, ``batch_rows`` rows at a
time (:mod:`offline_graph.jobs.old_rows`); each batch is unpadded and checked
(:mod:`offline_graph.data.migration.migrate`), its rows join their open episodes, and every episode that
completes (:mod:`offline_graph.data.migration.migrate_episodes`) is encoded at once with RLlib's own
episode state (:func:`offline_graph.rllib.offline.episodes.encode_episode`) and buffered until
``episodes_per_file`` of them are written as ``episodes-<first>-<last>.parquet``, the file
``offline-graph record`` writes (same ``item`` column, zstd, ``make_metadata("episodes")``).
Memory holds one batch of padded vectors, the open episodes' unpadded graphs and one output
file's encoded episodes, whatever the input size.

The report (``_migration_report.json`` in the output, leading underscore so that readers of
the directory see only the episode files) counts episodes and transitions, input and output
file bytes, and the padding removed: ``padded_payload_bytes`` = migrated observations (T+1 per
episode) x flat size x 4 (float32, as RLlib's preprocessor held them) over
``unpadded_payload_bytes`` = the same observations as stored now (x float32, edge_index int64,
edge_attr float32; :func:`offline_graph.data.analysis.stats.graph_bytes`).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium as gym
import pyarrow as pa

from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError, FormatVersionError, OfflineGraphError, StorageError, where
from offline_graph.data.store.format import episode_file_name, write_episode_file
from offline_graph.data.migration.migrate import RepeatedLayout, layout_from_space
from offline_graph.data.migration.migrate_episodes import Assembler, MigratedEpisode, OnError
from offline_graph.data.graphs.space_text import graph_space, space_text
from offline_graph.data.graphs.spaces import selection_level
from offline_graph.data.analysis.stats import graph_bytes
from offline_graph.jobs.old_rows import list_inputs, read_batches

REPORT_NAME = "_migration_report.json"


@dataclass(frozen=True)
class MigrateConfig:
    """Settings of one migration run."""

    input: str
    """An old transition file (Parquet or JSON lines) or a directory of them."""
    output: str
    """Directory for the episode files (created; must be new or empty)."""
    observation_space: Any
    """The ``Dict`` of ``Repeated`` spaces the rows were padded with."""
    action_space: gym.Space | None = None
    """Checks the actions when given (else any non-negative integer; the report then names
    ``Discrete(largest action + 1)``)."""
    on_error: OnError = "raise"
    """raise: stop at the first bad row; skip: drop its episode and count it by reason."""
    episodes_per_file: int = 100
    """At most this many episodes per output file."""
    batch_rows: int = 4096
    """Input rows read and unpadded at a time."""
    observation_space_name: str = ""
    """``module:NAME`` the space came from (stored in the metadata)."""


def load_space(spec: str) -> Any:
    """``module:NAME`` -> the module attribute (the current directory is importable, as with
    ``python -m``)."""
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ConfigError(
            f"migrate: --observation-space must be module:NAME (found {spec!r}). NAME "
            "is a module attribute holding the Dict of Repeated spaces."
        )
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(
            f"migrate: --observation-space {spec!r} must name an importable module "
            f"attribute (found {type(err).__name__}: {err}). Run from the directory "
            "that holds the module, or install it."
        ) from None


def check_layout(space: Any, layout: RepeatedLayout) -> None:
    """Cross-check :func:`layout_from_space` with RLlib's own preprocessor size."""
    try:
        from ray.rllib.models.preprocessors import get_preprocessor
    except ImportError:  # the layout was derived without Ray; nothing to compare with
        return
    size = int(get_preprocessor(space)(space).size)
    if size != layout.size:
        raise ConfigError(
            f"migrate: --observation-space flat size must equal RLlib's preprocessor "
            f"size {size} (found {layout.size}). The space has parts this migration "
            "does not know."
        )


class EpisodeFiles:
    """Buffers encoded episodes; writes ``episodes-<first>-<last>.parquet`` files like record."""

    def __init__(self, output: str, per_file: int, metadata: dict[str, Any]) -> None:
        self.output, self.per_file, self.metadata = output, per_file, metadata
        self.items: list[bytes] = []
        self.files: list[str] = []
        self.count = 0

    def add(self, item: bytes) -> None:
        self.items.append(item)
        if len(self.items) >= self.per_file:
            self.flush()

    def flush(self) -> None:
        if not self.items:
            return
        first, last = self.count, self.count + len(self.items) - 1
        path = storage.join(self.output, episode_file_name(first, last))
        write_episode_file(path, self.items, **self.metadata)
        self.files.append(path)
        self.count += len(self.items)
        self.items = []


def prepare_output(output: str) -> None:
    is_dir = storage.is_dir(output)
    if storage.exists(output) and (not is_dir or storage.entries(output)):
        raise ConfigError(
            f"migrate: --output must be a new or empty directory (found {output} "
            f"{'a file' if not is_dir else 'not empty'}). Choose another "
            "directory."
        )
    storage.makedirs(output)


def _action_limits(space: gym.Space | None) -> tuple[str | None, int | None]:
    """(selection level, K or MAX) of ``--action-space`` for the Assembler's action checks."""
    if space is None:
        return None, None
    if not isinstance(space, gym.spaces.Discrete):
        raise ConfigError(
            f"migrate: --action-space must be discrete:K, node:MAX or edge:MAX (found {space!r}). "
            "Only scalar actions are migrated."
        )
    return selection_level(space), int(space.n)


class _Tally:
    """Encodes completed episodes into the writer and counts them."""

    def __init__(self, layout: RepeatedLayout, writer: EpisodeFiles) -> None:
        from offline_graph.rllib.offline.episodes import encode_episode

        self.encode, self.layout, self.writer = encode_episode, layout, writer
        self.totals: Counter[str] = Counter()

    def emit(self, episodes: list[MigratedEpisode]) -> None:
        feat, edim = self.layout.num_features, self.layout.edge_dim
        for ep in episodes:
            item = self.encode(
                ep.observations,
                ep.actions,
                ep.rewards,
                terminated=ep.terminated,
                truncated=ep.truncated,
                episode_id=ep.id,
            )
            self.writer.add(item)
            counts = self.totals
            counts["episodes"] += 1
            counts["transitions"] += len(ep.actions)
            counts["observations"] += len(ep.observations)
            counts["unpadded"] += sum(
                graph_bytes(o["x"].shape[0], o["edge_index"].shape[1], feat, edim) for o in ep.observations
            )
            counts["max_action"] = max(counts["max_action"], max(ep.actions))
            counts["terminated"] += int(ep.terminated)
            counts["truncated"] += int(ep.truncated)


def migrate(cfg: MigrateConfig, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run the migration (module docstring); returns the report, also written to the output.
    A run that raises removes the episode files it wrote (and the output directory it made)."""
    start = time.perf_counter()
    layout = layout_from_space(cfg.observation_space)
    check_layout(cfg.observation_space, layout)
    level, num_actions = _action_limits(cfg.action_space)
    inputs = list_inputs(cfg.input)
    created = not storage.exists(cfg.output)
    prepare_output(cfg.output)
    obs_text = space_text(graph_space(layout.num_features, layout.edge_dim))
    meta: dict[str, Any] = {
        "source": "migrate",
        "observation_space": obs_text,
        "migrated_from": cfg.observation_space_name or "Dict of Repeated",
    }
    if cfg.action_space is not None:
        meta["action_space"] = space_text(cfg.action_space)
    writer = EpisodeFiles(cfg.output, cfg.episodes_per_file, meta)
    tally = _Tally(layout, writer)
    assembler = Assembler(layout, cfg.on_error, level, num_actions)
    files_rejected: Counter[str] = Counter()
    examples: dict[str, str] = {}
    ignored: set[str] = set()
    done_column = "terminateds"
    try:
        for path in inputs:
            try:
                with storage.reaching(path):  # a storage failure is no damaged file
                    for batch in read_batches(path, layout.size, cfg.batch_rows, ignored):
                        done_column = batch.done_column
                        tally.totals["rows_read"] += len(batch.rows)
                        tally.emit(assembler.add(batch))
                        if progress is not None:
                            progress(len(batch.rows))
            except OfflineGraphError as err:
                if cfg.on_error == "raise" or isinstance(err, (ConfigError, StorageError)):
                    raise
                files_rejected[err.reason or "unreadable_file"] += 1
                examples.setdefault(err.reason or "unreadable_file", str(err))
            except (pa.ArrowException, OSError) as err:  # a damaged file: pyarrow's own errors
                message = (
                    f"{where(file=path)}: file must be readable Parquet or JSON lines (found "
                    f"{type(err).__name__}: {err}). The file is damaged or not an RLlib recording."
                )
                if cfg.on_error == "raise":
                    raise FormatVersionError(message, reason="unreadable_file") from err
                files_rejected["unreadable_file"] += 1
                examples.setdefault("unreadable_file", message)
        tally.emit(assembler.finish(done_column))
        writer.flush()
    except BaseException:
        for path in writer.files:
            storage.remove_file(path)
        if created and not storage.entries(cfg.output):
            storage.remove_tree(cfg.output)
        raise
    seconds = time.perf_counter() - start
    totals = tally.totals
    padded = totals["observations"] * layout.size * 4
    report = {
        "input": cfg.input,
        "output": cfg.output,
        "files_in": len(inputs),
        "files_out": len(writer.files),
        **{
            k: totals[k]
            for k in ("episodes", "transitions", "observations", "terminated", "truncated", "rows_read")
        },
        "episodes_rejected": sum(assembler.rejected.values()),
        "rejected_by_reason": dict(sorted(assembler.rejected.items())),
        "transitions_rejected": assembler.transitions_rejected,
        "files_rejected_by_reason": dict(sorted(files_rejected.items())),
        "first_error_by_reason": {**assembler.examples, **examples},
        "bytes_before": sum(storage.size(p) for p in inputs),
        "bytes_after": sum(storage.size(p) for p in writer.files),
        "padded_payload_bytes": padded,
        "unpadded_payload_bytes": totals["unpadded"],
        "padding_factor": padded / totals["unpadded"] if totals["unpadded"] else None,
        "layout": layout.describe(),
        "observation_space": obs_text,
        "action_space": meta.get("action_space") or f"discrete:{totals['max_action'] + 1}",
        "columns_not_migrated": sorted(ignored),
        "seconds": seconds,
        "transitions_per_s": totals["rows_read"] / seconds if seconds > 0 else None,
    }
    storage.write_bytes(storage.join(cfg.output, REPORT_NAME), json.dumps(report, indent=2).encode())
    return report
