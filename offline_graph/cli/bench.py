"""``offline-graph bench``: ours vs RLlib's stock (padded) path on the same synthetic data.

    offline-graph bench                                  # every case (5-8 min, 2 CPUs)
    offline-graph bench collate prelearner --quick       # a few cases, small data
    offline-graph bench --repeats 5 --json bench.json --plot bench.png --workdir /tmp/bench

Cases: convert, bytes, prelearner, pipeline, stream, collate, memory, gpu (see
``offline_graph.bench.cases``). Each row shows min and median over the repeats for ours and
for the stock baseline, and ``ratio`` = how many times better ours is (median vs median).
Ray runs on 2 CPUs; numbers on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from statistics import median
from typing import Any, Sequence

from offline_graph.bench.cases import CASES
from offline_graph.cli.arguments import arg, config_from, parser_for


@dataclass(frozen=True)
class Args:
    """Command-line settings of a bench run."""

    cases: tuple[str, ...] = field(default=CASES, metadata=arg(positional=True, metavar="CASE"))
    """Cases to run (any of convert, bytes, prelearner, pipeline, stream, collate, memory,
    gpu), always in that order; default: all."""
    quick: bool = False
    """Small data, fewer repeats, one run of each Ray Data job (all cases in ~100 s here)."""
    repeats: int | None = None
    """Repeats per measurement (default 3, --quick too: the prelearner ratio is a median of 3)."""
    json: str | None = None
    """Write the rows and the run's settings to this JSON file."""
    plot: str | None = None
    """Write a bar plot (PNG) of ours vs stock throughput rows."""
    workdir: str | None = None
    """Keep the generated data here and reuse it (default: a temporary directory, removed)."""
    transitions: int | None = None
    """Transitions of the graph data set (default 100000, --quick 20000)."""
    stock_transitions: int | None = None
    """Transitions of the padded / CartPole copies (default 12000, --quick 3000)."""
    batch_size: int = 256
    """B: train_batch_size_per_learner and the learner batch size."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Command line -> :class:`Args` (exits with status 2 on bad values, like argparse)."""
    p = parser_for(Args, "offline-graph bench", __doc__, argparse.RawDescriptionHelpFormatter)
    args = config_from(Args, p.parse_args(argv))
    bad = [c for c in args.cases if c not in CASES]
    if bad:
        p.error(f"CASE must be one of {', '.join(CASES)} (found {', '.join(bad)})")
    if args.repeats is not None and args.repeats < 1:
        p.error(f"--repeats must be >= 1 (found {args.repeats})")
    return replace(args, cases=tuple(c for c in CASES if c in args.cases) or CASES)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


COLUMNS = (
    "case",
    "metric",
    "ours min",
    "ours med",
    "base min",
    "base med",
    "ratio",
    "unit",
    "baseline; notes",
)


def format_table(rows: Sequence[Any]) -> str:
    """The result table: one ``|``-separated line per row (ratio = times better than stock)."""
    lines = []
    for r in rows:
        if r.skipped:
            lines.append((r.case, r.metric, r.skipped, "", "", "", "", "", ""))
            continue
        base = r.base or []
        ratio = r.ratio
        lines.append(
            (
                r.case,
                r.metric,
                _fmt(min(r.ours)),
                _fmt(median(r.ours)),
                _fmt(min(base)) if base else "-",
                _fmt(median(base)) if base else "-",
                f"{ratio:.2f}x" if ratio is not None else "-",
                r.unit,
                "; ".join(x for x in (r.baseline, r.note) if x),
            )
        )
    widths = [max(len(c), *(len(ln[i]) for ln in lines)) if lines else len(c) for i, c in enumerate(COLUMNS)]
    widths[-1] = len(COLUMNS[-1])

    def join(cells: Sequence[str]) -> str:
        return " | ".join(
            c.ljust(w) if i < 2 or i == 7 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    out = [join(COLUMNS), "-+-".join("-" * w for w in widths)]
    out += [join(ln) for ln in lines]
    return "\n".join(out)


def plot_rows(rows: Sequence[Any], path: str) -> None:
    """Grouped bars (log scale) of ours vs stock for the throughput rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sel = [r for r in rows if not r.skipped and r.base and r.unit.endswith("/s")]
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(sel) + 2), 5))
    xs = range(len(sel))
    ax.bar([x - 0.2 for x in xs], [median(r.ours) for r in sel], 0.4, label="offline_graph")
    ax.bar([x + 0.2 for x in xs], [median(r.base) for r in sel], 0.4, label="stock RLlib")
    for x, r in zip(xs, sel, strict=True):
        ax.annotate(f"{r.ratio:.1f}x", (x, median(r.ours)), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(
        [f"{r.case}\n{r.metric}\n[{r.unit}]" for r in sel], fontsize=7, rotation=30, ha="right"
    )
    ax.set_yscale("log")
    ax.set_ylabel("throughput (median of repeats, log)")
    ax.set_title("offline_graph vs stock RLlib (2 CPUs)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from offline_graph.bench.cases import CASE_FUNCTIONS
    from offline_graph.bench.data import BenchData
    from offline_graph.bench.harness import BenchContext
    from offline_graph.bench.synthetic import DataConfig, size_summary

    quick = args.quick
    cfg = DataConfig(transitions=args.transitions or (20_000 if quick else 100_000))
    stock_n = args.stock_transitions or (3_000 if quick else 12_000)
    root = args.workdir or tempfile.mkdtemp(prefix="offline_graph_bench_")
    data = BenchData(root, cfg, stock_n)
    ctx = BenchContext(
        data=data,
        repeats=args.repeats or 3,
        quick=quick,
        batch_size=args.batch_size,
        prelearner_transitions=min(cfg.transitions, 10_000 if quick else 50_000),
        memory_transitions=3_072 if quick else 8_192,
    )
    start = time.perf_counter()
    try:
        t = time.perf_counter()
        sizes = size_summary(data.episodes)
        print(
            f"data: {data.episodes.num_transitions} transitions in {len(data.episodes.ids)} "
            f"episodes; nodes mean {sizes['mean']:.1f} p50 {sizes['p50']:.0f} p99 "
            f"{sizes['p99']:.0f} max {sizes['max']}; {sizes['edges_per_node']:.1f} edges/node; "
            f"F={cfg.num_features} D={cfg.edge_dim} k={cfg.num_actions}; real payload "
            f"{data.mean_payload:.0f} B/transition; stock copies "
            f"{data.stock_episodes.num_transitions} transitions; B={ctx.batch_size}; "
            f"repeats {ctx.repeats}  ({time.perf_counter() - t:.1f} s)",
            flush=True,
        )
        rows = []
        timings: dict[str, float] = {}
        for name in args.cases:
            t = time.perf_counter()
            new = CASE_FUNCTIONS[name](ctx)
            timings[name] = time.perf_counter() - t
            rows += new
            print(f"[{name}: {timings[name]:.0f} s]", flush=True)
        print()
        print(format_table(rows))
        total = time.perf_counter() - start
        print(
            f"\ntotal {total:.0f} s; ratio = times better than stock (median vs median); "
            f"{os.cpu_count()} CPUs, {platform.platform()}"
        )
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(
                    {
                        "args": asdict(args),
                        "data": {
                            **asdict(cfg),
                            **sizes,
                            "payload_bytes": data.mean_payload,
                            "transitions_actual": data.episodes.num_transitions,
                            "stock_transitions_actual": data.stock_episodes.num_transitions,
                        },
                        "case_seconds": timings,
                        "total_seconds": total,
                        "python": sys.version,
                        "rows": [r.as_dict() for r in rows],
                    },
                    fh,
                    indent=2,
                    default=_json_default,
                )
            print(f"json: {args.json}")
        if args.plot:
            plot_rows(rows, args.plot)
            print(f"plot: {args.plot}")
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


if __name__ == "__main__":
    raise SystemExit(main())
