"""Local paths and object-storage URIs behind one small set of functions.

A *location* is a local path or any URI that ``pyarrow.fs.FileSystem.from_uri`` resolves
(``s3://``, ``gs://``, ``abfs://``, ``hdfs://``, ``file://``); other schemes go through fsspec
(``pyarrow.fs.FSSpecHandler``) when it is installed. Credentials and endpoints come from the
standard environment variables, read by pyarrow itself (for S3: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``; pyarrow 26 honours
``AWS_ENDPOINT_URL`` in ``from_uri``). Locations this module returns keep the caller's form:
a URI in, URIs out; a local path in, local paths out.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import pyarrow.fs as pafs

from offline_graph.data.errors import ConfigError


def is_uri(location: str) -> bool:
    """Whether ``location`` names a remote file system (``scheme://``, not ``file://``)."""
    return "://" in str(location) and not str(location).startswith("file://")


_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")


def uri_names(inputs: Any) -> dict[str, str]:
    """Ray Data names a file in object storage by its path without the scheme (``bucket/key``):
    that name -> the URI given in ``inputs`` (a location or a list), so messages name the URI."""
    given = inputs if isinstance(inputs, (list, tuple)) else [inputs]
    return {str(u).split("://", 1)[1]: str(u) for u in given if is_uri(str(u))}


def _bucket_file_systems() -> tuple[type, ...]:
    """File systems whose path is the URI without its scheme (``bucket/key``)."""
    found: list[type] = [pafs.PyFileSystem]
    for name in ("S3FileSystem", "GcsFileSystem"):
        try:
            found.append(getattr(pafs, name))
        except (AttributeError, ImportError):  # pyarrow built without it
            pass
    return tuple(found)


_BUCKET_FS = _bucket_file_systems()


@functools.lru_cache(maxsize=32)
def _filesystem(scheme_and_root: str, env: tuple) -> pafs.FileSystem:
    """One file system per bucket/host and credentials (``env``: the variables it was made
    with, so a changed environment makes a new one)."""
    try:
        return pafs.FileSystem.from_uri(scheme_and_root)[0]
    except Exception as err:  # an unknown scheme: try fsspec before giving up
        try:
            import fsspec

            fs = fsspec.filesystem(scheme_and_root.split("://", 1)[0])
        except Exception:
            raise ConfigError(
                f"storage: URI {scheme_and_root!r} must name a file system pyarrow or fsspec "
                f"resolves (found {type(err).__name__}: {err}). Check the scheme and the "
                "credentials in the environment (for S3: AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL)."
            ) from err
        return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


def resolve(location: str) -> tuple[pafs.FileSystem, str]:
    """(file system, path inside it) of a local path or URI."""
    location = str(location)
    if not is_uri(location):
        if location.startswith("file://"):
            location = location[len("file://") :]
        return pafs.LocalFileSystem(), os.path.abspath(location)
    scheme, rest = location.split("://", 1)
    root = rest.split("/", 1)[0]
    fs = _filesystem(f"{scheme}://{root}", tuple(os.environ.get(k) for k in _ENV))
    if isinstance(fs, _BUCKET_FS):
        return fs, rest.split("?", 1)[0]
    return fs, pafs.FileSystem.from_uri(location)[1]


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for a local path or a URI."""
    if not is_uri(base):
        return os.path.join(base, *parts)
    return "/".join([str(base).rstrip("/"), *(p.strip("/") for p in parts)])


def absolute(location: str) -> str:
    """A URI as given; a local path made absolute."""
    return str(location) if is_uri(location) else os.path.abspath(location)


def _info(location: str) -> pafs.FileInfo:
    fs, path = resolve(location)
    return fs.get_file_info(path)


def exists(location: str) -> bool:
    return _info(location).type != pafs.FileType.NotFound


def is_dir(location: str) -> bool:
    return _info(location).type == pafs.FileType.Directory


def size(location: str) -> int:
    """Bytes of one file."""
    return int(_info(location).size or 0)


def list_dir(location: str, suffix: str = "", recursive: bool = False) -> list[str]:
    """Sorted files under directory ``location`` whose names end with ``suffix`` (in the
    caller's form: URIs under a URI, paths under a path); [] if it does not exist. Hidden
    names (``.x``) are left out, files and directories, as ``glob`` does."""
    fs, path = resolve(location)
    selector = pafs.FileSelector(path, allow_not_found=True, recursive=recursive)
    found = []
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File or not info.base_name.endswith(suffix):
            continue
        # the part below ``path`` (some fsspec file systems answer "/bucket/..." for "bucket")
        rel = info.path.strip("/")[len(path.strip("/")) :].lstrip("/").split("/")
        if not any(part.startswith(".") for part in rel):
            found.append(join(str(location), *rel))
    return sorted(found)


def entries(location: str) -> list[str]:
    """Sorted names (files and directories) directly inside directory ``location``."""
    fs, path = resolve(location)
    selector = pafs.FileSelector(path, allow_not_found=True)
    return sorted(info.base_name for info in fs.get_file_info(selector))


def remove_file(location: str) -> None:
    fs, path = resolve(location)
    fs.delete_file(path)


def read_bytes(location: str) -> bytes:
    fs, path = resolve(location)
    with fs.open_input_stream(path) as fh:
        return bytes(fh.read())


def write_bytes(location: str, data: bytes) -> None:
    """Write one whole file. Atomic for readers: local files via a temporary file and a
    rename; object stores publish an object only when its upload completes."""
    fs, path = resolve(location)
    if not is_uri(location):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return
    with fs.open_output_stream(path) as fh:
        fh.write(data)


def makedirs(location: str) -> None:
    fs, path = resolve(location)
    fs.create_dir(path, recursive=True)


def remove_tree(location: str) -> None:
    """Delete a directory and its contents; nothing if it does not exist."""
    fs, path = resolve(location)
    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)


def open_input_file(location: str) -> Any:
    """A random-access file (what ``pq.ParquetFile`` / ``pq.read_schema`` take)."""
    fs, path = resolve(location)
    return fs.open_input_file(path)
