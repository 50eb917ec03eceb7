"""Bench cases of the data path: convert, prelearner, pipeline, stream, collate.

Stock baselines (``ray.rllib`` as installed, no changes):

* ``OfflinePreLearner`` built like ``OfflineData`` builds it (``module_spec`` from
  ``config.get_multi_rl_module_spec``), BC, default RLModule/catalog of the space, on episode
  rows written by ``encode_episode`` (``SingleAgentEpisode.get_state`` msgpack, RLlib's own
  recording format) whose observations are the graphs padded to one flat Box
  (:mod:`offline_graph.bench.stock_data`), or CartPole-sized Box(4) observations.
* Both prelearners get the same episode rows per call, about ``B`` transitions
  (``round(B / mean episode length)`` episodes), so both emit ~B learner rows per call. (RLlib's
  own default, ``B`` episode rows per call, makes the stock path decode ~30x more than it emits.)
* ``torch_geometric``'s ``Batch.from_data_list`` for batching graphs.

Timing (start-up excluded, ``--quick``) is described in :mod:`offline_graph.bench.harness`.
"""

from __future__ import annotations

import os
import shutil
import time
from functools import partial
from statistics import median
from typing import Any, Callable, Iterable

import numpy as np

from offline_graph.bench.data import dir_bytes, read_items
from offline_graph.bench.harness import (
    TRANSITIONS_S,
    BenchContext,
    Row,
    first_call_marked,
    pipeline_rate,
    seconds_per_call,
    stream_rate,
    time_prelearner,
)
from offline_graph.bench.stock_data import cartpole_spaces, padded_spaces
from offline_graph.bench.synthetic import graph_spaces


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
        Row(
            "convert",
            "convert job, warm Ray session (wall)",
            TRANSITIONS_S,
            rates[1:],
            note=f"{n} transitions, fused read+convert+write tasks",
        ),
        Row(
            "convert",
            "convert job, first of the session (wall)",
            TRANSITIONS_S,
            rates[:1],
            note="incl. Ray Data's one-time start (actors, worker imports)",
        ),
        Row(
            "convert",
            "convert job input rate (warm)",
            "MB/s",
            mbs[1:],
            note=f"{bytes_in / 1e6:.1f} MB of episode files",
        ),
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
    # one untimed pass of each side first: a process's first prelearner of a class pays one-time
    # costs (imports, RLlib's lazy set-up) that would fall on whichever side comes first
    time_prelearner(lambda: ctx.ours_prelearner(data.episode_dir), items[: 2 * per], per)
    time_prelearner(lambda: ctx.stock_prelearner(data.padded_dir, padded_spaces(cfg)), padded[: 2 * per], per)
    for _ in range(ctx.repeats):
        ours.append(time_prelearner(lambda: ctx.ours_prelearner(data.episode_dir), items, per))
        ours_big.append(
            time_prelearner(lambda: ctx.ours_prelearner(data.episode_dir), items, ctx.episodes_per_call)
        )
        stock.append(
            time_prelearner(lambda: ctx.stock_prelearner(data.padded_dir, padded_spaces(cfg)), padded, per)
        )
        stock_cp.append(
            time_prelearner(lambda: ctx.stock_prelearner(data.cartpole_dir, cartpole_spaces()), cart, per)
        )
    note = f"{per} episodes (~{per * mean_len:.0f} transitions) per call, B={ctx.batch_size}"
    return [
        Row(
            "prelearner",
            "episodes -> learner rows (graphs)",
            TRANSITIONS_S,
            ours,
            stock,
            f"stock OfflinePreLearner, padded Box({cfg.padded_width})",
            note=note,
        ),
        Row(
            "prelearner",
            "episodes -> learner rows vs CartPole",
            TRANSITIONS_S,
            ours,
            stock_cp,
            "stock OfflinePreLearner, CartPole Box(4)",
            note=note,
        ),
        Row(
            "prelearner",
            f"ours, {ctx.episodes_per_call} episodes per call",
            TRANSITIONS_S,
            ours_big,
            stock,
            f"stock padded at {per} episodes per call",
            note="bigger calls amortize the per-call overhead",
        ),
    ]


def case_pipeline(ctx: BenchContext) -> list[Row]:
    """Parquet -> Ray Data map_batches(prelearner) -> learner batches, 2 CPUs, start-up excluded."""
    ray = ctx.ray()
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.offline.offline_prelearner import OfflinePreLearner

    from offline_graph.rllib.offline.collate_fn import GraphCollateFn
    from offline_graph.rllib.offline.prelearner import GraphOfflinePreLearner

    data, cfg, B = ctx.data, ctx.cfg, ctx.batch_size
    pool = {"compute": ray.data.ActorPoolStrategy(size=2), "num_cpus": 0.5}
    actions_key = f"{DEFAULT_MODULE_ID}/actions"
    count = lambda b: len(b[actions_key])  # noqa: E731
    markers = os.path.join(data.root, "markers")
    runs = 1 if ctx.quick else ctx.repeats

    def ours(input_: str, episodes: bool, batch_size: int) -> Callable[[str], Iterable[Any]]:
        def make(marker: str) -> Iterable[Any]:
            ds = ray.data.read_parquet(input_).map_batches(
                first_call_marked(GraphOfflinePreLearner, marker),
                batch_size=batch_size,
                batch_format="pyarrow",
                fn_constructor_kwargs={
                    "config": ctx.graph_config(input_, episodes),
                    "spaces": graph_spaces(cfg),
                },
                **pool,
            )
            return ds.iter_torch_batches(batch_size=B, collate_fn=GraphCollateFn(), drop_last=True)

        return make

    def stock(marker: str) -> Iterable[Any]:
        ds = ray.data.read_parquet(data.padded_dir).map_batches(
            first_call_marked(OfflinePreLearner, marker),
            batch_size=ctx.stock_episodes_per_call,
            zero_copy_batch=True,
            fn_constructor_kwargs=ctx.stock_kwargs(data.padded_dir, padded_spaces(cfg)),
            **pool,
        )
        return ds.iter_batches(batch_size=B)

    res: dict[str, list[tuple[float, float]]] = {"ep": [], "rows": [], "stock": []}
    for _ in range(runs):
        res["ep"].append(pipeline_rate(ours(data.episode_dir, True, ctx.episodes_per_call), count, markers))
        res["rows"].append(pipeline_rate(ours(ctx.converted_dir, False, 8 * B), count, markers))
        res["stock"].append(pipeline_rate(stock, count, markers))

    def rates(key: str) -> list[float]:
        return [r for r, _ in res[key]]

    def startup(key: str) -> str:
        return f"start-up {median(s for _, s in res[key]):.0f} s excluded"

    base = (
        f"stock OfflinePreLearner -> iter_batches on padded episodes, "
        f"{ctx.stock_episodes_per_call} episodes per call ({startup('stock')})"
    )
    return [
        Row(
            "pipeline",
            "episode files -> GraphCollateFn batches",
            TRANSITIONS_S,
            rates("ep"),
            rates("stock"),
            base,
            note=f"{ctx.episodes_per_call} episodes per call, {startup('ep')}",
        ),
        Row(
            "pipeline",
            "converted rows -> GraphCollateFn batches",
            TRANSITIONS_S,
            rates("rows"),
            rates("stock"),
            base,
            note=f"{8 * B} rows per call, {startup('rows')}",
        ),
    ]


def case_stream(ctx: BenchContext) -> list[Row]:
    """Converted rows -> ``iter_torch_batches(collate_fn=GraphCollateFn())`` (no prelearner),
    timed from the first batch."""
    ray = ctx.ray()
    from ray.rllib.core import DEFAULT_MODULE_ID

    from offline_graph.rllib.offline.collate_fn import GraphCollateFn

    B, actions_key = ctx.batch_size, f"{DEFAULT_MODULE_ID}/actions"
    ours, stock = [], []
    for _ in range(1 if ctx.quick else ctx.repeats):
        ours.append(
            stream_rate(
                ray.data.read_parquet(ctx.converted_dir).iter_torch_batches(
                    batch_size=B, collate_fn=GraphCollateFn(), drop_last=True
                ),
                lambda b: len(b[actions_key]),
            )[0]
        )
        stock.append(
            stream_rate(
                ray.data.read_parquet(ctx.data.padded_rows_dir).iter_torch_batches(
                    batch_size=B, drop_last=True
                ),
                lambda b: len(b["actions"]),
            )[0]
        )
    return [
        Row(
            "stream",
            "converted rows -> learner batches",
            TRANSITIONS_S,
            ours,
            stock,
            "iter_torch_batches over padded rows (Ray tensor column)",
            note=f"B={B}",
        )
    ]


def case_collate(ctx: BenchContext) -> list[Row]:
    """Batching B graphs: ``collate`` / ``table_to_batch`` vs ``Batch.from_data_list``."""
    import torch
    from torch_geometric.data import Batch, Data

    from offline_graph.data.graphs.collate import collate
    from offline_graph.data.learning.transitions import table_to_batch, Transitions

    graphs = ctx.data.episodes.transition_graphs()
    rng = np.random.default_rng(0)
    rows = []
    for B in (256, 1024):
        reps: dict[str, list[float]] = {"cols": [], "table": [], "pyg": []}
        for _ in range(ctx.repeats):
            idx = rng.integers(0, len(graphs), B)
            cols = graphs.take(idx)
            n = len(idx)
            table = Transitions.from_steps(
                cols, np.zeros(n, np.int64), np.zeros(n), np.array([n]), [True], [False], ["e"], 1.0
            ).to_arrow(columns=["actions", "x", "edge_index", "edge_attr"])
            data = [
                Data(
                    x=torch.from_numpy(g["x"]),
                    edge_index=torch.from_numpy(np.ascontiguousarray(g["edge_index"])),
                    edge_attr=torch.from_numpy(g["edge_attr"]),
                )
                for g in (cols.graph(i) for i in range(n))
            ]
            reps["cols"].append(B / seconds_per_call(partial(collate, cols)))
            reps["table"].append(B / seconds_per_call(partial(table_to_batch, table)))
            reps["pyg"].append(B / seconds_per_call(partial(Batch.from_data_list, data)))
        base = "torch_geometric Batch.from_data_list (Data objects prebuilt)"
        rows += [
            Row("collate", f"collate(GraphColumns) B={B}", "graphs/s", reps["cols"], reps["pyg"], base),
            Row("collate", f"table_to_batch(Arrow) B={B}", "graphs/s", reps["table"], reps["pyg"], base),
        ]
    return rows
