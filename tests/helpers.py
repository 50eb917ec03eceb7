"""Small shared factories for tests: graphs, encoded episode rows, episode files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from offline_graph.data.format import FORMAT_VERSION, METADATA_KEY
from offline_graph.data.graph import GraphDict


def make_graph(n: int, e: int, F: int = 3, D: int | None = 2, seed: int = 0) -> GraphDict:
    """Observation dict with ``n`` nodes, ``e`` edges (local indices in 0..n-1), random features.

    ``D=None`` (or 0) leaves out ``edge_attr``.
    """
    rng = np.random.default_rng(seed)
    obs: GraphDict = {
        "x": rng.standard_normal((n, F)).astype(np.float32),
        "edge_index": rng.integers(0, max(n, 1), size=(2, e)).astype(np.int64),
    }
    if D:
        obs["edge_attr"] = rng.standard_normal((e, D)).astype(np.float32)
    return obs


def make_episode(
    sizes: Sequence[tuple[int, int]] = ((3, 2), (4, 0), (2, 1)),
    actions: Sequence[int] | None = None,
    rewards: Sequence[float] | None = None,
    *,
    F: int = 3,
    D: int | None = 2,
    seed: int = 0,
) -> tuple[list[GraphDict], list[int], list[float]]:
    """(observations, actions, rewards): one graph per ``(n, e)`` in ``sizes`` (T+1 of them);
    actions default to 0 and rewards to 1.0."""
    obs = [make_graph(n, e, F=F, D=D, seed=seed * 1000 + i) for i, (n, e) in enumerate(sizes)]
    num_t = len(sizes) - 1
    acts = list(actions) if actions is not None else [0] * num_t
    rews = list(rewards) if rewards is not None else [1.0] * num_t
    return obs, acts, rews


def make_episode_item(
    sizes: Sequence[tuple[int, int]] = ((3, 2), (4, 0), (2, 1)),
    actions: Sequence[int] | None = None,
    rewards: Sequence[float] | None = None,
    *,
    F: int = 3,
    D: int | None = 2,
    seed: int = 0,
    terminated: bool = True,
    truncated: bool = False,
    episode_id: str = "ep0",
) -> bytes:
    """One episode row's ``item`` bytes (via :func:`offline_graph.data.codec.encode_episode`)."""
    from offline_graph.rllib.episodes import encode_episode

    obs, acts, rews = make_episode(sizes, actions, rewards, F=F, D=D, seed=seed)
    return encode_episode(obs, acts, rews, terminated=terminated, truncated=truncated, episode_id=episode_id)


def write_episode_file(path: Any, items: Sequence[bytes], metadata: dict | None = None) -> str:
    """Write ``items`` as an episode Parquet file (column ``item``); returns the path.

    ``metadata`` is the JSON body stored under the ``offline_graph`` key (default: current
    episodes format).
    """
    body = {"kind": "episodes", "version": FORMAT_VERSION} if metadata is None else metadata
    table = pa.table({"item": pa.array(list(items), pa.binary())})
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(body).encode()})
    pq.write_table(table, str(path))
    return str(path)
