"""Fuzzed episode rows, single- and multi-agent (no Ray): a damaged row between two intact
ones. Raise mode raises only our errors, naming file, row and (where decodable) episode; skip
mode counts every row (read = used + rejected by reason) and keeps both intact episodes; every
example stays under the time and memory bounds of :func:`tests.fuzz.bounded`. Hand-made
regressions (``@example``) are the damage fuzzing found first."""

from __future__ import annotations

import pickle

import msgpack
import numpy as np
import pytest
from hypothesis import example, given

from offline_graph.data.errors import GraphValidationError, OfflineGraphError
from offline_graph.data.episodes.multi_agent import read_agent_episodes
from offline_graph.data.episodes.reader import ReadStats, read_transitions
from offline_graph.data.episodes.validation import EpisodeSpec, values_ok
from tests.fuzz import (
    D,
    F,
    FUZZ,
    PEAK_BYTES,
    SECONDS,
    K,
    absurd_array,
    bounded,
    buffer,
    count,
    damaged,
    episode_state,
    fuzz_report,
    multi_row,
    nested,
    pack,
    single_row,
)
from tests.helpers import write_episode_file

SPEC = EpisodeSpec(F, D, K)


class _Exec:
    """Pickles as a call of ``exec(code)``: what a malicious row could hold."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return (exec, (self.code,))


GOOD = ("good-0", "good-1")
pytestmark = pytest.mark.usefixtures(fuzz_report.__name__)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    """The episode file of each example (rewritten per example: the row is located in it)."""
    return str(tmp_path_factory.mktemp("fuzz") / "rows.parquet")


def _single(rows, path, on_error, stats):
    parts = read_transitions(rows, [path] * len(rows), SPEC, 0.9, on_error=on_error, seen_ids={}, stats=stats)
    assert all(values_ok(p.obs) and np.isfinite(p.rewards).all() for p in parts)  # what is kept is sound
    return [(i, int((p.episode_index == k).sum())) for p in parts for k, i in enumerate(p.episode_ids)]


def _route(agent_id, module_id, episode_id):
    return "m", SPEC


def _multi(rows, path, on_error, stats):
    parts = read_agent_episodes(rows, [path] * len(rows), _route, on_error=on_error, seen_ids={}, stats=stats)
    assert all(values_ok(p.episode.obs) and np.isfinite(p.episode.rewards).all() for p in parts)
    return [(p.episode.id, len(p.episode)) for p in parts]


def check_contract(read, rows, path, good_steps, seconds=SECONDS, peak=PEAK_BYTES):
    """Raise and skip mode over ``rows`` (row 1 damaged), each within ``seconds`` and ``peak``
    bytes; returns the error raise mode raised, or None."""
    write_episode_file(path, [r if isinstance(r, bytes) else b"" for r in rows])
    raised = None
    with bounded(seconds, peak):
        try:
            read(rows, path, "raise", ReadStats())
        except OfflineGraphError as err:  # anything else fails the test
            raised = err
    if raised is not None:
        msg = str(raised)
        assert raised.reason, msg
        assert f"file {path}" in msg, msg
        if isinstance(rows[1], bytes):
            assert f"file {path}, row 1" in msg or f"file {path}, row 2" in msg, msg
        if isinstance(raised, GraphValidationError):
            assert "episode '" in msg, msg
    stats = ReadStats()
    with bounded(seconds, peak):
        kept = read(rows, path, "skip", stats)
    ids = [i for i, _ in kept]
    assert stats.episodes_read == len(rows) == stats.episodes_used + sum(stats.rejected.values())
    assert stats.transitions_used == sum(n for _, n in kept)
    for eid in GOOD:  # every intact episode is kept, whole
        assert sum(n for i, n in kept if i == eid) == good_steps, (eid, kept, stats.as_dict())
    if raised is None:
        assert not stats.rejected, stats.as_dict()
    else:
        assert dict(stats.rejected) == {raised.reason: 1}, (stats.as_dict(), str(raised))
        assert set(ids) <= set(GOOD) | {None}
    return raised


def _with(state: dict, **fields) -> bytes:
    return pack({**state, **fields})


def _obs_with(state: dict, key: str, value) -> bytes:
    obs = [dict(o) for o in state["observations"]["data"]]
    obs[1][key] = value
    return _with(state, observations=buffer(obs))


def _ma_with(agent: dict) -> bytes:
    """The multi-agent row ``damaged`` with its second agent's entry updated by ``agent``."""
    state = msgpack.unpackb(multi_row("damaged"), strict_map_key=False)
    state["agents"][1].update(agent)
    return msgpack.packb(state)


_STATE = episode_state("damaged")
PWNED: list[int] = []
"""Appended to by the pickled payload below if a reader ever unpickles a row's bytes."""
_PAYLOAD = pickle.dumps(_Exec("import tests.test_fuzz_episodes as m; m.PWNED.append(1)"))


@FUZZ
@given(row=damaged(lambda seed: single_row("damaged", seed=seed)))
# found by fuzzing (each raised a bare numpy / Python error, or hung, before its fix):
@example(row=_with(_STATE, observations=None))  # TypeError: list(None)
@example(row=_with(_STATE, actions=buffer(nested(100))))  # ValueError: numpy's 64 dimensions
@example(row=_with(_STATE, actions=buffer([0, [1, 2], 1])))  # ValueError: ragged actions
@example(row=_with(_STATE, rewards=buffer([b"\xf6", 1.0, 1.0])))  # UnicodeDecodeError
@example(row=_with(_STATE, actions=buffer([{b"nd": False, b"type": "<i8", b"data": True}] * 3)))
@example(row=_with(_STATE, actions=buffer([{b"nd": False, b"type": "<i8"}] * 3)))  # KeyError
@example(row=_with(_STATE, actions=buffer([{b"nd": False, b"type": "zz", b"data": b"1"}] * 3)))
@example(row=_obs_with(_STATE, "edge_attr", [[1.0], [1.0, 2.0]]))  # ValueError: ragged
@example(row=_obs_with(_STATE, "x", absurd_array([2**63, F])))  # OverflowError: beyond int64
@example(row=_with(_STATE, rewards=buffer([1e300, 1.0, 1.0])))  # finite in float64, inf as float32
@example(row=_with(_STATE, observations=buffer([{1: 0, "x": 0}] * 4)))  # TypeError: sorting int, str keys
@example(row=_with(_STATE, t_started="x"))  # ValueError: int("x")
@example(row=_with(_STATE, is_terminated=[1, 2]))
# msgpack_numpy would pickle.loads an object array's bytes: code in a row ran on reading
@example(row=_with(_STATE, actions=buffer([{**absurd_array((), "|O", _PAYLOAD), b"kind": b"O"}] * 3)))
def test_fuzzed_single_agent_rows(path, row):
    rows = [single_row(GOOD[0], seed=5), row, single_row(GOOD[1], seed=6)]
    check_contract(_single, rows, path, good_steps=3)
    count("single-agent episode rows")
    assert not PWNED


@FUZZ
@given(row=damaged(lambda seed: multi_row("damaged", seed=seed)))
@example(row=_ma_with({"env_t": [0, float("nan"), 2]}))  # ValueError: NaN to int64
@example(row=_ma_with({"env_t": [0, None, 2]}))  # TypeError
@example(row=_ma_with({"episode": {**episode_state("x"), "observations": buffer(None)}}))
def test_fuzzed_multi_agent_rows(path, row):
    rows = [multi_row(GOOD[0], seed=5), row, multi_row(GOOD[1], seed=6)]
    check_contract(_multi, rows, path, good_steps=2 * 2)  # 2 agents x 2 steps
    count("multi-agent episode rows")


def _stacked_state(eid: str, x: dict, ei: dict) -> dict:
    """A ``to_numpy()`` episode: observations as one dict of stacked arrays."""
    state = episode_state(eid, length=2)
    state["observations"] = buffer({"x": x, "edge_index": ei, "edge_attr": absurd_array([3, 0, D])})
    return state


ABSURD = [
    # a to_numpy() episode whose header claims 10^9 steps of 3 nodes over 36 bytes
    _stacked_state(
        "absurd-steps", absurd_array([10**9, 3, F], data=b"\0" * 36), absurd_array([10**9, 2, 0], "<i8", b"")
    ),
    # one observation claiming a [10^9, F] node array (12 GB) over 12 bytes
    {
        **episode_state("absurd-x"),
        "observations": buffer(
            [{"x": absurd_array([10**9, F]), "edge_index": absurd_array([2, 0], "<i8", b"")}] * 4
        ),
    },
    # edge_index claiming 2^62 edges
    {
        **episode_state("absurd-e"),
        "observations": buffer(
            [{"x": absurd_array([1, F]), "edge_index": absurd_array([2, 2**62], "<i8")}] * 4
        ),
    },
    # actions as one array claiming 10^9 entries
    {**episode_state("absurd-a"), "actions": buffer(absurd_array([10**9], "<i8", b"\0" * 8))},
]


@pytest.mark.parametrize("state", ABSURD, ids=lambda s: s["id_"])
def test_absurd_declared_shapes_are_refused_before_allocating(path, state):
    rows = [single_row(GOOD[0]), pack(state), single_row(GOOD[1])]
    raised = check_contract(_single, rows, path, good_steps=3, seconds=5.0, peak=8 << 20)
    assert raised is not None and "episode 'absurd-" in str(raised), raised


def test_deep_nesting_is_a_decode_error(path):
    deep = b"\x91" * 100_000 + b"\xc0"  # 100k nested one-element arrays
    raised = check_contract(_single, [single_row(GOOD[0]), deep, single_row(GOOD[1])], path, good_steps=3)
    assert raised is not None and raised.reason == "decode"


def test_multi_agent_absurd_agent_shape(path):
    state = msgpack.unpackb(multi_row("absurd-ma"), strict_map_key=False)
    state["agents"][1]["episode"]["observations"]["data"][0]["x"] = absurd_array([10**9, F])
    rows = [multi_row(GOOD[0]), msgpack.packb(state), multi_row(GOOD[1])]
    raised = check_contract(_multi, rows, path, good_steps=4)
    assert raised is not None and "agent 1" in str(raised)


def test_intact_rows_pass_the_contract(path):
    """The checker itself: intact rows in between are all kept (no false rejection)."""
    assert check_contract(_single, [single_row(g) for g in (GOOD[0], "mid", GOOD[1])], path, 3) is None
    assert check_contract(_multi, [multi_row(g) for g in (GOOD[0], "mid", GOOD[1])], path, 4) is None
