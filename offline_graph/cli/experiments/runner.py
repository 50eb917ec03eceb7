"""The one runner of ``offline-graph experiment``: a task's options parsed (:func:`parse_args`),
its data recorded, its baselines played, every row trained over its seeds in one Ray session,
and results.json / results.md / learning_curves.png written (:func:`run`), the same way for
every task (:mod:`offline_graph.cli.experiments`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from typing import Any, Sequence

import numpy as np

from offline_graph.bench.experiments.results import record_episodes, row_stats, write_results
from offline_graph.cli.arguments import check_bounds, parse_config, parser_for
from offline_graph.cli.experiments.report import epsilon_of, markdown, save_curves
from offline_graph.cli.experiments.runs import SINGLE, TRAINERS
from offline_graph.cli.experiments.spec import Logged, Row, Task


def build_parser(task: Task, tasks: Sequence[str]) -> argparse.ArgumentParser:
    """The command line of ``task.config`` (one option per field) and ``--task``."""
    parser = parser_for(task.config, f"offline-graph experiment --task {task.name}", task.description)
    quick = next(a for a in parser._actions if a.dest == "quick")
    quick.help = f"{quick.help} Sets " + ", ".join(f"{k}={v}" for k, v in task.quick.items()) + "."
    parser.add_argument("--task", choices=list(tasks), default=task.name, help="the table to run")
    return parser


def parse_args(task: Task, argv: Sequence[str] | None, tasks: Sequence[str] = ()) -> Any:
    """Command line -> the task's Config (--quick applied; exits with status 2 on bad values)."""

    def check(cfg: Any) -> None:
        check_bounds(task.prog, cfg)
        if task.check is not None:
            task.check(dataclasses.replace(cfg, **task.quick) if cfg.quick else cfg)

    cfg = parse_config(build_parser(task, tasks or [task.name]), task.config, argv, check)
    return dataclasses.replace(cfg, **task.quick) if cfg.quick else cfg


def rows_of(task: Task, cfg: Any) -> list[Row]:
    """The rows of the task that ``--rows`` selects, in table order."""
    return [r for r in task.rows if r.key in cfg.rows]


def record_data(task: Task, cfg: Any, rows: list[Row]) -> dict[str, str]:
    """Per data key the rows use: its path and how it was made (``<key>_made_by``), recorded
    into ``<output>/data`` unless given."""
    from offline_graph.env.making import DEFAULT_ENV

    used = {r.data for r in rows}
    data: dict[str, str] = {}
    for key, plan in task.data(cfg).items():
        if key not in used:
            continue
        if isinstance(plan, Logged):
            name = f"{key}-{plan.policy}-eps{plan.epsilon:g}-n{plan.episodes}-s{plan.seed}"
            name += "".join(f"-{k}{v}" for k, v in plan.env_config.items())
            data[key], data[f"{key}_made_by"] = record_episodes(
                os.path.join(cfg.output, "data", name),
                plan.policy,
                plan.epsilon,
                plan.episodes,
                plan.seed,
                task.env or DEFAULT_ENV,
                plan.env_config,
            )
        else:
            data[key], data[f"{key}_made_by"] = plan, f"given: {plan}"
    return data


def eval_env(task: Task, data: str) -> str:
    """The env the modules are evaluated in: the task's, or the one ``data`` was recorded in."""
    from offline_graph.cli.train_config import data_metadata
    from offline_graph.data.store.files import scan_files
    from offline_graph.env.making import DEFAULT_ENV

    return task.env or data_metadata(scan_files(data, "raise").files).get("env") or DEFAULT_ENV


def baselines(task: Task, cfg: Any, env: str) -> dict[str, float]:
    """Mean returns of the task's baseline policies on the evaluation episodes."""
    from offline_graph.rllib.evaluation.evaluate import evaluate_policy

    settings = dataclasses.asdict(cfg)
    out = {}
    for b in task.baselines:
        eps = () if b.epsilon is None else (epsilon_of(b.epsilon, settings),)
        out[b.name] = float(
            evaluate_policy(b.policy, env, cfg.eval_episodes, cfg.eval_seed, *eps)["mean_return"]
        )
    return out


def begin(cfg: Any) -> float:
    """torch's threads and the output directory as ``cfg`` says; returns the start time."""
    import torch

    t0 = time.perf_counter()
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    os.makedirs(cfg.output, exist_ok=True)
    return t0


def train_rows(
    task: Task, cfg: Any, rows: list[Row], data: dict[str, str], base: dict[str, float], t0: float
) -> list[dict[str, Any]]:
    """Every row trained with seeds ``0..cfg.seeds-1`` in one Ray session, a line printed per
    run; returns the lines of the table: per row and module, its runs and statistics."""
    from offline_graph.rllib.core.ray_session import quiet_ray_data, start_ray, stop_ray

    trainer = TRAINERS[task.trainer]
    started = start_ray(cfg.num_cpus)
    quiet_ray_data()
    lines: list[dict[str, Any]] = []
    try:
        for row in rows:
            runs: dict[str, list[dict[str, Any]]] = {}
            for seed in range(cfg.seeds):
                got = trainer(task, cfg, row, data[row.data], seed, base)
                for m, r in got.items():
                    runs.setdefault(m, []).append(r)
                r = next(iter(got.values()))
                scores = "  ".join(
                    ("" if m == SINGLE else f"{m} ") + f"score {g['score']:6.1f} (curve {curve_text(g)})"
                    for m, g in got.items()
                )
                print(
                    f"{row.key:<13} seed {seed}: {scores}  ({r['seconds']:.0f}s: train "
                    f"{r['train_seconds']:.0f}s, eval {r['eval_seconds']:.0f}s)  "
                    f"[{(time.perf_counter() - t0) / 60:.1f} min]",
                    flush=True,
                )
            for m, module_runs in runs.items():
                lines.append(
                    {
                        "key": row.key if m == SINGLE else f"{row.key}/{m}",
                        "row": row.key,
                        "module": None if m == SINGLE else m,
                        "data": row.data,
                        "label": row.label,
                        "algo": row.algo,
                        "beta": row.beta,
                        "bag_of_nodes": row.bag_of_nodes,
                        "graph_only": row.graph_only,
                        "runs": module_runs,
                        "stats": row_stats(
                            [r["score"] for r in module_runs], [r["seconds"] for r in module_runs]
                        ),
                    }
                )
    finally:
        stop_ray(started)
    return lines


def curve_text(run: dict[str, Any]) -> str:
    """A run's learning curve as whole scores, for the line printed per run."""
    return " ".join(f"{c['score']:.0f}" for c in run["curve"])


def run(task: Task, cfg: Any) -> dict[str, Any]:
    """The whole table of ``task`` as ``cfg`` says; returns what results.json holds."""
    from offline_graph.rllib.evaluation.evaluate import normalized_score

    t0 = begin(cfg)
    rows = rows_of(task, cfg)
    data = record_data(task, cfg, rows)
    env = eval_env(task, data[rows[0].data])
    base = baselines(task, cfg, env) if task.baselines else {}
    if base:
        print(
            f"evaluation ({cfg.eval_episodes} episodes, seed {cfg.eval_seed}): "
            + ", ".join(f"{k} return {v:.2f}" for k, v in base.items()),
            flush=True,
        )
    lines = train_rows(task, cfg, rows, data, base, t0)
    if not base:  # each run was scored against the expert and random play of its evaluation
        runs = [r for x in lines for r in x["runs"]]
        base = {p: float(np.mean([r[f"{p}_return"] for r in runs])) for p in ("expert", "random")}
    scores = {
        k: normalized_score(v, base["random"], base["expert"])
        for k, v in base.items()
        if k not in ("expert", "random")
    }
    result = {
        "task": task.name,
        "env": env,
        "settings": dataclasses.asdict(cfg),
        "data": data,
        "baselines": base,
        "baseline_scores": scores,
        "rows": lines,
        "targets": task.targets({x["key"]: x["stats"] for x in lines}, scores),
    }
    return write_results(
        os.path.join(cfg.output, "results.json"), result, t0, lambda r: markdown(task, r), save_curves
    )


def main_for(name: str, argv: Sequence[str] | None = None) -> int:
    """``offline-graph experiment --task name`` with ``argv`` (the task's own options)."""
    from offline_graph.cli.arguments import run_job
    from offline_graph.cli.experiments import TASKS, task_of

    task = task_of(name)
    cfg = parse_args(task, argv, TASKS)
    return run_job(task.prog, task.run or (lambda c: run(task, c)), cfg)
