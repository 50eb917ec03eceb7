"""On-disk format identity: the kind and version written into every Parquet file's metadata.

Two kinds of files exist:

* ``episodes``: one finished episode per row, column ``item`` holds
  ``msgpack.packb(SingleAgentEpisode.get_state(), default=msgpack_numpy.encode)``
  (exactly what RLlib writes with ``output_write_episodes=True``).
* ``transitions``: one transition per row with ragged Arrow list columns (see
  :mod:`offline_graph.data.learning.transitions`), written by ``offline-graph convert``.

Files written by RLlib itself carry no offline_graph metadata; they are read as ``episodes``
of the current version.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from offline_graph.data.store import storage
from offline_graph.data.errors import FormatVersionError, StorageError, where

FORMAT_VERSION = 1
METADATA_KEY = b"offline_graph"
Kind = Literal["episodes", "transitions"]
KINDS: tuple[str, ...] = ("episodes", "transitions")


def make_metadata(kind: Kind, **extra: Any) -> dict[bytes, bytes]:
    """The Parquet key-value metadata that marks a file as ``kind`` in the current version."""
    body = {"kind": kind, "version": FORMAT_VERSION, **extra}
    return {METADATA_KEY: json.dumps(body, sort_keys=True).encode()}


def episode_file_name(first: int, last: int) -> str:
    """``episodes-<first>-<last>.parquet``: the indices of its first and last episode."""
    return f"episodes-{first:07d}-{last:07d}.parquet"


def write_episode_file(path: str, items: Sequence[bytes], **metadata: Any) -> None:
    """One episode file: column ``item`` (one msgpack episode state per row), zstd, and the
    ``episodes`` metadata of this version plus ``metadata`` (env, spaces, ...)."""
    table = pa.table({"item": pa.array(list(items), pa.binary())})
    meta = make_metadata("episodes", **metadata)
    fs, inner = storage.resolve(path)
    with storage.reaching(path):
        pq.write_table(table.replace_schema_metadata(meta), inner, compression="zstd", filesystem=fs)


def parse_metadata(raw: dict[bytes, bytes] | None, file: str | None = None) -> dict[str, Any]:
    """Read and check offline_graph metadata; files without it are RLlib-written episodes."""
    if not raw or METADATA_KEY not in raw:
        return {"kind": "episodes", "version": FORMAT_VERSION, "foreign": True}
    try:
        meta = json.loads(raw[METADATA_KEY])
    except ValueError as err:
        raise FormatVersionError(
            f"{where(file=file)}: metadata key 'offline_graph' must be JSON "
            f"(found {raw[METADATA_KEY][:40]!r}). The file was not written by offline_graph."
        ) from err
    if not isinstance(meta, dict):
        raise FormatVersionError(
            f"{where(file=file)}: metadata key 'offline_graph' must be a JSON object "
            f"(found {type(meta).__name__}: {str(meta)[:40]!r}). The file was not written by offline_graph."
        )
    check_metadata(meta, file)
    return dict(meta)


def check_metadata(meta: dict[str, Any], file: str | None = None) -> None:
    """Refuse kinds and versions this reader cannot read."""
    kind, version = meta.get("kind"), meta.get("version")
    if kind not in KINDS:
        raise FormatVersionError(
            f"{where(file=file)}: format kind must be one of {list(KINDS)} (found {kind!r}). "
            "Re-record the data with `offline-graph record` or convert it."
        )
    if version != FORMAT_VERSION:
        raise FormatVersionError(
            f"{where(file=file)}: format version must be {FORMAT_VERSION} (found {version!r}). "
            f"This offline_graph reads version {FORMAT_VERSION} only; re-record the episodes "
            "with this version's `offline-graph record`, or read them with the offline_graph "
            f"release that wrote version {version!r} and convert them."
        )


def read_file_metadata(path: str) -> dict[str, Any]:
    """The checked offline_graph metadata of one Parquet file."""
    meta, fh = open_with_metadata(path)
    fh.close()
    return meta


def open_with_metadata(path: str) -> tuple[dict[str, Any], Any]:
    """(:func:`read_file_metadata`, the file opened to read it): the caller reads on and
    closes it, so that a file is opened once for its metadata and its rows."""
    fh = None
    try:
        with storage.reaching(path):
            fh = storage.open_input_file(path)
            schema = pq.read_schema(fh)
    except StorageError:
        if fh is not None:
            fh.close()
        raise
    except Exception as err:  # pyarrow raises several types for damaged files
        if fh is not None:
            fh.close()
        raise FormatVersionError(
            f"{where(file=path)}: file must be a readable Parquet file (found {err}). "
            "The file is truncated or not Parquet; re-record or re-convert it."
        ) from err
    try:
        return parse_metadata(schema.metadata, path), fh
    except BaseException:
        fh.close()
        raise
