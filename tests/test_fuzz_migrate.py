"""Fuzzed ``offline-graph migrate`` inputs (the job in-process; Ray's modules are imported for
the ``Repeated`` space, no Ray runtime starts): an intact old recording next to a damaged one
(a value of another type, NaN / inf, an absurd length field, a cut or flipped file, a
compressed ``obs`` whose pickle is damaged or not an array). Raise mode raises only our
errors, naming the damaged file; skip mode writes every intact episode and counts every row
(``rows_read = transitions + transitions_rejected`` when no file is rejected)."""

from __future__ import annotations

import base64
import json
import os
import pickle
import shutil
import struct

import lz4.frame
import numpy as np
import pyarrow.parquet as pq
import pytest
import xxhash
from hypothesis import example, given, settings
from hypothesis import strategies as st

from offline_graph.data.errors import OfflineGraphError
from offline_graph.data.episodes.reader import read_transitions
from offline_graph.data.episodes.validation import EpisodeSpec
from offline_graph.jobs.old_rows import unpack_array
from tests.fuzz import FUZZ, Draws, VALUES, bounded, count, fuzz_report, mutate_bytes, nested
from tests.migrate_data import D, F, OFF_X, make_recording, read_output, run, write_json_rows, write_parquet

pytestmark = pytest.mark.usefixtures(fuzz_report.__name__)
OUT_SPEC = EpisodeSpec(F, D, 2**63)  # migrate without an action space: any int64 action >= 0
INTACT, INTACT_ROWS = make_recording(seed=1, episodes=3)
_, ROWS = make_recording(seed=2, episodes=3)


def packed(value) -> str:
    """RLlib's ``compression.pack``: base64(lz4(pickle(value)))."""
    return base64.b64encode(lz4.frame.compress(pickle.dumps(value))).decode("ascii")


class _Exec:
    def __reduce__(self):
        return (exec, ("raise SystemExit('code in a row ran')",))


PICKLES = [
    b"not a pickle",
    pickle.dumps(np.zeros(3, object)),  # an object array: Python objects inside
    pickle.dumps(np.array(["a", "b"])),  # an array of text
    pickle.dumps({"not": "an array"}),
    pickle.dumps(_Exec()),
]


def forged_frame(content_size: int) -> bytes:
    """An lz4 frame of a pickled array whose header claims ``content_size`` bytes."""
    frame = bytearray(lz4.frame.compress(pickle.dumps(np.zeros(3)), store_size=True))
    frame[6:14] = struct.pack("<Q", content_size)
    frame[14] = (xxhash.xxh32(bytes(frame[4:14])).intdigest() >> 8) & 0xFF  # header checksum
    return bytes(frame)


def _obs_at(row: dict, at: int, value: float) -> dict:
    row["obs"][at] = value
    return row


def _json_row(row: dict) -> dict:
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in row.items()}


@st.composite
def damaged_inputs(draw) -> tuple[str, list[dict] | bytes]:
    """(format, rows or file bytes) of the damaged recording."""
    rows = [_json_row(r) for r in ROWS]
    fmt = draw(st.sampled_from(["json", "parquet", "packed"]))
    i = draw(st.integers(0, len(rows) - 1))
    if fmt == "packed":  # obs / new_obs compressed by RLlib: one pickled vector per row
        for r in rows:
            r["obs"], r["new_obs"] = packed(np.asarray(r["obs"])), packed(np.asarray(r["new_obs"]))
        raw = pickle.dumps(np.asarray(ROWS[i]["obs"]))
        if draw(st.booleans()):
            raw = draw(st.sampled_from([*PICKLES, pickle.dumps(np.zeros((0, 0)))]))
        if draw(st.booleans()):
            raw = mutate_bytes(Draws(draw), raw)
        frame = lz4.frame.compress(raw)
        if draw(st.booleans()):
            frame = forged_frame(draw(st.sampled_from([2**31, 10**10, 10**12, 1])))
        rows[i]["obs"] = base64.b64encode(frame).decode("ascii")
        return "json", rows
    column = draw(st.sampled_from(sorted(rows[i])))
    op = draw(st.sampled_from(["value", "value", "obs_entry", "bytes"]))
    if op == "obs_entry":  # one entry of the padded vector: a length slot or a feature
        column = draw(st.sampled_from(["obs", "new_obs"]))
        at = draw(st.sampled_from([OFF_X, OFF_X + 1, 0, 1, len(rows[i][column]) - 1]))
        rows[i][column][at] = draw(st.sampled_from([float("nan"), float("inf"), -1.0, 1e9, 0.5, 1e300]))
    elif op == "value":
        rows[i][column] = draw(VALUES)
    else:
        return fmt, mutate_bytes(Draws(draw), _file_bytes(fmt, rows))
    return fmt, rows


def _as_vectors(rows: list[dict]) -> list[dict]:
    """JSON rows with obs / new_obs as float32 vectors (what ``write_parquet`` stores)."""
    with np.errstate(over="ignore"):
        return [
            {**r, "obs": np.asarray(r["obs"], np.float32), "new_obs": np.asarray(r["new_obs"], np.float32)}
            for r in rows
        ]


def _file_bytes(fmt: str, rows: list[dict]) -> bytes:
    path = f"/tmp/_fuzz_migrate_{os.getpid()}.{fmt}"
    try:
        write_parquet(_as_vectors(rows), path) if fmt == "parquet" else write_json_rows(rows, path)
        return open(path, "rb").read()
    finally:
        os.remove(path)


def write_damaged(directory: str, damaged: tuple[str, list[dict] | bytes]) -> str:
    fmt, content = damaged
    path = os.path.join(directory, f"b_damaged.{'parquet' if fmt == 'parquet' else 'json'}")
    if isinstance(content, bytes):
        open(path, "wb").write(content)
        return path
    if fmt == "parquet":
        try:
            return write_parquet(_as_vectors(content), path)
        except Exception:  # the writer refuses the value: write the rows as JSON lines instead
            path = path.replace(".parquet", ".json")
    with open(path, "w") as fh:
        for r in content:
            fh.write(json.dumps(r, default=repr) + "\n")
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_migrate")


def check_migrate(root, damaged) -> OfflineGraphError | None:
    inp, out = root / "in", root / "out"
    shutil.rmtree(inp, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    inp.mkdir()
    write_parquet(INTACT_ROWS, inp / "a_intact.parquet")
    bad = write_damaged(str(inp), damaged)
    raised = None
    with bounded():
        try:
            run(inp, out)
        except OfflineGraphError as err:  # anything else fails the test
            raised = err
    if raised is not None:
        assert f"file {bad}" in str(raised), str(raised)
    shutil.rmtree(out, ignore_errors=True)
    with bounded():
        report = run(inp, out, on_error="skip")
    assert {e[0] for e in INTACT} <= set(read_output(str(out))), report  # every intact episode
    files = sorted(str(p) for p in out.glob("*.parquet"))
    items = [i for f in files for i in pq.read_table(f).column("item").to_pylist()]
    read_transitions(items, [None] * len(items), OUT_SPEC, 0.9)  # every episode written is valid
    if not report["files_rejected_by_reason"]:
        assert report["rows_read"] == report["transitions"] + report["transitions_rejected"], report
    if raised is None:
        assert not report["rejected_by_reason"] and not report["files_rejected_by_reason"], report
    return raised


@settings(FUZZ, max_examples=max(FUZZ.max_examples // 4, 1))  # a migration run per example
@given(damaged=damaged_inputs())
@example(damaged=("json", [{**_json_row(r), "obs": nested(100)} for r in ROWS]))
@example(damaged=("json", [{**_json_row(r), "rewards": 1e300} for r in ROWS]))  # inf as float32
@example(damaged=("json", [{**_json_row(r), "actions": 2.0**63} for r in ROWS]))  # beyond int64
@example(damaged=("json", [_obs_at(_json_row(r), OFF_X + 1, 1e300) for r in ROWS]))  # a feature: inf
def test_fuzzed_migrate_inputs(root, damaged):
    check_migrate(root, damaged)
    count("migrate inputs")


@pytest.mark.parametrize("size", [2**31, 10**10, 10**12])
def test_a_forged_lz4_header_allocates_nothing_it_claims(size):
    """Found while fuzzing: ``lz4.frame.decompress`` allocated a frame's declared size first."""
    text = base64.b64encode(forged_frame(size))
    with bounded(seconds=5.0, peak=8 << 20), pytest.raises(OfflineGraphError) as err:
        unpack_array(text, "file f, column 'obs'")
    assert err.value.reason == "compressed_value"


@pytest.mark.parametrize("raw", PICKLES, ids=range(len(PICKLES)))
def test_numpy_only_unpickler_refuses_what_is_not_a_number_array(raw):
    text = base64.b64encode(lz4.frame.compress(raw))
    with pytest.raises(OfflineGraphError) as err:
        unpack_array(text, "file f, column 'obs'")
    assert err.value.reason == "compressed_value" and str(err.value).startswith("file f, column 'obs'")
