"""Small shared factories for tests: graphs, encoded episode rows, episode files."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from offline_graph.data.store.format import FORMAT_VERSION, METADATA_KEY
from offline_graph.data.graphs.graph import GraphDict

ROOT = Path(__file__).resolve().parents[1]


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
    """One episode row's ``item`` bytes (via :func:`offline_graph.data.episodes.codec.encode_episode`)."""
    from offline_graph.rllib.offline.episodes import encode_episode

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


def two_episode_transitions() -> Any:
    """Transitions of two episodes of chain graphs (``x`` = a tag per step): episode A, rows
    0..4, node counts 3,3,3,4,4, tags 10..14; episode B, rows 5..7, 2 nodes, tags 20..22.
    Actions = the step index, rewards 1, both terminated, gamma 1."""
    from offline_graph.data.graphs.columns import GraphColumns
    from offline_graph.data.learning.transitions import Transitions

    def chain(n: int, tag: float) -> GraphDict:
        ei = np.array([np.arange(n - 1), np.arange(1, n)], np.int64).reshape(2, -1)
        return {"x": np.full((n, 2), tag, np.float32), "edge_index": ei}

    sizes = [3, 3, 3, 4, 4, 2, 2, 2]
    tags = [10, 11, 12, 13, 14, 20, 21, 22]
    obs = GraphColumns.from_graphs([chain(n, t) for n, t in zip(sizes, tags)], None)
    return Transitions.from_steps(
        obs,
        np.array([0, 1, 2, 3, 4, 0, 1, 2]),
        np.ones(8),
        np.array([5, 3]),
        [True, True],
        [False, False],
        ["A", "B"],
        gamma=1.0,
    )


class FixedRows:
    """An rng stand-in for run sampling: ``integers`` returns rows 3, 1, 7, 4, 3, 1, ..."""

    def integers(self, low: int, high: int, size: int) -> np.ndarray:
        return np.resize(np.array([3, 1, 7, 4]), size)


def _cli() -> tuple[list[str], dict[str, str]]:
    """The ``offline-graph`` command and its environment (this checkout first, no debug)."""
    exe = Path(sys.executable).parent / "offline-graph"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "offline_graph.cli"]
    env = {k: v for k, v in os.environ.items() if k != "OFFLINE_GRAPH_DEBUG"}
    return cmd, {**env, "PYTHONPATH": str(ROOT)}


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The ``offline-graph`` console script in a subprocess, run from the repository root with
    this checkout's code first (``OFFLINE_GRAPH_DEBUG`` unset)."""
    cmd, env = _cli()
    return subprocess.run(
        [*cmd, *args], check=False, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def start_command(out_dir: Path, argv: Sequence[str]) -> Callable[[float], subprocess.CompletedProcess]:
    """``argv`` started now, in the background, from the repository root with this checkout's
    code first (``OFFLINE_GRAPH_DEBUG`` unset), as :func:`run_cli` runs the CLI: several runs
    that wait on Ray more than they compute can run at once. Its output goes to files in
    ``out_dir`` (never a full pipe). Returns ``finished(timeout)``: waits for the run (killing
    it past ``timeout``) and gives it as ``subprocess.run`` would."""
    _, env = _cli()
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "stdout", "w") as out, open(out_dir / "stderr", "w") as err:
        proc = subprocess.Popen(list(argv), cwd=ROOT, stdout=out, stderr=err, text=True, env=env)

    def finished(timeout: float) -> subprocess.CompletedProcess:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        text = {name: (out_dir / name).read_text() for name in ("stdout", "stderr")}
        return subprocess.CompletedProcess(proc.args, proc.returncode, text["stdout"], text["stderr"])

    return finished


def start_cli(out_dir: Path, *args: str) -> Callable[[float], subprocess.CompletedProcess]:
    """:func:`run_cli` started now, in the background (:func:`start_command`)."""
    cmd, _ = _cli()
    return start_command(out_dir, [*cmd, *args])


@contextlib.contextmanager
def deadline(seconds: int, what: str):
    """Fail (instead of hanging the suite) if the block takes longer than ``seconds``."""

    def expire(signum, frame):
        raise TimeoutError(
            f"{what} must finish within {seconds} s (found it still running; a Ray Data stall?)"
        )

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def map_in_this_process(algo: Any) -> None:
    """Run the map step of RLlib's ``OfflineData.sample`` in this process, then leave the
    training to RLlib (call before the first ``algo.train()`` of a BC / MARWIL algorithm).

    Ray Data still reads the input (MARWIL when built, BC here: RLlib's ``materialize_data``).
    The prelearner class, built with the arguments RLlib gives its Ray Data actor, maps Ray
    Data's batches of it (RLlib's batch size and format) here instead of in that actor, a new
    process importing RLlib, torch and PyG (~4 CPU s on the 2-core test machine).
    ``OfflineData.sample`` then finds the data mapped and hands the learner(s) a Ray Data
    iterator over the rows, as after its own map. For tests whose point is not the map actor:
    the algorithm tests that keep RLlib's own map run it."""
    import ray
    from ray.rllib.env import INPUT_ENV_SPACES

    from offline_graph.rllib.offline.offline_data import NO_MODULE_STATE

    data = algo.offline_data
    assert not data.data_is_mapped, "map_in_this_process: call it before the first train()"
    prelearner = data.prelearner_class(
        config=data.config,
        spaces=data.spaces[INPUT_ENV_SPACES],
        module_spec=data.module_spec,
        module_state=NO_MODULE_STATE,
    )
    size = data.data_read_batch_size or data.config.train_batch_size_per_learner
    batches = data.data.iter_batches(batch_size=size, batch_format=data.map_batches_kwargs["batch_format"])
    data.data = ray.data.from_arrow([prelearner(batch) for batch in batches])
    data.data_is_mapped = True
