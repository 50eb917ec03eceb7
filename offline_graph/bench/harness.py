"""The bench harness: result rows, the shared context of a run, and timing helpers.

Every case (:mod:`offline_graph.bench.cases` lists them) takes a :class:`BenchContext` and
returns :class:`Row` s; a row holds one value per repeat for ours and for the baseline.
``Row.ratio`` is always "how many times better ours is" (median over median;
higher-is-better metrics ours/base, lower-is-better base/ours).

Ray Data runs use 2 actors x 0.5 CPU for both paths. Start-up is excluded: a pipeline run is
timed from the first map call to the last learner batch (:func:`pipeline_rate`; full runs
start reads only once the actors are up), a stream without actors from its first batch
(:func:`stream_rate`). With ``--quick`` every Ray Data run and the conversion job run once
(each run pays ~10-40 s of start-up on a loaded 2-CPU machine); the conversion job runs at
most twice.

Ray and RLlib (``DEFAULT_MODULE_ID`` included) are imported where they are used, so that
``offline-graph bench --help`` does not pay for importing them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from statistics import median
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from offline_graph.bench.data import BenchData
from offline_graph.bench.synthetic import DataConfig, graph_spaces

TRANSITIONS_S = "transitions/s"


def spawn_worker(module: str, function: str, args: dict[str, Any]) -> subprocess.Popen:
    """``function(json_args)`` of ``module`` run in a fresh Python process (its own memory
    peak), stdout and stderr piped; read it with :func:`worker_result`."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys; from {module} import {function}; {function}(sys.argv[1])",
            json.dumps(args),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def worker_result(name: str, key: Any, proc: subprocess.Popen) -> dict[str, Any]:
    """The JSON object a :func:`spawn_worker` process printed last; a RuntimeError with the
    end of its stderr when it failed."""
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{name} worker {key} failed:\n{err[-3000:]}")
    return dict(json.loads(out.strip().splitlines()[-1]))


@dataclass
class Row:
    """One line of the result table (values per repeat)."""

    case: str
    metric: str
    unit: str
    ours: list[float]
    base: list[float] | None = None
    baseline: str = ""
    """What the baseline is (stock path and its data)."""
    lower_is_better: bool = False
    note: str = ""
    skipped: str | None = None

    @property
    def ratio(self) -> float | None:
        """How many times better ours is (median over median); None without a baseline."""
        if not self.ours or not self.base:
            return None
        o, b = median(self.ours), median(self.base)
        if o <= 0 or b <= 0:
            return None
        return b / o if self.lower_is_better else o / b

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ratio"] = self.ratio
        for who in ("ours", "base"):
            vals = d[who] or []
            d[f"{who}_min"] = min(vals) if vals else None
            d[f"{who}_median"] = median(vals) if vals else None
        return d


@dataclass
class BenchContext:
    """Shared state of one bench run: data, settings, Ray, the converted rows."""

    data: BenchData
    repeats: int = 3
    quick: bool = False
    batch_size: int = 256
    """B, ``train_batch_size_per_learner`` of both prelearners and the learner batch size."""
    episodes_per_call: int = 64
    """Episode rows per map call of our prelearner in the Ray Data pipeline."""
    prelearner_transitions: int = 50_000
    """Transitions our prelearner processes per in-process repeat."""
    memory_transitions: int = 8192
    """Transitions each memory worker processes."""
    log: Callable[[str], None] = print
    _converted: str | None = field(default=None, repr=False)
    _ray: bool = field(default=False, repr=False)

    @property
    def cfg(self) -> DataConfig:
        return self.data.cfg

    @property
    def stock_episodes_per_call(self) -> int:
        """Episodes per call so one call holds ~B transitions (both in-process prelearners)."""
        mean_len = float(self.data.episodes.lengths.mean())
        return max(1, int(round(self.batch_size / mean_len)))

    def ray(self) -> Any:
        """Ray, started once on 2 CPUs (quiet Ray Data; full runs start actors before reads)."""
        import ray

        from offline_graph.rllib.core.ray_session import start_ray

        if not self._ray:
            start_ray(2)
            dctx = ray.data.DataContext.get_current()
            dctx.enable_progress_bars = False
            dctx.print_on_execution_start = False
            # Full runs start reads only once the map actors are up, so no read work is done
            # before a pipeline's clock starts; --quick skips that wait (~10 s per pipeline)
            # and may read some blocks for free during actor start-up.
            dctx.wait_for_min_actors_s = -1 if self.quick else 600
            dctx.execution_options.preserve_order = False
            self._ray = True
        return ray

    def convert(self, output: str) -> dict[str, Any]:
        """Run our conversion job on the episode files (restores the Data context after)."""
        from offline_graph.jobs.convert import ConvertConfig, convert

        ray = self.ray()
        dctx = ray.data.DataContext.get_current()
        order = dctx.execution_options.preserve_order
        try:
            return convert(ConvertConfig(input=self.data.episode_dir, output=output, spec=self.cfg.spec))
        finally:
            dctx.execution_options.preserve_order = order

    @property
    def converted_dir(self) -> str:
        if self._converted is None:
            out = os.path.join(self.data.root, "converted")
            if not (os.path.isdir(out) and os.listdir(out)):
                shutil.rmtree(out, ignore_errors=True)
                self.convert(out)
            self._converted = out
        return self._converted

    # -- prelearners ---------------------------------------------------------------------

    def graph_config(self, input_: str, episodes: bool = True) -> Any:
        """Our BC config for ``input_`` (``offline_graph.configure`` applied)."""
        import offline_graph
        from ray.rllib.algorithms.bc import BCConfig
        from ray.rllib.core.rl_module.rl_module import RLModuleSpec

        from offline_graph.rllib.core.gnn_module import GNNModule
        from offline_graph.rllib.offline.prelearner import GraphOfflinePreLearner

        obs, act = graph_spaces(self.cfg)
        config = (
            BCConfig()
            .environment(observation_space=obs, action_space=act)
            .offline_data(
                input_=[input_], input_read_episodes=episodes, prelearner_class=GraphOfflinePreLearner
            )
            .training(train_batch_size_per_learner=self.batch_size)
            .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule))
        )
        return offline_graph.configure(config)

    def ours_prelearner(self, input_: str, episodes: bool = True) -> Any:
        from offline_graph.rllib.offline.prelearner import GraphOfflinePreLearner

        return GraphOfflinePreLearner(
            config=self.graph_config(input_, episodes), spaces=graph_spaces(self.cfg)
        )

    def stock_kwargs(self, input_: str, spaces: tuple) -> dict[str, Any]:
        """Constructor kwargs of the stock ``OfflinePreLearner``, as ``OfflineData`` passes them."""
        from ray.rllib.algorithms.bc import BCConfig
        from ray.rllib.core import DEFAULT_MODULE_ID

        config = (
            BCConfig()
            .environment(observation_space=spaces[0], action_space=spaces[1])
            .offline_data(input_=[input_], input_read_episodes=True)
            .training(train_batch_size_per_learner=self.batch_size)
        )
        return {
            "config": config,
            "spaces": spaces,
            "module_spec": config.get_multi_rl_module_spec(spaces={DEFAULT_MODULE_ID: spaces}),
        }

    def stock_prelearner(self, input_: str, spaces: tuple) -> Any:
        from ray.rllib.offline.offline_prelearner import OfflinePreLearner

        return OfflinePreLearner(**self.stock_kwargs(input_, spaces))


# -- timing helpers --------------------------------------------------------------------


def learner_rows(out: Any) -> int:
    """Learner rows in a prelearner output (Arrow table or RLlib's flat dict)."""
    if hasattr(out, "num_rows"):
        return int(out.num_rows)
    from ray.rllib.core import DEFAULT_MODULE_ID

    return len(out[f"{DEFAULT_MODULE_ID}/actions"])


def item_batch(items: Sequence[bytes]) -> dict[str, np.ndarray]:
    """Episode rows as the batch a prelearner's ``__call__`` gets (column ``item``)."""
    return {"item": np.array(list(items), dtype=object)}


PRELEARNER_MIN_S = 0.3
"""A prelearner's timed passes over its items last at least this long: ours passes 10,000
transitions in ~60 ms, where one stall of the shared machine would decide the number."""


def time_prelearner(
    make: Callable[[], Any], items: Sequence[bytes], per_call: int, min_s: float = PRELEARNER_MIN_S
) -> float:
    """Learner rows emitted per second by ``make()`` over ``items``, ``per_call`` rows a call,
    in whole passes over ``items`` until ``min_s`` seconds have passed (the first call warms up
    and is not timed; the constructor is not timed)."""
    pre = make()
    pre(item_batch(items[:per_call]))
    chunks = [item_batch(items[i : i + per_call]) for i in range(per_call, len(items), per_call)]
    n, start = 0, time.perf_counter()
    while True:
        for chunk in chunks:
            n += learner_rows(pre(chunk))
        elapsed = time.perf_counter() - start
        if elapsed >= min_s:
            return n / elapsed


def stream_rate(batches: Iterable[Any], count: Callable[[Any], int]) -> tuple[float, float]:
    """(transitions/s after the first batch, seconds to the first batch) of a batch stream."""
    it = iter(batches)
    t_start = time.perf_counter()
    next(it)
    t0 = time.perf_counter()
    n = sum(count(b) for b in it)
    if n == 0:
        raise RuntimeError("stream_rate: the stream must hold more than one batch (found 1).")
    return n / (time.perf_counter() - t0), t0 - t_start


def first_call_marked(cls: type, marker: str) -> type:
    """``cls`` whose first ``__call__`` in each process writes ``time.time()`` to
    ``<marker>.<pid>`` (the start of real work in a Ray Data actor)."""

    class FirstCallMarked(cls):  # type: ignore[valid-type, misc]
        def __call__(self, batch: Any) -> Any:
            if not getattr(self, "_first_call_marked", False):
                self._first_call_marked = True
                with open(f"{marker}.{os.getpid()}", "w") as fh:
                    fh.write(repr(time.time()))
            return super().__call__(batch)

    FirstCallMarked.__name__ = FirstCallMarked.__qualname__ = cls.__name__
    return FirstCallMarked


def pipeline_rate(
    make_batches: Callable[[str], Iterable[Any]], count: Callable[[Any], int], marker_dir: str
) -> tuple[float, float]:
    """(transitions/s, seconds of start-up) of one Ray Data run.

    ``make_batches(marker)`` builds the stream with its map class wrapped by
    :func:`first_call_marked`. Start-up (actor and read-worker start) is excluded: the clock
    starts when the first map call starts, and stops when the last batch arrives. (Timing
    from the first delivered batch does not work here: under load Ray Data delivers the first
    batch only after most blocks are mapped.)
    """
    os.makedirs(marker_dir, exist_ok=True)
    marker = os.path.join(marker_dir, f"first-call-{time.time_ns()}")
    t_start = time.time()
    n = sum(count(b) for b in make_batches(marker))
    t_end = time.time()
    d, stem = os.path.split(marker)
    firsts = [float(open(os.path.join(d, f)).read()) for f in os.listdir(d) if f.startswith(stem)]
    first = min(firsts)
    return n / (t_end - first), first - t_start


def seconds_per_call(fn: Callable[[], Any], min_s: float = 0.2) -> float:
    """Seconds per call of ``fn`` (looped for at least ``min_s``)."""
    fn()
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        el = time.perf_counter() - start
        if el >= min_s:
            return el / n


def tensor_bytes(batch: dict[str, Any]) -> int:
    """Bytes of all tensors / arrays in a (flat) batch dict."""
    total = 0
    for v in batch.values():
        if hasattr(v, "element_size"):
            total += v.element_size() * v.nelement()
        else:
            total += np.asarray(v).nbytes
    return int(total)
