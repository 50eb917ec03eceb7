"""The bad-input corpus: one builder per kind of damage (shared by the corpus tests).

Every builder returns the bytes of one damaged episode row (row-level damage) or writes a
damaged file (file-level damage). The space: F=3 node features, D=1 edge feature, k=2.
"""

from __future__ import annotations

import msgpack
import msgpack_numpy as mnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from offline_graph.data.episodes.codec import unpack_item
from offline_graph.rllib.offline.episodes import encode_episode
from offline_graph.data.store.format import make_metadata
from tests.helpers import write_episode_file

F, D, K = 3, 1, 2


def graph(n: int, e: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.normal(size=(n, F)).astype(np.float32),
        "edge_index": rng.integers(0, n, (2, e)).astype(np.int64),
        "edge_attr": rng.normal(size=(e, D)).astype(np.float32),
    }


def good(eid: str, length: int = 3) -> bytes:
    obs = [graph(2 + t, 2, seed=t) for t in range(length + 1)]
    return encode_episode(
        obs, [t % K for t in range(length)], [1.0] * length, terminated=True, truncated=False, episode_id=eid
    )


def _with_obs(eid: str, step: int, change) -> bytes:
    obs = [graph(2 + t, 2, seed=t) for t in range(4)]
    obs[step] = change(obs[step])
    return encode_episode(obs, [0, 1, 0], [1.0, 1.0, 1.0], terminated=True, truncated=False, episode_id=eid)


def _with_state(eid: str, change) -> bytes:
    state = unpack_item(good(eid))
    change(state)
    return msgpack.packb(state, default=mnp.encode)


def _set_obs(key, value):
    def change(o):
        o = dict(o)
        if value is None:
            o.pop(key)
        else:
            o[key] = value
        return o

    return change


# reason -> (builder(eid) -> bytes, the step named in the error or None, a text the error holds)
ROW_DAMAGE = {
    "decode": (lambda eid: b"\x93\xff not msgpack at all" + eid.encode(), None, "msgpack"),
    "not_finished": (
        lambda eid: encode_episode(
            [graph(2, 1), graph(2, 1)], [0], [0.0], terminated=False, truncated=False, episode_id=eid
        ),
        None,
        "must be finished",
    ),
    "length": (
        lambda eid: _with_state(eid, lambda s: s["observations"]["data"].pop()),
        None,
        "observations = actions + 1",
    ),
    "obs_type": (lambda eid: _with_obs(eid, 1, lambda o: [o["x"]]), 1, "must be a dict"),
    "x_shape": (
        lambda eid: _with_obs(eid, 2, _set_obs("x", np.zeros((2, F + 2), np.float32))),
        2,
        f"float [N, {F}]",
    ),
    "empty_graph": (
        lambda eid: _with_obs(
            eid,
            1,
            lambda o: {
                "x": np.zeros((0, F), np.float32),
                "edge_index": np.zeros((2, 0), np.int64),
                "edge_attr": np.zeros((0, D), np.float32),
            },
        ),
        1,
        "number of nodes must be >= 1",
    ),
    "edge_index_shape": (
        lambda eid: _with_obs(eid, 0, _set_obs("edge_index", np.zeros((3, 2), np.int64))),
        0,
        "integer [2, E]",
    ),
    "edge_index_range": (
        lambda eid: _with_obs(eid, 2, _set_obs("edge_index", np.array([[0, 9], [1, 0]], np.int64))),
        2,
        "0..N-1",
    ),
    "edge_attr": (
        lambda eid: _with_obs(eid, 1, _set_obs("edge_attr", None)),
        1,
        "edge features must be float",
    ),
    "nonfinite": (
        lambda eid: _with_obs(
            eid, 2, _set_obs("x", np.array([[0, 0, 0], [np.nan, 0, 0], [0, 0, 0], [0, 0, 0]], np.float32))
        ),
        2,
        "must be finite",
    ),
    "action": (
        lambda eid: _with_state(eid, lambda s: s["actions"]["data"].__setitem__(1, 7)),
        1,
        "action must be in 0..1",
    ),
    "reward": (
        lambda eid: _with_state(eid, lambda s: s["rewards"]["data"].__setitem__(2, float("inf"))),
        2,
        "rewards must be finite",
    ),
}


def write_items(path, items, version: int = 1) -> None:
    write_episode_file(path, items, metadata={"kind": "episodes", "version": version})


def write_truncated(path) -> None:
    write_items(path, [good("t0"), good("t1")])
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])


def write_wrong_column_type(path) -> None:
    pq.write_table(
        pa.table({"item": pa.array(["a string, not bytes"])}).replace_schema_metadata(
            make_metadata("episodes")
        ),
        path,
    )


def write_unknown_version(path) -> None:
    write_items(path, [good("v0")], version=99)


# reason -> (writer(path), a text the error holds)
FILE_DAMAGE = {
    "unreadable_file": (write_truncated, "complete Parquet file"),
    "schema": (write_wrong_column_type, "column type must be binary"),
    "format_version": (write_unknown_version, "format version must be 1"),
}
