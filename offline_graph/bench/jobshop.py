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

Run: ``offline-graph experiment --task jobshop --quick --output r.json`` (tiny: 6x6 logs with
the extra features, BC 5 iterations, one 15x15 instance) or e.g. ``offline-graph experiment
--task jobshop --sizes 10x10 15x15 --episodes 60 --time-limit 1.5 --extra-features --lr 3e-3
--iterations 40 --algos bc --seeds 0 1 --groups all --time-100x20 --output r.json``: the options
are the declared task's (:mod:`offline_graph.cli.experiments.jobshop`), this module runs them
(:func:`run_and_write`). The old ``python -m offline_graph.bench.jobshop`` says so and exits 2.
``--logs DIR`` keeps the recorded episodes there and reuses them when present;
``--extra-features`` records with ``JobShopConfig(extra_features=True)`` (each candidate's
left-shift start and its slack over the earliest candidate; rows labelled ``+x``); ``--merge
a.json b.json`` combines results files into one table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from offline_graph.bench.jobshop_eval import (
    generated_rollouts,
    module_chooser,
    policy_chooser,
    profile_rollout,
    taillard_gaps,
)
from offline_graph.bench.experiments.jobshop_report import (
    PUBLISHED,
    PUBLISHED_COLUMNS,
    merge,
    save_plots,
    selected,
    summarize,
    table,
)
from offline_graph.bench.jobshop_train import record_logs, train
from offline_graph.env.jobshop_instances import TAILLARD_GROUPS, generate_instance, makespan_lower_bound
from offline_graph.rllib.core.ray_session import quiet_ray_data

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
    "validate": ["8x6"],
    "validate_instances": 2,
}

VALIDATION_SEED = 20_261_128
"""Seed of the held-out generated instances the selected policy is chosen on (``--validate``);
each size draws from its own stream, so a size's instances do not depend on the other sizes."""


def _size(text: str) -> tuple[int, int]:
    """``"JxM"`` as ``(J, M)`` (the experiment's check has already refused other text)."""
    j, m = (int(v) for v in text.lower().split("x"))
    return j, m


def resolve(args: Any) -> Any:
    """``--quick`` applied, ``--groups all`` expanded and ``--sizes`` as ``(J, M)`` pairs, on a
    copy of the parsed options (an ``argparse.Namespace`` or the experiment's Config)."""
    args = argparse.Namespace(**vars(args))
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if args.groups == ["all"]:
        args.groups = list(TAILLARD_GROUPS)
    args.sizes = [_size(s) if isinstance(s, str) else s for s in args.sizes]
    args.validate = [_size(s) if isinstance(s, str) else s for s in getattr(args, "validate", [])]
    return args


def validation_instances(sizes: list[tuple[int, int]], count: int) -> dict[str, list[Any]]:
    """``{"JxM": [(durations, machines), ...]}``: ``count`` generated instances per size, from
    :data:`VALIDATION_SEED` (never a training log's instance, never Taillard's)."""
    out = {}
    for j, m in sizes:
        rng = np.random.default_rng([VALIDATION_SEED, j, m])
        out[f"{j}x{m}"] = [generate_instance(j, m, rng) for _ in range(count)]
    return out


def validate(chooser: Any, instances: dict[str, list[Any]], env_options: dict[str, Any]) -> dict[str, Any]:
    """Greedy schedules of ``chooser`` on the validation instances: per size the makespans,
    the lower bounds (:func:`makespan_lower_bound`) and ``mean_ratio`` (mean makespan / bound);
    ``score`` is the mean of the sizes' ratios (lower is better)."""
    sizes = {}
    for size, group in instances.items():
        spans = [r["makespan"] for r in generated_rollouts(chooser, group, env_options)]
        bounds = [makespan_lower_bound(d, m) for d, m in group]
        ratio = float(np.mean([s / b for s, b in zip(spans, bounds)]))
        sizes[size] = {"makespans": spans, "lower_bounds": bounds, "mean_ratio": ratio}
    return {"sizes": sizes, "score": float(np.mean([v["mean_ratio"] for v in sizes.values()]))}


def _keep_first(store: dict[str, Any]) -> Callable[[str, dict[str, Any]], None]:
    """An ``on_instance`` callback of :func:`taillard_gaps` that keeps the first instance's
    schedule in ``store`` (``instance``, ``start_times`` [J][M], ``makespan``): the Gantt chart."""

    def keep(name: str, res: dict[str, Any]) -> None:
        if not store:
            store.update(
                instance=name, start_times=res["start_times"].tolist(), makespan=int(res["makespan"])
            )

    return keep


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
        rules, checks = {}, validation_instances(args.validate, args.validate_instances)
        rules_validation = {}
        for rule in args.rules:
            rules[rule] = taillard_gaps(policy_chooser(rule), args.groups, args.per_group, None, env_options)
            for r in rules[rule].values():
                r.pop("seconds")
            if checks:
                rules_validation[rule] = validate(policy_chooser(rule), checks, env_options)
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
                if checks:
                    facts["validation"] = validate(chooser, checks, env_options)
                facts["schedule"] = {}
                facts["taillard"] = taillard_gaps(
                    chooser, args.groups, args.per_group, _keep_first(facts["schedule"]), env_options
                )
                secs = [s for g in facts["taillard"].values() for s in g["seconds"]]
                facts["inference_seconds_per_instance"] = float(np.mean(secs))
                facts["label"] = algo + ("+x" if env_options["extra_features"] else "")
                runs.append(facts)
                print(
                    f"{algo} seed {seed}: trained {facts['train_seconds']:.0f} s; generated {J}x{M} "
                    f"makespan {np.mean(spans):.1f} (random {np.mean(random_spans):.1f}); "
                    + (f"validation {facts['validation']['score']:.3f}; " if checks else "")
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
        "validation": {
            "sizes": list(checks),
            "instances": args.validate_instances,
            "seed": VALIDATION_SEED,
            "rules": rules_validation,
        },
        "seconds": time.perf_counter() - t_start,
    }
    result["summary"] = summarize(runs, list(args.groups))
    result["selected"] = selected(result)
    result["table"] = table(result)
    return result


MOVED = (
    "python -m offline_graph.bench.jobshop: the job-shop command line must be `offline-graph "
    "experiment --task jobshop` (found the old entry point). Give it the same options, e.g. "
    "`offline-graph experiment --task jobshop --quick --output r.json`."
)
"""The old entry point's one line: its options were defined twice (here and in the
experiment's declared task), so the command line now has one home."""


def main(argv: list[str] | None = None) -> int:  # noqa: ARG001 (the old signature)
    """The old ``python -m offline_graph.bench.jobshop``: says where the command went, exit 2."""
    print(MOVED, file=sys.stderr)
    return 2


def run_and_write(args: Any) -> dict[str, Any]:
    """Run (or ``--merge``) as the resolved options ``args`` say; print the table, write the
    results JSON to ``--output`` and the two PNGs to ``--plots`` (default: beside the JSON;
    none without either)."""
    result = merge(args.merge) if args.merge else run(args)
    print(result["table"])
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as fh:
            json.dump(result, fh, indent=1, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
    plots = args.plots or (os.path.dirname(os.path.abspath(args.output)) if args.output else None)
    if plots:
        result["plots"] = save_plots(result, plots)
        print("plots: " + ", ".join(result["plots"]))
    return result


if __name__ == "__main__":
    sys.exit(main())
