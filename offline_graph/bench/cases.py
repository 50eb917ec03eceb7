"""Bench cases: ours vs RLlib's stock (padded) path on the same generated data, one function each.

Every case takes a :class:`BenchContext` and returns :class:`Row` s; a row holds one value per
repeat for ours and for the baseline. ``Row.ratio`` is always "how many times better ours is"
(median over median; higher-is-better metrics ours/base, lower-is-better base/ours).

Stock baselines (``ray.rllib`` as installed, no changes):

* ``OfflinePreLearner`` built like ``OfflineData`` builds it (``module_spec`` from
  ``config.get_multi_rl_module_spec``), BC, default RLModule/catalog of the space, on episode
  rows written by ``encode_episode`` (``SingleAgentEpisode.get_state`` msgpack, RLlib's own
  recording format) whose observations are the graphs padded to one flat Box
  (``offline_graph.bench.data``), or CartPole-sized Box(4) observations.
* Both prelearners get the same episode rows per call, about ``B`` transitions
  (``round(B / mean episode length)`` episodes), so both emit ~B learner rows per call. (RLlib's
  own default, ``B`` episode rows per call, makes the stock path decode ~30x more than it emits.)

Ray Data runs use 2 actors x 0.5 CPU for both paths. Start-up is excluded: a pipeline run is
timed from the first map call to the last learner batch (:func:`pipeline_rate`; full runs
start reads only once the actors are up), a stream without actors from its first batch
(:func:`stream_rate`). With ``--quick`` every Ray Data run and the conversion job run once
(each run pays ~10-40 s of start-up on a loaded 2-CPU machine); the conversion job runs at
most twice.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass, field
from functools import partial
from statistics import median
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa

from offline_graph.bench.data import (
    BenchData,
    DataConfig,
    cartpole_spaces,
    dir_bytes,
    graph_spaces,
    padded_spaces,
    payload_bytes,
    read_items,
    repeated_worst_case_bytes,
)

CASES = ("convert", "bytes", "prelearner", "pipeline", "stream", "collate", "memory", "gpu")
TRANSITIONS_S = "transitions/s"


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

        if not self._ray:
            if not ray.is_initialized():
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
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
            return convert(ConvertConfig(input=self.data.episode_dir, output=output,
                                         spec=self.cfg.spec))
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

        from offline_graph.rllib.gnn_module import GNNModule
        from offline_graph.rllib.prelearner import GraphOfflinePreLearner

        obs, act = graph_spaces(self.cfg)
        config = (BCConfig()
                  .environment(observation_space=obs, action_space=act)
                  .offline_data(input_=[input_], input_read_episodes=episodes,
                                prelearner_class=GraphOfflinePreLearner)
                  .training(train_batch_size_per_learner=self.batch_size)
                  .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule)))
        return offline_graph.configure(config)

    def ours_prelearner(self, input_: str, episodes: bool = True) -> Any:
        from offline_graph.rllib.prelearner import GraphOfflinePreLearner

        return GraphOfflinePreLearner(config=self.graph_config(input_, episodes),
                                      spaces=graph_spaces(self.cfg))

    def stock_kwargs(self, input_: str, spaces: tuple) -> dict[str, Any]:
        """Constructor kwargs of the stock ``OfflinePreLearner``, as ``OfflineData`` passes them."""
        from ray.rllib.algorithms.bc import BCConfig

        config = (BCConfig()
                  .environment(observation_space=spaces[0], action_space=spaces[1])
                  .offline_data(input_=[input_], input_read_episodes=True)
                  .training(train_batch_size_per_learner=self.batch_size))
        return {"config": config, "spaces": spaces,
                "module_spec": config.get_multi_rl_module_spec(
                    spaces={"default_policy": spaces})}

    def stock_prelearner(self, input_: str, spaces: tuple) -> Any:
        from ray.rllib.offline.offline_prelearner import OfflinePreLearner

        return OfflinePreLearner(**self.stock_kwargs(input_, spaces))


# -- helpers -------------------------------------------------------------------------------


def _rows(out: Any) -> int:
    """Learner rows in a prelearner output (Arrow table or RLlib's flat dict)."""
    if hasattr(out, "num_rows"):
        return int(out.num_rows)
    return len(out["default_policy/actions"])


def _item_batch(items: Sequence[bytes]) -> dict[str, np.ndarray]:
    return {"item": np.array(list(items), dtype=object)}


def time_prelearner(make: Callable[[], Any], items: Sequence[bytes], per_call: int) -> float:
    """Learner rows emitted per second by ``make()`` over ``items``, ``per_call`` rows a call
    (the first call warms up and is not timed; the constructor is not timed)."""
    pre = make()
    pre(_item_batch(items[:per_call]))
    chunks = [_item_batch(items[i:i + per_call]) for i in range(per_call, len(items), per_call)]
    n, start = 0, time.perf_counter()
    for chunk in chunks:
        n += _rows(pre(chunk))
    return n / (time.perf_counter() - start)


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


def pipeline_rate(make_batches: Callable[[str], Iterable[Any]], count: Callable[[Any], int],
                  marker_dir: str) -> tuple[float, float]:
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


def _timeit(fn: Callable[[], Any], min_s: float = 0.2) -> float:
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


def learner_batch_breakdown(table: Any, module_id: str = "default_policy") -> dict[str, int]:
    """Bytes of the ``GraphCollateFn`` batch of a prelearner output ``table``, split into the
    real payload (x, edge_index, edge_attr), ``batch`` + ``ptr``, and per-row scalars."""
    from offline_graph.rllib.collate_fn import GraphCollateFn

    out = GraphCollateFn(module_id)(table)
    obs = f"{module_id}/obs/"
    parts = {"payload": 0, "batch_ptr": 0, "scalars": 0}
    for k, v in out.items():
        nb = v.element_size() * v.nelement()
        if k in (obs + "batch", obs + "ptr"):
            parts["batch_ptr"] += nb
        elif k.startswith(obs):
            parts["payload"] += nb
        else:
            parts["scalars"] += nb
    parts["total"] = tensor_bytes(out)
    return parts


def table_payload(table: Any, cfg: DataConfig) -> int:
    """Real payload of the transitions in a transition table (from its list lengths)."""
    n = np.diff(table.column("x").combine_chunks().offsets.to_numpy())
    e = np.diff(table.column("edge_index").combine_chunks().offsets.to_numpy())
    return int(payload_bytes(n.astype(np.int64), e.astype(np.int64), cfg).sum())


# -- cases ---------------------------------------------------------------------------------


def case_convert(ctx: BenchContext) -> list[Row]:
    """Our conversion job (episode files -> transition rows): wall transitions/s and MB/s.

    The first job of a Ray session also pays Ray Data's one-time start (its stats and
    autoscaling actors, the workers' first imports): reported on its own row; the main row is
    the same job run again in the warm session (what every later and every larger job sees).
    """
    warm_runs = max(1, min(ctx.repeats, 1 if ctx.quick else 3))
    rates, mbs, outs = [], [], []
    bytes_in = dir_bytes(ctx.data.episode_dir)
    for i in range(1 + warm_runs):
        out = os.path.join(ctx.data.root, f"convert-{i}")
        shutil.rmtree(out, ignore_errors=True)
        start = time.perf_counter()
        report = ctx.convert(out)
        wall = time.perf_counter() - start
        rates.append(report["transitions_out"] / wall)
        mbs.append(bytes_in / wall / 1e6)
        outs.append(out)
    if ctx._converted is None:
        ctx._converted = outs[0]
        outs = outs[1:]
    for out in outs:
        shutil.rmtree(out, ignore_errors=True)
    n = ctx.data.episodes.num_transitions
    return [
        Row("convert", "convert job, warm Ray session (wall)", TRANSITIONS_S, rates[1:],
            note=f"{n} transitions, fused read+convert+write tasks"),
        Row("convert", "convert job, first of the session (wall)", TRANSITIONS_S, rates[:1],
            note="incl. Ray Data's one-time start (actors, worker imports)"),
        Row("convert", "convert job input rate (warm)", "MB/s", mbs[1:],
            note=f"{bytes_in / 1e6:.1f} MB of episode files"),
    ]


def case_bytes(ctx: BenchContext) -> list[Row]:
    """Bytes per transition at each stage, ours vs the padded stock path (lower is better)."""
    cfg, data = ctx.cfg, ctx.data
    real = data.mean_payload
    n_tr, n_stock = data.episodes.num_transitions, data.stock_episodes.num_transitions
    per = ctx.stock_episodes_per_call
    pre = ctx.ours_prelearner(data.episode_dir)
    items = read_items(data.episode_dir, max_rows=8 * per)
    table = pa.concat_tables([pre(_item_batch(items[i:i + per]))
                              for i in range(0, len(items), per)])
    flight = table.nbytes / table.num_rows
    flight_real = table_payload(table, cfg) / table.num_rows
    lb = learner_batch_breakdown(table)
    stock = ctx.stock_prelearner(data.padded_dir, padded_spaces(cfg))
    s_items = read_items(data.padded_dir, max_rows=per)
    s_out = stock(_item_batch(s_items))
    s_flight = tensor_bytes(s_out) / _rows(s_out)
    padded_obs = cfg.padded_width * 4
    rep = repeated_worst_case_bytes(cfg)

    def x_real(ours: float, base: float, ours_real: float = real) -> str:
        return f"ours {ours / ours_real:.3f}x real, stock {base / real:.1f}x real"

    disk = dir_bytes(data.episode_dir) / n_tr
    s_disk = dir_bytes(data.padded_dir) / n_stock
    rows_disk = dir_bytes(ctx.converted_dir) / n_tr
    s_rows_disk = dir_bytes(data.padded_rows_dir) / n_stock
    bp = lb["batch_ptr"] / table.num_rows
    # Node-selection policies (NodeAction): the only dense tensor of the path is the learner's
    # [B, M] log-prob layout (M = most nodes of any graph in that batch), built on the device.
    counts = np.diff(table.column("x").combine_chunks().offsets.to_numpy()).astype(np.int64)
    bsz = max(1, min(ctx.batch_size, len(counts)))
    groups = [counts[i:i + bsz] for i in range(0, len(counts) - bsz + 1, bsz)]
    dense = float(np.mean([4 * len(g) * g.max() for g in groups])) / bsz
    flat = 4.0 * float(counts.mean())
    selection = Row(
        "bytes", "node-action logits on the learner [B, M]", "B/transition", [dense],
        [4.0 * cfg.n_max], f"logits padded to the space's limit max_nodes={cfg.n_max}", True,
        f"[B={bsz}, M=max N in batch] is {dense / flat:.1f}x the flat [sumN] logits "
        f"({flat:.0f} B/tr); inputs stay unpadded (mask: 1 B/node = {counts.mean():.0f} B/tr)")
    return [
        Row("bytes", "real payload vs padded Box obs (N_max=512)", "B/transition", [real],
            [padded_obs], "flat Box: N,E + x + edge_index + edge_attr padded", True,
            f"padded Box {padded_obs / real:.1f}x real"),
        Row("bytes", "real payload vs Repeated worst case", "B/transition", [real], [rep],
            "F*MAX f32 + 2*MAX^2 int64 (forum post; edge_attr not counted)", True,
            f"Repeated {rep / real:.0f}x real"),
        Row("bytes", "on disk: episode files (zstd)", "B/transition", [disk], [s_disk],
            "padded episode files", True, x_real(disk, s_disk)),
        Row("bytes", "on disk: converted rows (zstd)", "B/transition", [rows_disk],
            [s_rows_disk], "padded rows", True, x_real(rows_disk, s_rows_disk)),
        Row("bytes", "in flight: prelearner output", "B/transition", [flight], [s_flight],
            "stock OfflinePreLearner output (obs + new_obs)", True,
            x_real(flight, s_flight, flight_real)),
        Row("bytes", "learner batch: tensors", "B/transition",
            [lb["total"] / table.num_rows], [s_flight], "stock learner batch", True,
            x_real(lb["total"] / table.num_rows, s_flight, flight_real)
            + f"; batch+ptr {bp:.0f} B/tr ({bp / flight_real:.3f}x real), "
            f"x/edge_index/edge_attr {lb['payload'] / table.num_rows / flight_real:.4f}x real"),
        selection,
    ]


def case_prelearner(ctx: BenchContext) -> list[Row]:
    """``__call__`` in-process, episode rows -> learner rows, one core."""
    cfg, data = ctx.cfg, ctx.data
    per = ctx.stock_episodes_per_call
    mean_len = float(data.episodes.lengths.mean())
    items = read_items(data.episode_dir, max_rows=int(ctx.prelearner_transitions / mean_len) + per)
    padded = read_items(data.padded_dir)
    cart = read_items(data.cartpole_dir)
    ours, ours_big, stock, stock_cp = [], [], [], []
    for _ in range(ctx.repeats):
        ours.append(time_prelearner(lambda: ctx.ours_prelearner(data.episode_dir), items, per))
        ours_big.append(time_prelearner(lambda: ctx.ours_prelearner(data.episode_dir), items,
                                        ctx.episodes_per_call))
        stock.append(time_prelearner(
            lambda: ctx.stock_prelearner(data.padded_dir, padded_spaces(cfg)), padded, per))
        stock_cp.append(time_prelearner(
            lambda: ctx.stock_prelearner(data.cartpole_dir, cartpole_spaces()), cart, per))
    note = f"{per} episodes (~{per * mean_len:.0f} transitions) per call, B={ctx.batch_size}"
    return [
        Row("prelearner", "episodes -> learner rows (graphs)", TRANSITIONS_S, ours, stock,
            f"stock OfflinePreLearner, padded Box({cfg.padded_width})", note=note),
        Row("prelearner", "episodes -> learner rows vs CartPole", TRANSITIONS_S, ours, stock_cp,
            "stock OfflinePreLearner, CartPole Box(4)", note=note),
        Row("prelearner", f"ours, {ctx.episodes_per_call} episodes per call", TRANSITIONS_S,
            ours_big, stock, f"stock padded at {per} episodes per call",
            note="bigger calls amortize the per-call overhead"),
    ]


def case_pipeline(ctx: BenchContext) -> list[Row]:
    """Parquet -> Ray Data map_batches(prelearner) -> learner batches, 2 CPUs, start-up excluded."""
    ray = ctx.ray()
    from ray.rllib.offline.offline_prelearner import OfflinePreLearner

    from offline_graph.rllib.collate_fn import GraphCollateFn
    from offline_graph.rllib.prelearner import GraphOfflinePreLearner

    data, cfg, B = ctx.data, ctx.cfg, ctx.batch_size
    pool = {"compute": ray.data.ActorPoolStrategy(size=2), "num_cpus": 0.5}
    count = lambda b: len(b["default_policy/actions"])  # noqa: E731
    markers = os.path.join(data.root, "markers")
    runs = 1 if ctx.quick else ctx.repeats

    def ours(input_: str, episodes: bool, batch_size: int) -> Callable[[str], Iterable[Any]]:
        def make(marker: str) -> Iterable[Any]:
            ds = ray.data.read_parquet(input_).map_batches(
                first_call_marked(GraphOfflinePreLearner, marker), batch_size=batch_size,
                batch_format="pyarrow", fn_constructor_kwargs={
                    "config": ctx.graph_config(input_, episodes), "spaces": graph_spaces(cfg)},
                **pool)
            return ds.iter_torch_batches(batch_size=B, collate_fn=GraphCollateFn(),
                                         drop_last=True)
        return make

    def stock(marker: str) -> Iterable[Any]:
        ds = ray.data.read_parquet(data.padded_dir).map_batches(
            first_call_marked(OfflinePreLearner, marker), batch_size=ctx.stock_episodes_per_call,
            zero_copy_batch=True,
            fn_constructor_kwargs=ctx.stock_kwargs(data.padded_dir, padded_spaces(cfg)), **pool)
        return ds.iter_batches(batch_size=B)

    res: dict[str, list[tuple[float, float]]] = {"ep": [], "rows": [], "stock": []}
    for _ in range(runs):
        res["ep"].append(pipeline_rate(ours(data.episode_dir, True, ctx.episodes_per_call),
                                       count, markers))
        res["rows"].append(pipeline_rate(ours(ctx.converted_dir, False, 8 * B), count, markers))
        res["stock"].append(pipeline_rate(stock, count, markers))

    def rates(key: str) -> list[float]:
        return [r for r, _ in res[key]]

    def startup(key: str) -> str:
        return f"start-up {median(s for _, s in res[key]):.0f} s excluded"

    base = (f"stock OfflinePreLearner -> iter_batches on padded episodes, "
            f"{ctx.stock_episodes_per_call} episodes per call ({startup('stock')})")
    return [
        Row("pipeline", "episode files -> GraphCollateFn batches", TRANSITIONS_S, rates("ep"),
            rates("stock"), base,
            note=f"{ctx.episodes_per_call} episodes per call, {startup('ep')}"),
        Row("pipeline", "converted rows -> GraphCollateFn batches", TRANSITIONS_S,
            rates("rows"), rates("stock"), base,
            note=f"{8 * B} rows per call, {startup('rows')}"),
    ]


def case_stream(ctx: BenchContext) -> list[Row]:
    """Converted rows -> ``iter_torch_batches(collate_fn=GraphCollateFn())`` (no prelearner),
    timed from the first batch."""
    ray = ctx.ray()
    from offline_graph.rllib.collate_fn import GraphCollateFn

    B = ctx.batch_size
    ours, stock = [], []
    for _ in range(1 if ctx.quick else ctx.repeats):
        ours.append(stream_rate(ray.data.read_parquet(ctx.converted_dir).iter_torch_batches(
            batch_size=B, collate_fn=GraphCollateFn(), drop_last=True),
            lambda b: len(b["default_policy/actions"]))[0])
        stock.append(stream_rate(ray.data.read_parquet(ctx.data.padded_rows_dir)
                                 .iter_torch_batches(batch_size=B, drop_last=True),
                                 lambda b: len(b["actions"]))[0])
    return [Row("stream", "converted rows -> learner batches", TRANSITIONS_S, ours, stock,
                "iter_torch_batches over padded rows (Ray tensor column)", note=f"B={B}")]


def case_collate(ctx: BenchContext) -> list[Row]:
    """Batching B graphs: ``collate`` / ``table_to_batch`` vs ``Batch.from_data_list``."""
    import torch
    from torch_geometric.data import Batch, Data

    from offline_graph.data.collate import collate
    from offline_graph.data.transitions import table_to_batch, Transitions

    graphs = ctx.data.episodes.transition_graphs()
    rng = np.random.default_rng(0)
    rows = []
    for B in (256, 1024):
        reps: dict[str, list[float]] = {"cols": [], "table": [], "pyg": []}
        for _ in range(ctx.repeats):
            idx = rng.integers(0, len(graphs), B)
            cols = graphs.take(idx)
            n = len(idx)
            table = Transitions(cols, np.zeros(n, np.int64), np.zeros(n, np.float32),
                                np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, np.float32),
                                np.zeros(n, np.int32), ["e"], np.zeros(n, np.int64)
                                ).to_arrow(columns=["actions", "x", "edge_index", "edge_attr"])
            data = [Data(x=torch.from_numpy(g["x"]),
                         edge_index=torch.from_numpy(np.ascontiguousarray(g["edge_index"])),
                         edge_attr=torch.from_numpy(g["edge_attr"]))
                    for g in (cols.graph(i) for i in range(n))]
            reps["cols"].append(B / _timeit(partial(collate, cols)))
            reps["table"].append(B / _timeit(partial(table_to_batch, table)))
            reps["pyg"].append(B / _timeit(partial(Batch.from_data_list, data)))
        base = "torch_geometric Batch.from_data_list (Data objects prebuilt)"
        rows += [
            Row("collate", f"collate(GraphColumns) B={B}", "graphs/s", reps["cols"], reps["pyg"],
                base),
            Row("collate", f"table_to_batch(Arrow) B={B}", "graphs/s", reps["table"],
                reps["pyg"], base),
        ]
    return rows


def case_memory(ctx: BenchContext) -> list[Row]:
    """Peak RSS of a prelearner worker (one subprocess each) for N_max 128 vs 512.

    Two more processes measure ours' live-data peak (tracemalloc for numpy/Python plus the
    Arrow pool), which RSS blurs with allocator slack; tracing would inflate RSS, so those runs
    are separate.
    """
    procs: dict[tuple[str, int], subprocess.Popen] = {}
    for n_max in (128, 512):
        cfg = DataConfig(transitions=ctx.memory_transitions, n_max=n_max, seed=1,
                         episodes_per_file=64)
        bd = BenchData(os.path.join(ctx.data.root, f"memory-{n_max}"), cfg,
                       ctx.memory_transitions)
        for who, path in (("ours", bd.episode_dir), ("stock", bd.padded_dir),
                          ("ours-traced", bd.episode_dir)):
            args = {"who": who, "path": path, "cfg": asdict(cfg), "batch_size": ctx.batch_size,
                    "per_call": ctx.stock_episodes_per_call}
            # One process per measurement, all at once: each process's own peak is measured.
            procs[(who, n_max)] = subprocess.Popen(
                [sys.executable, "-c", "import sys; from offline_graph.bench.cases import "
                 "memory_worker; memory_worker(sys.argv[1])", json.dumps(args)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    res: dict[tuple[str, int], dict[str, float]] = {}
    for key, proc in procs.items():
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"memory worker {key} failed:\n{err[-3000:]}")
        res[key] = json.loads(out.strip().splitlines()[-1])
    rows = []
    for n_max in (128, 512):
        o, s = res[("ours", n_max)], res[("stock", n_max)]
        rows.append(Row("memory", f"peak RSS growth, N_max={n_max}", "MB", [o["delta_mb"]],
                        [s["delta_mb"]], f"stock OfflinePreLearner, padded Box(N_max={n_max})",
                        True, f"peak RSS ours {o['peak_mb']:.0f} MB, stock {s['peak_mb']:.0f} MB; "
                        f"{int(o['transitions'])} / {int(s['transitions'])} rows out"))
    growth_o = res[("ours", 512)]["delta_mb"] / max(res[("ours", 128)]["delta_mb"], 1.0)
    growth_s = res[("stock", 512)]["delta_mb"] / max(res[("stock", 128)]["delta_mb"], 1.0)
    rows.append(Row("memory", "growth N_max 128 -> 512 (peak RSS)", "x", [growth_o], [growth_s],
                    "stock", True, "1.0 = flat in N_max"))
    live = {n: res[("ours-traced", n)]["live_peak_mb"] for n in (128, 512)}
    rows.append(Row("memory", "ours live-data peak, N_max=512", "MB", [live[512]],
                    lower_is_better=True,
                    note=f"N_max=128: {live[128]:.1f} MB ({live[512] / live[128]:.3f}x); "
                    "tracemalloc (numpy, Python) + Arrow pool"))
    return rows


def _proc_status_mb(key: str) -> float:
    """``VmRSS`` / ``VmHWM`` of this process in MB (Linux)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"memory case: /proc/self/status must have {key} (found none); Linux only.")


def memory_worker(args_json: str) -> None:
    """Subprocess body of :func:`case_memory`: print peak RSS as JSON on the last line."""
    import pyarrow.parquet as pq

    args = json.loads(args_json)
    cfg = DataConfig(**args["cfg"])
    data = BenchData(os.path.dirname(args["path"]), cfg, cfg.transitions)
    ctx = BenchContext(data=data, batch_size=args["batch_size"])
    if args["who"].startswith("ours"):
        pre = ctx.ours_prelearner(args["path"])
    else:
        pre = ctx.stock_prelearner(args["path"], padded_spaces(cfg))
    traced = args["who"] == "ours-traced"
    # Reset the peak (VmHWM) after imports and construction. (ru_maxrss is no good here: a
    # child started by fork+exec inherits the parent's peak.)
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    baseline = _proc_status_mb("VmRSS")
    if traced:
        tracemalloc.start()
    n = 0
    for f in sorted(os.listdir(args["path"])):
        pf = pq.ParquetFile(os.path.join(args["path"], f))
        for rb in pf.iter_batches(batch_size=args["per_call"], columns=["item"]):
            n += _rows(pre(_item_batch(rb.column(0).to_pylist())))
    peak = _proc_status_mb("VmHWM")
    out = {"baseline_mb": baseline, "peak_mb": peak, "delta_mb": max(peak - baseline, 0.0),
           "transitions": n}
    if traced:
        out["live_peak_mb"] = (tracemalloc.get_traced_memory()[1]
                               + pa.default_memory_pool().max_memory()) / 2**20
    print(json.dumps(out))


def learner_steps(ctx: BenchContext, device: str, batch_size: int = 4096, steps: int = 20
                  ) -> tuple[list[float], list[float]]:
    """GNNModule forward+backward (BC loss) on ``device`` fed by the converted-rows stream:
    (seconds per step, fraction of each step spent waiting for the batch iterator)."""
    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.rllib.collate_fn import GraphCollateFn
    from offline_graph.rllib.gnn_module import GNNModule

    ray = ctx.ray()
    obs_space, act_space = graph_spaces(ctx.cfg)
    module: Any = RLModuleSpec(module_class=GNNModule, observation_space=obs_space,
                               action_space=act_space, model_config={}).build()
    module.to(device)
    opt = torch.optim.Adam(module.parameters(), lr=1e-3)
    it = iter(ray.data.read_parquet(ctx.converted_dir).iter_torch_batches(
        batch_size=batch_size, collate_fn=GraphCollateFn(), drop_last=True))
    step_s, wait = [], []
    prefix = "default_policy/obs/"
    for i in range(steps + 1):
        t0 = time.perf_counter()
        try:
            b = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter()
        obs = {k[len(prefix):]: v.to(device, non_blocking=True) for k, v in b.items()
               if k.startswith(prefix)}
        actions = b["default_policy/actions"].to(device)
        logits = module.forward_train({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
        loss = torch.nn.functional.cross_entropy(logits, actions)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        if i:  # the first step warms up (allocator, kernels) and is not counted
            step_s.append(t2 - t0)
            wait.append((t1 - t0) / (t2 - t0))
    return step_s, wait


def case_gpu(ctx: BenchContext) -> list[Row]:
    """Learner step time at B=4096 on CUDA and the share of it spent waiting for data."""
    import torch

    if not torch.cuda.is_available():
        return [Row("gpu", "learner step B=4096", "ms", [], skipped="skipped: no CUDA")]
    steps, wait = learner_steps(ctx, "cuda", 4096, 10 if ctx.quick else 20)
    name = torch.cuda.get_device_name(0)
    return [
        Row("gpu", "learner step B=4096 (fwd+bwd+Adam)", "ms", [s * 1e3 for s in steps],
            lower_is_better=True, note=f"{name}, GNNModule defaults"),
        Row("gpu", "time waiting for data", "fraction", wait, lower_is_better=True,
            note="next(iter_torch_batches) / step"),
    ]


CASE_FUNCTIONS: dict[str, Callable[[BenchContext], list[Row]]] = {
    "convert": case_convert, "bytes": case_bytes, "prelearner": case_prelearner,
    "pipeline": case_pipeline, "stream": case_stream, "collate": case_collate,
    "memory": case_memory, "gpu": case_gpu,
}
