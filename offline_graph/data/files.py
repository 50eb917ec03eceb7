"""Input files: list them, and check each one's readability, format and schema up front.

Whole-file damage (a truncated Parquet file, an unknown format version, a wrong column type)
is found here, before Ray Data reads anything, so that ``raise`` mode stops with the file
named and ``skip`` mode drops the file and counts it, never a failure deep in a Ray worker.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
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
from offline_graph.data import storage
from offline_graph.data.format import parse_metadata, read_file_metadata

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


def check_file(path: str, row_groups: list[tuple[int, int]] | None = None) -> dict[str, Any]:
    """Metadata of one file after checking it opens, its format and its required columns;
    ``row_groups`` (a list) receives the footer's (rows, uncompressed bytes) per row group."""
    try:
        with storage.reaching(path), storage.open_input_file(path) as fh:
            parquet = pq.ParquetFile(fh)
            footer = parquet.metadata  # the footer must be complete
            schema = parquet.schema_arrow
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
    for name, types in REQUIRED[meta["kind"]].items():
        if name not in schema.names:
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
    return meta


def scan_files(input_: Any, on_error: Literal["raise", "skip"] = "raise") -> FileScan:
    """Check every input file (local or URI); in skip mode bad files are dropped and counted."""
    scan = FileScan(kind=None, files=[])
    kinds: dict[str, str] = {}
    for path in list_files(input_):
        try:
            groups: list[tuple[int, int]] = []
            meta = check_file(path, groups)
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


def read_episode_table(file: str) -> tuple[dict[str, Any], pa.Table]:
    """The metadata and the table of an episode ``file`` for inspect; raises if the file is
    not of kind ``episodes`` or has no ``item`` column."""
    meta = read_file_metadata(file)
    if meta.get("kind") != "episodes":
        raise FormatVersionError(
            f"{where(file=file)}: file kind must be 'episodes' (found {meta.get('kind')!r}). "
            "inspect reads recorded episode files; inspect the episodes a transition "
            "file was converted from instead."
        )
    with storage.open_input_file(file) as fh:
        table = pq.read_table(fh)
    if "item" not in table.column_names:
        raise SchemaError(
            f"{where(file=file)}: column 'item' must be present (found columns "
            f"{table.column_names}). Episode files hold one msgpack episode per row in "
            "column 'item'."
        )
    return meta, table
