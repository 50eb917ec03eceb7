"""Shared pieces of the fuzz tests (``tests/test_fuzz_*.py``): settings profiles, the per-example
bounds, intact rows to start from, and the mutations (no Ray).

Profiles (``HYPOTHESIS_PROFILE``): ``fuzz-ci`` (default: fixed seed, few examples, CI) and
``long`` (same seed derivation, many more examples; the documented longer run)::

    HYPOTHESIS_PROFILE=long python -m pytest -q tests/test_fuzz_episodes.py ...

A mutation is drawn in two ways: on the bytes (flips, truncation, insertion, a run of 0xff) or
on the decoded msgpack tree (every dict, list and msgpack-numpy array map is a target: a value
replaced by a value of another type, an element dropped or repeated, a key removed, an array's
declared shape / dtype / bytes changed, its values set to NaN / inf / out-of-range indices, a
deep nesting), then packed again.
"""

from __future__ import annotations

import json
import os
import signal
import time
import tracemalloc
from contextlib import contextmanager
from typing import Any, Iterator

import msgpack
import msgpack_numpy as mnp
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

settings.register_profile(
    "fuzz-ci",
    derandomize=True,
    database=None,
    max_examples=40,
    deadline=None,  # contended CI machines: the hard per-example bound is `bounded` below
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    derandomize=True,
    database=None,
    max_examples=6000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "fuzz-ci")
FUZZ = settings.get_profile(PROFILE if PROFILE in ("fuzz-ci", "long") else "fuzz-ci")
"""The fuzz tests' settings (a decorator): the profile named by ``HYPOTHESIS_PROFILE``."""

SECONDS = 10.0
"""Hard wall-clock bound of one example (reading a few tiny rows takes milliseconds)."""
PEAK_BYTES = 64 << 20
"""Bound on the memory one example allocates (tracemalloc, numpy buffers included)."""


TALLY: dict[str, Any] = {"peak": 0, "slowest": 0.0}
"""Per reader (test name): damaged inputs read; over all: the largest peak and slowest block."""


def count(reader: str, inputs: int = 1) -> None:
    TALLY[reader] = TALLY.get(reader, 0) + inputs


@pytest.fixture(scope="module", autouse=False)
def fuzz_report() -> Iterator[None]:
    """Appends the module's :data:`TALLY` as a JSON line to ``$FUZZ_REPORT`` (the long run)."""
    yield
    target = os.environ.get("FUZZ_REPORT")
    if target:
        with open(target, "a") as fh:
            fh.write(json.dumps({"profile": PROFILE, **TALLY}) + "\n")
    TALLY.clear()
    TALLY.update(peak=0, slowest=0.0)


class Overrun(Exception):
    """An example ran past :data:`SECONDS` (a reader looping over a declared size)."""


@contextmanager
def bounded(seconds: float = SECONDS, peak: int = PEAK_BYTES) -> Iterator[dict[str, Any]]:
    """Run the block under a wall-clock alarm and tracemalloc; fail if either bound is passed.
    Yields a dict that receives ``peak`` (bytes) and ``seconds`` afterwards."""

    def alarm(signum: int, frame: Any) -> None:
        raise Overrun(f"example ran past {seconds} s")

    out: dict[str, Any] = {}
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        yield out
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        out["peak"] = tracemalloc.get_traced_memory()[1]
        out["seconds"] = time.perf_counter() - start
        tracemalloc.stop()
        TALLY["peak"] = max(TALLY["peak"], out["peak"])
        TALLY["slowest"] = max(TALLY["slowest"], out["seconds"])
    assert out["peak"] < peak, f"example allocated {out['peak']} bytes (bound {peak})"


# ---------------------------------------------------------------------------- intact rows
F, D, K = 3, 2, 2


def graph(n: int, e: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((n, F)).astype(np.float32),
        "edge_index": rng.integers(0, n, (2, e)).astype(np.int64),
        "edge_attr": rng.standard_normal((e, D)).astype(np.float32),
    }


def buffer(data: Any) -> dict:
    """An ``InfiniteLookbackBuffer.get_state()`` without lookback."""
    return {"data": data, "lookback": 0, "finalized": False, "space": None}


def episode_state(eid: str, length: int = 3, seed: int = 0) -> dict:
    """A ``SingleAgentEpisode.get_state()`` of a finished episode (the fields our reader and
    RLlib's ``from_state`` use), ``length`` steps of graphs with 2.. nodes."""
    return {
        "id_": eid,
        "agent_id": None,
        "module_id": None,
        "multi_agent_episode_id": None,
        "observations": buffer([graph(2 + t % 3, 1 + t % 2, seed * 100 + t) for t in range(length + 1)]),
        "actions": buffer([t % K for t in range(length)]),
        "rewards": buffer([1.0] * length),
        "infos": buffer([{} for _ in range(length + 1)]),
        "extra_model_outputs": None,
        "is_terminated": True,
        "is_truncated": False,
        "t_started": 0,
        "t": length,
        "custom_data": {},
    }


def pack(state: Any) -> bytes:
    return msgpack.packb(state, default=mnp.encode)


def single_row(eid: str, length: int = 3, seed: int = 0) -> bytes:
    return pack(episode_state(eid, length, seed))


def multi_row(eid: str, agents: int = 2, length: int = 2, seed: int = 0) -> bytes:
    """A multi-agent episode row (format version 1) whose agents all act every step."""
    entries = []
    for a in range(agents):
        sa = episode_state(eid, length, seed * 10 + a)
        entries.append(
            {
                "agent_id": f"a{a}" if a % 2 == 0 else a,
                "module_id": "m",
                "env_t": list(range(length + 1)),
                "agent_t_started": 0,
                "episode": sa,
                "env_t_to_agent_t": buffer(list(range(length + 1))),
                "hanging": {},
            }
        )
    return pack(
        {
            "format": "offline_graph.multi_agent_episode",
            "format_version": 1,
            "id_": eid,
            "env_t_started": 0,
            "env_t": length,
            "is_terminated": True,
            "is_truncated": False,
            "agents": entries,
            "custom_data": {},
        }
    )


# ---------------------------------------------------------------------------- mutations
FLOATS = st.sampled_from([float("nan"), float("inf"), -float("inf"), -1.0, 0.5, 1e300, 2.0**63])
INTS = st.sampled_from([-1, -(2**63), 2**63 - 1, 2**64 - 1, 10**9, 7, 0, 1])
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, st.text(max_size=8), st.binary(max_size=8))


def nested(depth: int) -> Any:
    out: Any = 0
    for _ in range(depth):
        out = [out]
    return out


VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=4),
    st.dictionaries(st.text(max_size=4), SCALARS, max_size=3),
    st.integers(1, 600).map(nested),
)
"""Values of the wrong type for almost any place (a string where a list belongs, ...)."""

DTYPES = st.sampled_from(
    ["<f4", "<f8", "<i8", "<i4", "|u1", "|b1", "|O", "<U3", "V7", "zz", "|V1000000000", ""]
)
SHAPES = st.one_of(
    st.lists(st.integers(-2, 5), max_size=3),
    st.sampled_from(
        [
            [10**9, 3],
            [10**9],
            [2**31, 2**31],
            [2**62, 4],
            [2**63, 3],
            [3, 2**64 - 1],
            [-1, 3],
            [10**9, 2, 10**9],
        ]
    ),
    SCALARS,
)


def _is_map(v: Any) -> bool:
    return isinstance(v, dict) and v.get(b"nd") is True


def targets(tree: Any, path: tuple = ()) -> list[tuple]:
    """Every path into ``tree`` (dict keys / list indices), array maps as one target."""
    out = [path]
    if _is_map(tree):
        return out
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += targets(v, path + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += targets(v, path + (i,))
    return out


def _get(tree: Any, path: tuple) -> Any:
    for p in path:
        tree = tree[p]
    return tree


def _set(tree: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    _get(tree, path[:-1])[path[-1]] = value
    return tree


def _array_mutation(data: st.DataObject, m: dict) -> dict:
    """A msgpack-numpy array map with one field or some of its values damaged."""
    m = dict(m)
    op = data.draw(st.sampled_from(["shape", "type", "bytes_cut", "bytes_add", "values", "field"]))
    if op == "shape":
        m[b"shape"] = data.draw(SHAPES)
    elif op == "type":
        m[b"type"] = data.draw(DTYPES)
    elif op == "bytes_cut":
        raw = bytes(m[b"data"])
        m[b"data"] = raw[: data.draw(st.integers(0, max(len(raw) - 1, 0)))]
    elif op == "bytes_add":
        m[b"data"] = bytes(m[b"data"]) + b"\x01" * data.draw(st.integers(1, 16))
    elif op == "values":
        arr = np.frombuffer(m[b"data"], dtype=m[b"type"]).copy()
        if arr.size:
            bad = data.draw(FLOATS if arr.dtype.kind == "f" else INTS)
            i = data.draw(st.integers(0, arr.size - 1))
            with np.errstate(all="ignore"):
                arr[i] = np.array(bad).astype(arr.dtype) if arr.dtype.kind in "iub" else bad
            m[b"data"] = arr.tobytes()
    else:
        key = data.draw(st.sampled_from([b"nd", b"type", b"shape", b"data", b"kind"]))
        if data.draw(st.booleans()):
            m.pop(key, None)
        else:
            m[key] = data.draw(VALUES)
    return m


def mutate_tree(data: st.DataObject, item: bytes) -> bytes:
    """``item`` decoded (arrays as their maps), one place in it damaged, packed again."""
    tree = msgpack.unpackb(item, strict_map_key=False)
    paths = targets(tree)
    path = paths[data.draw(st.integers(0, len(paths) - 1), label="target")]
    node = _get(tree, path)
    ops = ["replace"]
    if _is_map(node):
        ops += ["array"] * 4
    if isinstance(node, list) and node:
        ops += ["drop", "repeat"]
    if isinstance(node, dict) and node:
        ops += ["del_key"]
    op = data.draw(st.sampled_from(ops), label="op")
    if op == "array":
        tree = _set(tree, path, _array_mutation(data, node))
    elif op == "drop":
        node.pop(data.draw(st.integers(0, len(node) - 1)))
    elif op == "repeat":
        node.append(node[data.draw(st.integers(0, len(node) - 1))])
    elif op == "del_key":
        node.pop(data.draw(st.sampled_from(sorted(node, key=repr))))
    else:
        tree = _set(tree, path, data.draw(VALUES, label="value"))
    try:
        return msgpack.packb(tree)
    except (ValueError, TypeError, OverflowError):  # too deep for the packer: a flat damage
        return msgpack.packb(nested(100))


def mutate_bytes(data: st.DataObject, item: bytes) -> bytes:
    """``item`` with bytes flipped, cut, inserted or overwritten."""
    raw = bytearray(item)
    op = data.draw(st.sampled_from(["flip", "truncate", "insert", "ff"]), label="byte_op")
    pos = data.draw(st.integers(0, len(raw) - 1), label="pos")
    if op == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            raw[pos] ^= data.draw(st.integers(1, 255))
            pos = data.draw(st.integers(0, len(raw) - 1))
    elif op == "truncate":
        del raw[pos:]
    elif op == "insert":
        raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=9))
    else:
        raw[pos : pos + 9] = b"\xff" * 9
    return bytes(raw)


def mutate(data: st.DataObject, item: bytes) -> Any:
    """One damaged version of ``item`` (bytes, tree, or not bytes at all)."""
    kind = data.draw(st.sampled_from(["bytes", "tree", "tree", "tree", "type"]), label="kind")
    if kind == "bytes":
        return mutate_bytes(data, item)
    if kind == "tree":
        return mutate_tree(data, item)
    return data.draw(st.one_of(st.none(), st.text(max_size=5), st.integers(), st.just(b"")))


class Draws:
    """``st.composite``'s ``draw`` with ``st.data()``'s ``draw(strategy, label=...)`` call."""

    def __init__(self, draw: Any) -> None:
        self._draw = draw

    def draw(self, strategy: Any, label: str | None = None) -> Any:
        return self._draw(strategy)


@st.composite
def damaged(draw: Any, make: Any) -> Any:
    """A damaged version of the row ``make(seed)`` (seed 0..3)."""
    return mutate(Draws(draw), make(draw(st.integers(0, 3))))


def absurd_array(shape: list[int], dtype: str = "<f4", data: bytes = b"\0" * 12) -> dict:
    """A msgpack-numpy array map whose header claims ``shape`` over a few bytes."""
    return {b"nd": True, b"type": dtype, b"kind": b"", b"shape": shape, b"data": data}
