"""Job-shop scheduling learned from logs, measured on Taillard's benchmark (issue 41).

1. Record episodes of ``offline_graph/JobShop-v0`` on instances of L2D's generator (``--sizes``)
   with the CP-SAT expert and a noisy expert (a random allowed operation with probability
   ``--epsilon``), through the recording job ``offline-graph record`` runs
   (:mod:`~offline_graph.bench.jobshop_train`).
2. Train BC (and MARWIL, IQL, CQL: ``--algos``) through RLlib's configs and
   ``offline_graph.configure``, a GNN choosing a node (``NodeAction``), ``--seeds`` seeds each.
3. Greedy masked rollouts of every trained module on the Taillard instances of ``--groups``
   (:mod:`~offline_graph.bench.jobshop_eval`), inference seconds per instance, and the rules
   SPT / MWKR / FDD-MWKR / MOPNR in the same env; optionally one 100x20 schedule profiled.
4. The table: group | ours (mean / min over seeds) | rules measured here | L2D's published gap.

Gap = mean over a group's instances of (makespan - best known upper bound) / upper bound.

Run: ``python -m offline_graph.bench.jobshop --quick --output r.json`` (tiny: 6x6 logs with the
extra features, BC 5 iterations, one 15x15 instance) or e.g. ``python -m
offline_graph.bench.jobshop --sizes 10x10 15x15 --episodes 60 --time-limit 1.5 --extra-features
--lr 3e-3 --iterations 40 --algos bc --seeds 0 1 --groups all --time-100x20 --output r.json``.
``--logs DIR`` keeps the recorded episodes there and reuses them when present;
``--extra-features`` records with ``JobShopConfig(extra_features=True)`` (each candidate's
left-shift start and its slack over the earliest candidate; rows labelled ``+x``); ``--merge
a.json b.json`` combines results files into one table.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

import numpy as np

from offline_graph.bench.jobshop_eval import (
    generated_rollouts,
    module_chooser,
    policy_chooser,
    profile_rollout,
    taillard_gaps,
)
from offline_graph.bench.jobshop_train import ALGOS, record_logs, train
from offline_graph.env.jobshop_instances import TAILLARD_GROUPS, generate_instance
from offline_graph.env.jobshop_rules import JOBSHOP_RULES
from offline_graph.rllib.core.ray_session import quiet_ray_data

PUBLISHED: dict[str, tuple[float, float, float, float, float]] = {
    "15x15": (54.8, 56.7, 47.1, 45.0, 26.0),
    "20x15": (65.2, 60.7, 50.6, 47.7, 30.0),
    "20x20": (64.2, 55.7, 47.6, 42.8, 31.6),
    "30x15": (61.6, 52.6, 45.0, 45.6, 33.0),
    "30x20": (66.0, 63.9, 56.3, 48.2, 33.6),
    "50x15": (51.4, 40.9, 34.8, 30.1, 22.4),
    "50x20": (59.5, 53.9, 41.5, 37.9, 26.5),
    "100x20": (41.0, 32.9, 23.4, 20.2, 13.6),
}
"""Issue 41's table (L2D, NeurIPS 2020, Table 3), in %: :data:`PUBLISHED_COLUMNS`. L2D's rules
ran in L2D's own MDP; its last three entries come from its 30x20 policy."""
PUBLISHED_COLUMNS = ("spt", "mwkr", "fdd_mwkr", "mopnr", "l2d")

QUICK = {
    "sizes": ["6x6"],
    "episodes": 20,
    "epsilon": 0.2,
    "time_limit": 1.0,
    "algos": ["bc"],
    "seeds": [0],
    "iterations": 5,
    "updates": 10,
    "batch": 64,
    "lr": 3e-3,
    "hidden": 32,
    "layers": 2,
    "groups": ["15x15"],
    "per_group": 1,
    "rules": ["mwkr"],
    "generated": 4,
    "time_100x20": False,
    "extra_features": True,
}


def _size(text: str) -> tuple[int, int]:
    try:
        j, m = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"jobshop --sizes: a size must be JxM (found {text!r}). For example 10x10."
        ) from None
    return j, m


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny run for the tests (< 60 s)")
    p.add_argument("--output", default=None, help="results JSON path")
    p.add_argument("--logs", default=None, help="episode directory to keep / reuse (default: a temp dir)")
    p.add_argument("--sizes", nargs="+", default=["10x10"], help="generated instance sizes JxM")
    p.add_argument("--episodes", type=int, default=100, help="episodes per size and behaviour")
    p.add_argument("--epsilon", type=float, default=0.1, help="the noisy expert's random-action rate")
    p.add_argument("--no-noisy", action="store_true", help="record only the expert")
    p.add_argument("--time-limit", type=float, default=2.0, help="CP-SAT seconds per instance")
    p.add_argument(
        "--time-scale", type=float, default=1000.0, help="the env's time_scale (node time features / it)"
    )
    p.add_argument(
        "--extra-features", action="store_true", help="record with JobShopConfig(extra_features=True)"
    )
    p.add_argument("--algos", nargs="+", default=["bc"], choices=ALGOS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--updates", type=int, default=10, help="updates per iteration")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--groups", nargs="+", default=["15x15", "20x15"], help="Taillard groups, or 'all'")
    p.add_argument("--per-group", type=int, default=None, help="instances per group (default all 10)")
    p.add_argument("--rules", nargs="*", default=list(JOBSHOP_RULES))
    p.add_argument("--generated", type=int, default=10, help="held-out generated instances (vs random)")
    p.add_argument("--time-100x20", action="store_true", help="profile one greedy schedule of ta71")
    p.add_argument("--merge", nargs="+", default=None, help="combine these results JSONs (no run)")
    args = p.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if args.groups == ["all"]:
        args.groups = list(TAILLARD_GROUPS)
    args.sizes = [_size(s) if isinstance(s, str) else s for s in args.sizes]
    return args


def record_all(args: argparse.Namespace, logs: str) -> list[dict[str, Any]]:
    """The expert and noisy-expert logs (reused when ``logs`` already holds them)."""
    behaviours = [("expert", 0.0)] + ([] if args.no_noisy else [("mixed", float(args.epsilon))])
    out = []
    for i, (policy, eps) in enumerate(behaviours):
        facts_path = os.path.join(logs, f"{policy}.json")
        if os.path.exists(facts_path):
            with open(facts_path) as fh:
                out.append(json.load(fh))
            continue
        facts = record_logs(
            logs,
            args.sizes,
            args.episodes,
            policy,
            eps,
            100 * i,
            args.time_limit,
            args.time_scale,
            args.extra_features,
        )
        with open(facts_path, "w") as fh:
            json.dump(facts, fh)
        out.append(facts)
        print(
            f"recorded {facts['episodes']} {policy} episodes ({facts['transitions']} transitions) in "
            f"{facts['record_seconds']:.0f} s, CP-SAT {facts['solver_seconds']:.0f} s "
            f"({facts['solver_optimal']} of {facts['solves']} proven optimal)",
            flush=True,
        )
    return out


def summarize(runs: list[dict[str, Any]], groups: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """``{label: {group: {"mean", "min", "seeds"}}}`` of the runs' mean gaps (in %); a run's
    label is its algorithm, ``+x`` with the extra node features."""
    gaps: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        for group in groups:
            if group in run["taillard"]:
                per_algo = gaps.setdefault(run.get("label", run["algo"]), {})
                per_algo.setdefault(group, []).append(100.0 * run["taillard"][group]["mean_gap"])
    return {
        algo: {
            group: {"mean": float(np.mean(v)), "min": float(np.min(v)), "seeds": float(len(v))}
            for group, v in per_group.items()
        }
        for algo, per_group in gaps.items()
    }


def table(result: dict[str, Any]) -> str:
    """Markdown: group | ours (mean / min over seeds) | rules measured here | L2D published."""
    algos = list(result["summary"])
    rules = list(result["rules"])
    head = [f"{a.upper()} mean / min" for a in algos] + [f"{r.upper()} (ours)" for r in rules]
    lines = ["| group | " + " | ".join(head) + " | L2D (published) |", "|---" * (len(head) + 2) + "|"]
    for group in result["groups"]:
        cells = []
        for a in algos:
            c = result["summary"][a].get(group)
            cells.append(f"{c['mean']:.1f}% / {c['min']:.1f}%" if c else "-")
        for r in rules:
            g = result["rules"][r].get(group)
            cells.append(f"{100 * g['mean_gap']:.1f}%" if g else "-")
        lines.append(f"| {group} | " + " | ".join(cells) + f" | {PUBLISHED[group][4]:.1f}% |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray
    import torch

    torch.set_num_threads(1)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        logs = args.logs or tmp
        os.makedirs(logs, exist_ok=True)
        records = record_all(args, logs)
        env_options = {
            "time_scale": float(records[0].get("time_scale", 1000.0)),
            "extra_features": bool(records[0].get("extra_features", False)),
        }
        data = [d for facts in records for d in facts["dirs"]]
        rng = np.random.default_rng(987_654_321)
        J, M = args.sizes[0]
        held_out = [generate_instance(J, M, rng) for _ in range(args.generated)]
        random_rolled = generated_rollouts(policy_chooser("random", 1), held_out, env_options)
        random_spans = [r["makespan"] for r in random_rolled]
        rules = {}
        for rule in args.rules:
            rules[rule] = taillard_gaps(policy_chooser(rule), args.groups, args.per_group, None, env_options)
            for r in rules[rule].values():
                r.pop("seconds")
        if not ray.is_initialized():
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        quiet_ray_data()
        runs, timing = [], None
        options = {
            "hidden": args.hidden,
            "layers": args.layers,
            "batch": args.batch,
            "lr": args.lr,
            "updates": args.updates,
            "env_options": env_options,
        }
        for algo in args.algos:
            for seed in args.seeds:
                module, facts = train(algo, data, seed, args.iterations, **options)
                chooser = module_chooser(module)
                rolled = generated_rollouts(chooser, held_out, env_options)
                spans = [r["makespan"] for r in rolled]
                facts["generated"] = {
                    "size": f"{J}x{M}",
                    "instances": [[d.tolist(), m.tolist()] for d, m in held_out],
                    "makespans": spans,
                    "start_times": [r["start_times"] for r in rolled],
                    "random_makespans": random_spans,
                    "mean_makespan": float(np.mean(spans)),
                    "random_mean_makespan": float(np.mean(random_spans)),
                }
                facts["taillard"] = taillard_gaps(chooser, args.groups, args.per_group, None, env_options)
                secs = [s for g in facts["taillard"].values() for s in g["seconds"]]
                facts["inference_seconds_per_instance"] = float(np.mean(secs))
                facts["label"] = algo + ("+x" if env_options["extra_features"] else "")
                runs.append(facts)
                print(
                    f"{algo} seed {seed}: trained {facts['train_seconds']:.0f} s; generated {J}x{M} "
                    f"makespan {np.mean(spans):.1f} (random {np.mean(random_spans):.1f}); "
                    + ", ".join(f"{g} {100 * v['mean_gap']:.1f}%" for g, v in facts["taillard"].items()),
                    flush=True,
                )
                if args.time_100x20 and timing is None:
                    timing = profile_rollout(module, "ta71", env_options)
                    print(f"ta71 (100x20) greedy schedule: {timing}", flush=True)
    result: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "sizes": [f"{j}x{m}" for j, m in args.sizes],
        "groups": list(args.groups),
        "per_group": args.per_group,
        "env_options": env_options,
        "logs": records,
        "runs": runs,
        "rules": rules,
        "published": {g: dict(zip(PUBLISHED_COLUMNS, v)) for g, v in PUBLISHED.items()},
        "timing_100x20": timing,
        "seconds": time.perf_counter() - t_start,
    }
    result["summary"] = summarize(runs, list(args.groups))
    result["table"] = table(result)
    return result


def merge(paths: list[str]) -> dict[str, Any]:
    """Several results files as one: their runs, rules (per group, first seen wins), logs and
    the 100x20 timing, the summary and table recomputed over the union of their groups."""
    parts = []
    for path in paths:
        with open(path) as fh:
            part = json.load(fh)
        extra = part.get("env_options", {}).get("extra_features", False)
        for r in part["runs"]:
            r.setdefault("label", r["algo"] + ("+x" if extra else ""))
        parts.append(part)
    groups = [g for g in TAILLARD_GROUPS if any(g in p["groups"] for p in parts)]
    rules: dict[str, dict[str, Any]] = {}
    for p in parts:
        for rule, per_group in p["rules"].items():
            for group, cell in per_group.items():
                rules.setdefault(rule, {}).setdefault(group, cell)
    result: dict[str, Any] = {
        "mode": "merged",
        "merged": paths,
        "sizes": parts[0]["sizes"],
        "groups": groups,
        "logs": parts[0]["logs"],
        "runs": [r for p in parts for r in p["runs"]],
        "rules": rules,
        "published": parts[0]["published"],
        "timing_100x20": next((p["timing_100x20"] for p in parts if p.get("timing_100x20")), None),
    }
    result["summary"] = summarize(result["runs"], groups)
    result["table"] = table(result)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    result = merge(args.merge) if args.merge else run(args)
    print(result["table"])
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as fh:
            json.dump(result, fh, indent=1, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
    return result


if __name__ == "__main__":
    main()
