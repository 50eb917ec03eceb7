"""Readers of RLlib's old transition files: Parquet and JSON lines -> :class:`OldBatch` es.

Two row shapes are read, in either format (told apart by the ``rewards`` column):

* one transition per row / line (``obs`` a flat float list, ``rewards`` a number), as RLlib's
  ``output_write_episodes=False`` writers and ``ray.data`` exports of ``SampleBatch`` rows write;
* one ``SampleBatch`` per row / line (every column a list over the batch, ``"type":
  "SampleBatch"``), what the old ``JsonWriter`` (``output="/path"``) and ``DatasetWriter``
  (``output="dataset"``) wrote; its transitions get the row (line) number of their batch.

``obs`` / ``new_obs`` may be plain lists of numbers, or the strings RLlib's ``compress_columns``
made (``base64(lz4.frame(pickle(ndarray)))``, written whenever the ``lz4`` package was
installed): those are decoded when ``lz4`` is installed here, through an unpickler that only
rebuilds numpy arrays (any other pickled object is refused, so a file cannot run code).
``MultiAgentBatch`` lines and observation columns that are not flat vectors (``struct``: the new
API stack's raw dict observations) are refused with a SchemaError naming the file.
JSON is read by ``pyarrow.json`` in blocks (the first line sets the block size), Parquet in
``batch_rows`` slices: memory holds one batch of padded vectors at a time.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError, SchemaError, where
from offline_graph.data.migration.migrate import Problem, dense_vectors
from offline_graph.data.migration.migrate_episodes import OldBatch

SUFFIXES = (".parquet", ".json", ".jsonl")
REQUIRED = ("obs", "new_obs", "actions", "rewards", "eps_id", "t")
USED = set(REQUIRED) | {"terminateds", "truncateds", "dones"}
NOT_CARRIED = {"type", "agent_index", "unroll_id", "infos", "agent_id", "module_id", "seq_lens"}
"""Bookkeeping columns of the old writers: read past silently (others are reported)."""


def list_inputs(path: str) -> list[str]:
    """``path`` itself, or the ``*.parquet`` / ``*.json`` / ``*.jsonl`` files under it (recursive,
    sorted; names starting with ``_`` or ``.`` are side files and skipped)."""
    is_dir = storage.is_dir(path)  # asked once: a directory is then listed once
    if not is_dir and storage.exists(path):
        return [path]
    if not is_dir:
        raise ConfigError(
            f"migrate: --input must be a file or a directory (found {path!r}, which "
            "does not exist). Point it at the old recording."
        )
    found = [
        file
        for file in storage.list_dir(path, recursive=True)  # a local directory or a URI
        if file.endswith(SUFFIXES) and not file.rsplit("/", 1)[-1].startswith(("_", "."))
    ]
    if not found:
        raise ConfigError(
            f"migrate: --input must hold {'/'.join(SUFFIXES)} files (found none in "
            f"{path}). RLlib's JsonWriter writes output-*.json files."
        )
    return found


class _NumpyOnly(pickle.Unpickler):
    """Unpickles numpy arrays and nothing else (RLlib's compressed columns are pickled arrays)."""

    ALLOWED = {
        (m, n)
        for m in ("numpy.core.multiarray", "numpy._core.multiarray")
        for n in ("_reconstruct", "scalar")
    } | {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not a numpy array part")
        return super().find_class(module, name)


def unpack_array(text: str | bytes, ctx: str) -> np.ndarray:
    """One value compressed by RLlib's ``ray.rllib.utils.compression.pack`` -> its array."""
    try:
        import lz4.frame
    except ImportError:
        raise ConfigError(
            f"{ctx}: compressed observations must be decoded with the lz4 package "
            "(found it not installed). RLlib compressed obs/new_obs with lz4: "
            "`pip install lz4`, then run migrate again."
        ) from None
    try:
        value = _NumpyOnly(io.BytesIO(_decompress(lz4.frame, base64.b64decode(text)))).load()
    except Exception as err:  # base64, lz4 and pickle each raise their own types
        raise SchemaError(
            f"{ctx}: value must be base64(lz4(pickle(ndarray))) as RLlib's pack writes "
            f"(found {type(err).__name__}: {err}). The column is not RLlib-compressed.",
            reason="compressed_value",
        ) from err
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        found = f"{value.dtype} array" if isinstance(value, np.ndarray) else type(value).__name__
        raise SchemaError(
            f"{ctx}: compressed value must be a numpy array of numbers (found {found}).",
            reason="compressed_value",
        )
    return value


LZ4_RATIO = 256
"""lz4 expands a block at most ~255 times (measured: 50 MiB of zeros, 243x)."""


def _decompress(frame: Any, raw: bytes) -> bytes:
    """An lz4 frame, decompressed into at most ``LZ4_RATIO`` times its size: the frame header's
    declared content size is not trusted (``lz4.frame.decompress`` allocates it first: a
    forged header claiming 10 GB allocated 10 GB before failing, measured)."""
    decompressor = frame.LZ4FrameDecompressor()
    out = decompressor.decompress(raw, max_length=LZ4_RATIO * len(raw) + (1 << 16))
    if not decompressor.eof:
        raise ValueError(f"the lz4 frame is cut or expands beyond {LZ4_RATIO}x its {len(raw)} bytes")
    return bytes(out)


def _is_list(kind: pa.DataType) -> bool:
    return bool(pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind))


def _json_type(name: str, value: Any, batched: bool) -> pa.DataType:
    """The Arrow type column ``name`` is parsed as, from its value in the first line."""
    if batched and isinstance(value, list):
        value = value[0] if value else None
    if name in ("obs", "new_obs"):
        kind: pa.DataType = pa.string() if isinstance(value, str) else pa.list_(pa.float64())
        return pa.string() if batched and isinstance(value, str) else (pa.list_(kind) if batched else kind)
    if name == "eps_id":
        kind = pa.string() if isinstance(value, str) else pa.int64()
    elif name in ("terminateds", "truncateds", "dones"):
        kind = pa.bool_()
    elif name == "actions" and isinstance(value, list):
        kind = pa.list_(pa.float64())
    else:
        kind = pa.float64()
    return pa.list_(kind) if batched else kind


def _first_line(path: str) -> bytes:
    """The first line of a local or remote file (pyarrow's files have no ``readline``)."""
    chunks: list[bytes] = []
    with storage.open_input_file(path) as fh:
        while True:
            chunk = fh.read(1 << 20)
            end = chunk.find(b"\n")
            if end >= 0 or not chunk:
                chunks.append(chunk[: end + 1] if end >= 0 else chunk)
                return b"".join(chunks)
            chunks.append(chunk)


def _json_batches(path: str, batch_rows: int, ignored: set[str] | None) -> Iterator[pa.RecordBatch]:
    """JSON lines parsed by pyarrow with the types of the first line's columns; only the
    migrated columns are parsed (others, e.g. ``infos``, are skipped unread)."""
    first = _first_line(path)
    try:
        head = json.loads(first)
    except ValueError as err:
        raise SchemaError(
            f"{where(file=path, row=0)}: line must be a JSON object (found {err}). "
            "Old RLlib JSON files hold one object per line.",
            reason="unreadable_file",
        ) from None
    if not isinstance(head, dict) or head.get("type") == "MultiAgentBatch":
        found = "a MultiAgentBatch" if isinstance(head, dict) else type(head).__name__
        raise SchemaError(
            f"{where(file=path, row=0)}: line must be a single-agent SampleBatch or "
            f"transition object (found {found}). Multi-agent recordings are not "
            "migrated; write one policy's batches per file.",
            reason="schema",
        )
    if ignored is not None:
        ignored.update(n for n in head if n not in USED and n not in NOT_CARRIED)
    batched = isinstance(head.get("rewards"), list)
    schema = pa.schema([(n, _json_type(n, head[n], batched)) for n in head if n in USED])
    reader = pj.open_json(
        storage.open_input_file(path),
        read_options=pj.ReadOptions(block_size=max(1 << 24, 4 * len(first))),
        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
    )
    for block in reader:
        for start in range(0, block.num_rows, batch_rows):
            yield block.slice(start, batch_rows)


def _record_batches(path: str, batch_rows: int, ignored: set[str] | None) -> Iterator[pa.RecordBatch]:
    if not path.endswith(".parquet"):
        yield from _json_batches(path, batch_rows, ignored)
        return
    parquet = pq.ParquetFile(storage.open_input_file(path))
    if ignored is not None:
        ignored.update(n for n in parquet.schema_arrow.names if n not in USED and n not in NOT_CARRIED)
    columns = [n for n in parquet.schema_arrow.names if n in USED]
    yield from parquet.iter_batches(batch_size=batch_rows, columns=columns)


def _explode(batch: pa.RecordBatch, path: str, first_row: int) -> tuple[dict[str, Any], np.ndarray]:
    """SampleBatch rows -> one entry per transition (compressed columns stay per batch row)."""
    lengths = pc.list_value_length(batch.column("rewards")).fill_null(0).to_numpy()
    rows = first_row + np.repeat(np.arange(batch.num_rows), lengths)
    cols: dict[str, Any] = {}
    for name in batch.schema.names:
        col = batch.column(name)
        if name not in USED:
            continue
        if name in ("obs", "new_obs") and (pa.types.is_string(col.type) or pa.types.is_binary(col.type)):
            cols[name] = ("packed_batch", col)  # one compressed [B, size] array per row
            continue
        if not _is_list(col.type):
            raise SchemaError(
                f"{where(file=path, column=name)}: column must be a list per SampleBatch row "
                f"(found {col.type}). The file mixes row shapes.",
                reason="schema",
            )
        own = pc.list_value_length(col).fill_null(0).to_numpy()
        if not np.array_equal(own, lengths):
            i = int(np.flatnonzero(own != lengths)[0])
            raise SchemaError(
                f"{where(file=path, row=first_row + i, column=name)}"
                f": SampleBatch column length must equal the rewards length "
                f"{lengths[i]} (found {own[i]}). The batch is damaged.",
                reason="schema",
            )
        cols[name] = col.flatten()
    return cols, rows


def _vectors(
    col: Any, size: int, file: str, rows: np.ndarray, name: str, problems: dict[int, Problem]
) -> np.ndarray:
    """An obs / new_obs column -> ``[R, size]`` float matrix; wrong lengths become problems."""
    if isinstance(col, tuple):  # compressed, one [B, size] array per SampleBatch row
        arrays = [unpack_array(v, where(file=file, column=name)) for v in col[1].to_pylist()]
        parts = [np.asarray(a, np.float64).reshape(len(a), -1) for a in arrays]
        lengths = np.concatenate([np.full(len(p), p.shape[1]) for p in parts]) if parts else np.zeros(0)
        values = np.concatenate([p.reshape(-1) for p in parts]) if parts else np.zeros(0)
    elif pa.types.is_string(col.type) or pa.types.is_binary(col.type):
        texts = col.to_pylist()
        arrays = [
            np.zeros(0)
            if v is None
            else np.asarray(
                unpack_array(v, where(file=file, row=int(rows[i]), column=name)), np.float64
            ).reshape(-1)
            for i, v in enumerate(texts)
        ]
        lengths = np.array([-1 if v is None else len(a) for a, v in zip(arrays, texts)], np.int64)
        values = np.concatenate(arrays) if arrays else np.zeros(0)
    elif _is_list(col.type):
        if not (pa.types.is_floating(col.type.value_type) or pa.types.is_integer(col.type.value_type)):
            raise SchemaError(
                f"{where(file=file, column=name)}: column must hold flat number vectors "
                f"(found {col.type}). It must be RLlib's preprocessed (flattened) obs.",
                reason="schema",
            )
        lengths = pc.list_value_length(col).fill_null(-1).to_numpy()
        flat = col.flatten()
        if not pa.types.is_floating(flat.type):
            flat = flat.cast(pa.float64())
        values = flat.fill_null(float("nan")).to_numpy(zero_copy_only=False)
    else:
        raise SchemaError(
            f"{where(file=file, column=name)}: column must hold flat float vectors, "
            f"RLlib's preprocessor output (found {col.type}). Recordings of raw dict "
            "observations (new API stack) are not padded: read them directly.",
            reason="schema",
        )
    matrix, bad = dense_vectors(values, lengths, size)
    for i in bad:
        found = "null" if lengths[i] < 0 else f"{lengths[i]} values"
        problems.setdefault(
            int(i),
            (
                "vector_length",
                name,
                (
                    f"vector length must be {size}, the --observation-space layout's (found {found}). "
                    "The row was padded with another space, or is damaged."
                ),
            ),
        )
    return matrix


def _numbers(col: Any, name: str, file: str) -> np.ndarray:
    if _is_list(col.type):
        lengths = pc.list_value_length(col).fill_null(0).to_numpy()
        if (lengths != 1).any():
            raise SchemaError(
                f"{where(file=file, column=name)}: column must hold one number per "
                f"transition (found {col.type} of length {int(lengths.max())}). Only "
                "scalar (Discrete / node / edge) actions are migrated.",
                reason="schema",
            )
        col = col.flatten()
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_boolean(col.type)):
        raise SchemaError(
            f"{where(file=file, column=name)}: column must be numeric (found {col.type}). "
            "The file was written by another tool.",
            reason="schema",
        )
    return np.asarray(col.cast(pa.float64()).fill_null(float("nan")).to_numpy(zero_copy_only=False))


def _flags(cols: dict[str, Any], name: str) -> np.ndarray:
    if name not in cols:
        return np.zeros(len(cols["rewards"]), bool)
    return np.asarray(cols[name].cast(pa.bool_()).fill_null(False).to_numpy(zero_copy_only=False))


def read_batches(
    path: str, size: int, batch_rows: int = 4096, ignored: set[str] | None = None
) -> Iterator[OldBatch]:
    """The transitions of one old file, ``batch_rows`` at a time (see the module docstring).
    Raises SchemaError (``reason``) for a file that cannot be read as a whole; ``ignored``
    receives the names of columns that are not migrated."""
    offset = 0
    for batch in _record_batches(path, batch_rows, ignored):
        names = batch.schema.names
        missing = [c for c in REQUIRED if c not in names]
        if "terminateds" not in names and "dones" not in names:
            missing.append("terminateds (or dones)")
        if missing:
            raise SchemaError(
                f"{where(file=path, column=missing[0])}: column must be present (found "
                f"columns {names}). Old RLlib rows have obs, new_obs, actions, rewards, "
                "terminateds/truncateds or dones, eps_id and t.",
                reason="missing_column",
            )
        if pa.types.is_list(batch.schema.field("rewards").type):
            cols, rows = _explode(batch, path, offset)
        else:
            cols = {n: batch.column(n) for n in names if n in USED}
            rows = offset + np.arange(batch.num_rows)
        offset += batch.num_rows
        problems: dict[int, Problem] = {}
        yield OldBatch(
            file=path,
            rows=rows,
            eps_id=cols["eps_id"].to_pylist(),
            t=_numbers(cols["t"], "t", path),
            obs=_vectors(cols["obs"], size, path, rows, "obs", problems),
            new_obs=_vectors(cols["new_obs"], size, path, rows, "new_obs", problems),
            actions=_numbers(cols["actions"], "actions", path),
            rewards=_numbers(cols["rewards"], "rewards", path),
            terminated=_flags(cols, "terminateds" if "terminateds" in cols else "dones"),
            truncated=_flags(cols, "truncateds"),
            problems=problems,
            done_column="terminateds" if "terminateds" in cols else "dones",
        )
