"""Input files: list them, and check each one's readability, format and schema up front.

Whole-file damage (a truncated Parquet file, an unknown format version, a wrong column type)
is found here, before Ray Data reads anything, so that ``raise`` mode stops with the file
named and ``skip`` mode drops the file and counts it, never a failure deep in a Ray worker.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from offline_graph.data.errors import (
    ConfigError,
    FormatVersionError,
    OfflineGraphError,
    SchemaError,
    StorageError,
    where,
)
from offline_graph.data.store import storage
from offline_graph.data.store.format import open_with_metadata, parse_metadata

REQUIRED: dict[str, dict[str, tuple[pa.DataType, ...] | None]] = {
    "episodes": {"item": (pa.binary(), pa.large_binary())},
    "transitions": {"actions": None, "x": None, "edge_index": None},
}


@dataclass
class FileScan:
    """Usable files of one kind, and the files rejected (skip mode) by reason."""

    kind: str | None
    files: list[str]
    metadata: dict = field(default_factory=dict)
    """The offline_graph metadata of the first usable file."""
    rejected: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    row_groups: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """Per usable file, its row groups' (rows, uncompressed bytes) from the footer."""
    sizes: dict[str, int] = field(default_factory=dict)
    """Per usable file, its bytes (from the file opened for the footer)."""
    _first: FirstRows | None = field(default=None, repr=False, compare=False)

    def first_rows(self) -> FirstRows:
        """The ``item`` rows of the usable files from the first on, each file opened at most
        once however many readers ask (the multi-agent probe, space inference)."""
        if self._first is None:
            self._first = FirstRows(self.files)
        return self._first


class FirstRows:
    """``(file index, path, item)`` of ``files`` in order, read batch by batch (``batch_rows``
    rows) only as far as a reader goes, and kept: a second reader reads no file again."""

    def __init__(self, files: Sequence[str], batch_rows: int = 64) -> None:
        self.files, self.batch_rows = list(files), batch_rows
        self._kept: list[tuple[int, str, Any]] = []
        self._current: Iterator[tuple[int, str, Any]] | None = None
        self._next_file = 0

    def seed(self, path: str, items: Sequence[Any], whole: bool) -> None:
        """The first ``items`` of the next file, ``path``, read already (``whole``: all of
        its rows): kept, so that no reader opens the file for them."""
        index = self._next_file
        if self._current is not None or index >= len(self.files) or self.files[index] != path:
            return  # rows are kept in file order only
        self._kept.extend((index, path, item) for item in items)
        self._next_file += 1
        if not whole:  # the rest of the file, opened only if a reader goes on
            self._current = itertools.islice(self._file_rows(index), len(items), None)

    def _file_rows(self, index: int) -> Iterator[tuple[int, str, Any]]:
        path = self.files[index]
        with storage.open_input_file(path) as fh:  # a local path or a URI
            for batch in pq.ParquetFile(fh).iter_batches(batch_size=self.batch_rows, columns=["item"]):
                for item in batch.column(0).to_pylist():
                    yield index, path, item

    def rows(self, max_files: int | None = None) -> Iterator[tuple[int, str, Any]]:
        """The rows of the first ``max_files`` files (None: all); no later file is opened."""
        last = len(self.files) if max_files is None else min(len(self.files), max_files)
        position = 0
        while True:
            if position < len(self._kept):
                if self._kept[position][0] >= last:
                    return
                yield self._kept[position]
                position += 1
                continue
            if self._current is None:
                if self._next_file >= last:
                    return
                self._current = self._file_rows(self._next_file)
                self._next_file += 1
            row = next(self._current, None)
            if row is None:
                self._current = None
                continue
            self._kept.append(row)


def sample_rows(
    files: Sequence[str] | FileScan,
    decode: Callable[[Any, str], Any],
    limit: int,
    max_files: int,
    skip: type[Exception] = OfflineGraphError,
) -> tuple[list[Any], int]:
    """Up to ``limit`` rows that ``decode(item, path)`` decodes (rows it refuses with ``skip``
    are passed over: validation names and counts them later) of the first ``max_files``
    files; (decoded rows, files read). A
    :class:`FileScan` reads through its :meth:`FileScan.first_rows` (each file opened once)."""
    rows = files.first_rows() if isinstance(files, FileScan) else FirstRows(files, limit)
    names = files.files if isinstance(files, FileScan) else list(files)
    out: list[Any] = []
    for index, path, item in rows.rows(max_files):
        try:
            out.append(decode(item, path))
        except skip:
            continue
        if len(out) >= limit:
            return out, index + 1
    return out, min(len(names), max_files)


def list_files(input_: Any) -> list[str]:
    """Parquet files under ``input_`` (paths, dirs or URIs such as ``s3://bucket/dir``; a
    directory is listed recursively), sorted per input; URIs stay URIs."""
    if isinstance(input_, (str, bytes, os.PathLike)):
        paths = [input_]
    elif isinstance(input_, Iterable) and not isinstance(input_, Mapping):
        paths = list(input_)  # a list, a tuple, a generator of paths
    else:
        raise ConfigError(
            f"input: data must be a path, a URI or a list of them (found {type(input_).__name__} "
            f"{input_!r:.80}). Pass episode files or directories."
        )
    files: list[str] = []
    for p in map(str, paths):
        if storage.is_dir(p):
            files += storage.list_dir(p, ".parquet", recursive=True)
        elif storage.exists(p):
            files.append(p)
        else:
            raise ConfigError(
                f"input: path must exist (found {p!r} missing). Record episodes with "
                "`offline-graph record` or point the input at a Parquet file or directory."
            )
    return files


def check_file(
    path: str, row_groups: list[tuple[int, int]] | None = None, sizes: dict[str, int] | None = None
) -> dict[str, Any]:
    """Metadata of one file after checking it opens, its format and its required columns;
    ``row_groups`` (a list) receives the footer's (rows, uncompressed bytes) per row group,
    ``sizes`` (a dict) the file's bytes."""
    try:
        with storage.reaching(path), storage.open_input_file(path) as fh:
            parquet = pq.ParquetFile(fh)
            footer = parquet.metadata  # the footer must be complete
            schema = parquet.schema_arrow
            if sizes is not None:
                sizes[path] = int(fh.size())
        if row_groups is not None:
            row_groups.extend(
                (footer.row_group(g).num_rows, footer.row_group(g).total_byte_size)
                for g in range(footer.num_row_groups)
            )
    except StorageError:
        raise  # the storage failed, not the file: never counted as a rejected file
    except Exception as err:  # pyarrow raises several types for damaged files
        raise FormatVersionError(
            f"{where(file=path)}: file must be a complete Parquet file (found {type(err).__name__}: "
            f"{err}). The file is truncated or not Parquet; re-record or re-convert it.",
            reason="unreadable_file",
        ) from err
    try:
        meta = parse_metadata(schema.metadata, path)
    except FormatVersionError as err:
        raise FormatVersionError(str(err), reason="format_version") from err
    check_columns(path, meta, schema)
    return meta


def check_columns(path: str, meta: dict[str, Any], schema: pa.Schema) -> None:
    """SchemaError unless ``schema`` has the columns (and types) files of ``meta``'s kind need."""
    typed = any(n.startswith("x:") for n in schema.names)  # a typed graph's rows: x:<type>, ...
    for name, types in REQUIRED[meta["kind"]].items():
        if name not in schema.names and not (typed and name in ("x", "edge_index")):
            raise SchemaError(
                f"{where(file=path, column=name)}: column must be present in {meta['kind']} "
                f"files (found columns {schema.names}). The file was written by another tool.",
                reason="schema",
            )
        if types and schema.field(name).type not in types:
            raise SchemaError(
                f"{where(file=path, column=name)}: column type must be binary (found "
                f"{schema.field(name).type}). Episode rows hold msgpack bytes.",
                reason="schema",
            )


def scan_files(input_: Any, on_error: Literal["raise", "skip"] = "raise") -> FileScan:
    """Check every input file (local or URI); in skip mode bad files are dropped and counted."""
    scan = FileScan(kind=None, files=[])
    kinds: dict[str, str] = {}
    for path in list_files(input_):
        try:
            groups: list[tuple[int, int]] = []
            meta = check_file(path, groups, scan.sizes)
            kinds[path] = meta["kind"]
            scan.row_groups[path] = groups
            if not scan.metadata:
                scan.metadata = meta
        except OfflineGraphError as err:
            if on_error == "raise" or isinstance(err, StorageError):
                raise  # a storage failure is no property of the file: never skipped
            reason = err.reason or "unreadable_file"
            scan.rejected[reason] += 1
            scan.examples.setdefault(reason, str(err))
            continue
        scan.files.append(path)
    found = set(kinds.values())
    if len(found) > 1:
        raise ConfigError(
            f"input: all files must be of one kind (found {sorted(found)}). Train from episode "
            "files or from converted transition rows, not both."
        )
    scan.kind = found.pop() if found else None
    return scan


def scan_input(input_: Any, on_error: Literal["raise", "skip"] = "raise") -> FileScan:
    """The scan of ``input_``: a :class:`FileScan` as is; an input resolved already (anything
    with a ``scan``, e.g. :class:`offline_graph.env.data_input.DataInput`) its scan; else
    :func:`scan_files` of the location now."""
    if isinstance(input_, FileScan):
        return input_
    scan = getattr(input_, "scan", None)
    return scan if isinstance(scan, FileScan) else scan_files(input_, on_error)


def input_location(input_: Any) -> Any:
    """The location an input was given as (a resolved input's ``location``; else itself)."""
    return getattr(input_, "location", input_)


def read_episode_table(file: str) -> tuple[dict[str, Any], pa.Table]:
    """The metadata and the table of an episode ``file`` for inspect (the file opened once);
    raises if the file is not of kind ``episodes`` or has no ``item`` column."""
    return episode_table(file, *open_with_metadata(file))


def episode_table(file: str, meta: dict[str, Any], fh: Any) -> tuple[dict[str, Any], pa.Table]:
    """:func:`read_episode_table` of ``file`` opened already (``meta``, ``fh``:
    :func:`~offline_graph.data.store.format.open_with_metadata`'s answer); closes ``fh``."""
    with fh:
        if meta.get("kind") != "episodes":
            raise FormatVersionError(
                f"{where(file=file)}: file kind must be 'episodes' (found {meta.get('kind')!r}). "
                "inspect reads recorded episode files; inspect the episodes a transition "
                "file was converted from instead."
            )
        table = pq.read_table(fh)
    if "item" not in table.column_names:
        raise SchemaError(
            f"{where(file=file)}: column 'item' must be present (found columns "
            f"{table.column_names}). Episode files hold one msgpack episode per row in "
            "column 'item'."
        )
    return meta, table


class ScanBuilder:
    """A :class:`FileScan` made from files a command reads whole anyway (``inspect``), as
    :func:`scan_files` would make it, without opening them again: :meth:`add` each file's
    metadata and schema in order, then :meth:`done`. ``error``: the first unusable file's
    error (``raise`` mode, where :func:`scan_files` raises it). The first ``keep`` rows read
    become the scan's kept first rows (:meth:`FileScan.first_rows`: space inference)."""

    def __init__(self, on_error: Literal["raise", "skip"], keep: int = 64) -> None:
        self.scan = FileScan(kind=None, files=[])
        self.on_error = on_error
        self.error: OfflineGraphError | None = None
        self.keep = keep
        self._seeds: list[tuple[str, Sequence[Any], bool]] = []

    def done(self) -> FileScan:
        """The scan, its first rows kept."""
        rows = self.scan.first_rows()
        for path, items, whole in self._seeds:
            rows.seed(path, items, whole)
        self._seeds = []
        return self.scan

    def add(self, path: str, meta: dict[str, Any], schema: pa.Schema, items: Sequence[Any] = ()) -> None:
        try:
            check_columns(path, meta, schema)
        except OfflineGraphError as err:
            if self.on_error == "raise":
                self.error = self.error or err
            else:
                self.scan.rejected[err.reason or "unreadable_file"] += 1
                self.scan.examples.setdefault(err.reason or "unreadable_file", str(err))
            return
        kept = sum(len(seed[1]) for seed in self._seeds)
        if kept < self.keep and len(self._seeds) == len(self.scan.files):
            self._seeds.append((path, items[: self.keep - kept], len(items) <= self.keep - kept))
        self.scan.files.append(path)
        self.scan.metadata = self.scan.metadata or meta
        self.scan.kind = meta["kind"]
