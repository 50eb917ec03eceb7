"""Bench case ``memory``: peak RSS of a prelearner worker for N_max 128 vs 512, ours vs stock.

Every measurement runs in its own subprocess (:func:`memory_worker`), so each process's own
peak is measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import tracemalloc
from dataclasses import asdict

import pyarrow as pa

from offline_graph.bench.data import BenchData
from offline_graph.bench.harness import (
    BenchContext,
    Row,
    item_batch,
    learner_rows,
    spawn_worker,
    worker_result,
)
from offline_graph.bench.stock_data import padded_spaces
from offline_graph.bench.synthetic import DataConfig


def case_memory(ctx: BenchContext) -> list[Row]:
    """Peak RSS of a prelearner worker (one subprocess each) for N_max 128 vs 512.

    Two more processes measure ours' live-data peak (tracemalloc for numpy/Python plus the
    Arrow pool), which RSS blurs with allocator slack; tracing would inflate RSS, so those runs
    are separate.
    """
    procs: dict[tuple[str, int], subprocess.Popen] = {}
    for n_max in (128, 512):
        cfg = DataConfig(transitions=ctx.memory_transitions, n_max=n_max, seed=1, episodes_per_file=64)
        bd = BenchData(os.path.join(ctx.data.root, f"memory-{n_max}"), cfg, ctx.memory_transitions)
        for who, path in (
            ("ours", bd.episode_dir),
            ("stock", bd.padded_dir),
            ("ours-traced", bd.episode_dir),
        ):
            args = {
                "who": who,
                "path": path,
                "cfg": asdict(cfg),
                "batch_size": ctx.batch_size,
                "per_call": ctx.stock_episodes_per_call,
            }
            # One process per measurement, all at once: each process's own peak is measured.
            procs[(who, n_max)] = spawn_worker("offline_graph.bench.case_memory", "memory_worker", args)
    res = {key: worker_result("memory", key, proc) for key, proc in procs.items()}
    rows = []
    for n_max in (128, 512):
        o, s = res[("ours", n_max)], res[("stock", n_max)]
        rows.append(
            Row(
                "memory",
                f"peak RSS growth, N_max={n_max}",
                "MB",
                [o["delta_mb"]],
                [s["delta_mb"]],
                f"stock OfflinePreLearner, padded Box(N_max={n_max})",
                True,
                f"peak RSS ours {o['peak_mb']:.0f} MB, stock {s['peak_mb']:.0f} MB; "
                f"{int(o['transitions'])} / {int(s['transitions'])} rows out",
            )
        )
    growth_o = res[("ours", 512)]["delta_mb"] / max(res[("ours", 128)]["delta_mb"], 1.0)
    growth_s = res[("stock", 512)]["delta_mb"] / max(res[("stock", 128)]["delta_mb"], 1.0)
    rows.append(
        Row(
            "memory",
            "growth N_max 128 -> 512 (peak RSS)",
            "x",
            [growth_o],
            [growth_s],
            "stock",
            True,
            "1.0 = flat in N_max",
        )
    )
    live = {n: res[("ours-traced", n)]["live_peak_mb"] for n in (128, 512)}
    rows.append(
        Row(
            "memory",
            "ours live-data peak, N_max=512",
            "MB",
            [live[512]],
            lower_is_better=True,
            note=f"N_max=128: {live[128]:.1f} MB ({live[512] / live[128]:.3f}x); "
            "tracemalloc (numpy, Python) + Arrow pool",
        )
    )
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
            n += learner_rows(pre(item_batch(rb.column(0).to_pylist())))
    peak = _proc_status_mb("VmHWM")
    out = {"baseline_mb": baseline, "peak_mb": peak, "delta_mb": max(peak - baseline, 0.0), "transitions": n}
    if traced:
        out["live_peak_mb"] = (
            tracemalloc.get_traced_memory()[1] + pa.default_memory_pool().max_memory()
        ) / 2**20
    print(json.dumps(out))
