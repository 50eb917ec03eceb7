"""Local paths and object-storage URIs behind one small set of functions.

A *location* is a local path or any URI that ``pyarrow.fs.FileSystem.from_uri`` resolves
(``s3://``, ``gs://``, ``abfs://``, ``hdfs://``, ``file://``); other schemes go through fsspec
(``pyarrow.fs.FSSpecHandler``) when it is installed. Credentials and endpoints come from the
standard environment variables, read by pyarrow itself (for S3: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``; pyarrow 26 honours
``AWS_ENDPOINT_URL`` in ``from_uri``). Locations this module returns keep the caller's form:
a URI in, URIs out; a local path in, local paths out.

Retries. Every S3 file system the project makes comes from :func:`s3_filesystem` (our reads
and writes, ``convert``'s output files included, RLlib's offline reads and its
checkpoints): a request that fails with an error AWS marks retryable (503 SlowDown and other
throttling, 5xx, a reset or refused connection, a timeout) is sent again, up to
``OFFLINE_GRAPH_S3_MAX_ATTEMPTS`` attempts in all (default 6), with backoff set by
``OFFLINE_GRAPH_S3_RETRY_MODE``: ``standard`` (default; AWS's standard mode, a random wait of up
to 2^k s before retry k, at most 20 s) or ``fast`` (AWS's legacy mode: at once, then 25 ms x 2^k;
for tests and nearby endpoints). The variables are read when a file system is made: set them before
Ray starts so its workers get them. When the attempts run out, our functions raise
:class:`~offline_graph.data.errors.StorageError` naming the URI.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any, Iterator

import pyarrow.fs as pafs

from offline_graph.data.errors import ConfigError, StorageError


def is_uri(location: str) -> bool:
    """Whether ``location`` names a remote file system (``scheme://``, not ``file://``)."""
    return "://" in str(location) and not str(location).startswith("file://")


ATTEMPTS_ENV, MODE_ENV = "OFFLINE_GRAPH_S3_MAX_ATTEMPTS", "OFFLINE_GRAPH_S3_RETRY_MODE"
DEFAULT_ATTEMPTS, DEFAULT_MODE = 6, "standard"
_MODES = {"standard": pafs.AwsStandardS3RetryStrategy, "fast": pafs.AwsDefaultS3RetryStrategy}
_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    ATTEMPTS_ENV,
    MODE_ENV,
)


def retry_policy() -> tuple[str, int]:
    """(backoff mode, attempts in all) from the environment (module docstring)."""
    mode = os.environ.get(MODE_ENV) or DEFAULT_MODE
    text = os.environ.get(ATTEMPTS_ENV) or str(DEFAULT_ATTEMPTS)
    if mode not in _MODES or not text.isdigit() or int(text) < 1:
        raise ConfigError(
            f"storage: {MODE_ENV} must be one of {sorted(_MODES)} and {ATTEMPTS_ENV} an "
            f"integer >= 1 (found {mode!r} and {text!r}). Unset them for the defaults "
            f"({DEFAULT_MODE!r}, {DEFAULT_ATTEMPTS})."
        )
    return mode, int(text)


class RetryingS3FileSystem(pafs.S3FileSystem):
    """pyarrow's S3 file system with a retry strategy that survives pickling (pyarrow's own
    pickles without it, so a Ray worker would get pyarrow's default: 3 attempts)."""

    def __init__(self, retry: tuple[str, int], **options: Any) -> None:
        mode, attempts = retry
        # pyarrow 26 (measured at a proxy): AwsStandardS3RetryStrategy(n) sends n requests,
        # AwsDefaultS3RetryStrategy(n) sends n + 1 (n counts its retries)
        strategy = _MODES[mode](max_attempts=attempts if mode == "standard" else attempts - 1)
        super().__init__(retry_strategy=strategy, **options)
        self.retry = (mode, attempts)

    def __reduce__(self) -> Any:
        return _rebuild, (self.retry, super().__reduce__()[1][0])


def _rebuild(retry: tuple[str, int], options: dict[str, Any]) -> RetryingS3FileSystem:
    return RetryingS3FileSystem(retry, **options)


def s3_filesystem(uri: str, retry: tuple[str, int] | None = None) -> RetryingS3FileSystem:
    """The S3 file system of ``s3://bucket...`` (options from the URI and the environment,
    as ``pyarrow.fs.FileSystem.from_uri`` reads them) with ``retry`` (default:
    :func:`retry_policy`). The one place the project makes S3 file systems."""
    options = pafs.FileSystem.from_uri(uri)[0].__reduce__()[1][0]
    return RetryingS3FileSystem(retry or retry_policy(), **options)


def filesystem(location: str) -> pafs.FileSystem:
    """The (cached) file system of a local path or URI, for libraries that take one (Ray
    Data's ``filesystem=``, RLlib's ``input_filesystem`` and checkpoint ``filesystem``)."""
    return resolve(location)[0]


def target(location: str) -> dict[str, Any]:
    """``path=`` and ``filesystem=`` for a library call taking both (RLlib's ``save_to_path``,
    ``restore_from_path``, ``from_checkpoint``): a URI's path inside its retrying file system;
    a local path made absolute, alone (the library's own local file system)."""
    if not is_uri(location):
        return {"path": absolute(location)}
    fs, path = resolve(location)
    return {"path": path, "filesystem": fs}


@contextlib.contextmanager
def reaching(location: str) -> Iterator[None]:
    """Turns a failed S3 request on URI ``location`` (pyarrow's plain ``OSError`` with "AWS
    Error", after the retries) into :class:`StorageError` naming it; missing files, damaged
    files (e.g. "Couldn't deserialize thrift", also an ``OSError``) and local errors pass."""
    try:
        yield
    except OSError as err:
        if type(err) is not OSError or not is_uri(location) or "AWS Error" not in str(err):
            raise
        mode, attempts = retry_policy()
        found = " ".join(str(err).split())
        raise StorageError(
            f"storage: a request on {location} must succeed within {attempts} attempts "
            f"({MODE_ENV}={mode}) (found OSError: {found}). Check that the endpoint "
            "(AWS_ENDPOINT_URL) is up and reachable and the credentials are valid; "
            f"{ATTEMPTS_ENV} sets the attempts.",
            reason="storage",
        ) from err


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
        if scheme_and_root.startswith("s3://"):
            return s3_filesystem(scheme_and_root)
        return pafs.FileSystem.from_uri(scheme_and_root)[0]
    except ConfigError:
        raise
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
    with reaching(location):
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
    with reaching(location):
        infos = fs.get_file_info(selector)
    for info in infos:
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
    with reaching(location):
        return sorted(info.base_name for info in fs.get_file_info(selector))


def remove_file(location: str) -> None:
    fs, path = resolve(location)
    with reaching(location):
        fs.delete_file(path)


def read_bytes(location: str) -> bytes:
    fs, path = resolve(location)
    with reaching(location), fs.open_input_stream(path) as fh:
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
    with reaching(location), fs.open_output_stream(path) as fh:
        fh.write(data)


def makedirs(location: str) -> None:
    fs, path = resolve(location)
    with reaching(location):
        fs.create_dir(path, recursive=True)


def remove_tree(location: str) -> None:
    """Delete a directory and its contents; nothing if it does not exist."""
    fs, path = resolve(location)
    with reaching(location):
        if fs.get_file_info(path).type == pafs.FileType.Directory:
            fs.delete_dir(path)


def open_input_file(location: str) -> Any:
    """A random-access file (what ``pq.ParquetFile`` / ``pq.read_schema`` take; wrap its
    reads in :func:`reaching` to name the URI when they fail)."""
    fs, path = resolve(location)
    with reaching(location):
        return fs.open_input_file(path)
