"""The multi-agent learning-quality table: BC / MARWIL on TeamEnv episodes, seeds, per module.

Usage::

    offline-graph ma-experiment --output runs/ma-experiment          # the full table
    python pipelines/ma_experiment.py --quick --output /tmp/mae      # a smoke run (~1 min)

Rows (each trained with ``--seeds`` seeds ``0..S-1``; see :data:`ROWS`): ``bc-expert`` (BC on
the expert data), ``bc-mixed`` (BC on the mixed-quality data) and ``marwil-mixed`` (MARWIL
beta=1, ``--gamma``, on the mixed-quality data). Both data sets are recorded first into
``<output>/data`` from ``offline_graph/Team-v0`` (``offline-graph record --policy expert
--episodes 2000 --seed 0`` and ``--policy mixed --epsilon 0.6 --episodes 2000 --seed 1``, in
this process). Every run trains one GNN module per agent kind (``color``, ``pick``; mapped by
``team_policy_mapping_fn``) in one Ray session, then scores each module with
``evaluate_multi_agent_module`` on seeded episodes where the env's expert and random policies
play too (``normalized`` = ``100 * (module - random) / (expert - random)`` per module).
Written to ``--output``: ``results.json`` (settings, every run, statistics, targets) and
``results.md`` (the table, also printed; a line per target).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from offline_graph.cli.arguments import arg, bounded, check_bounds, parse_config, parser_for, run_job
from offline_graph.cli.experiment import Row, begin
from offline_graph.cli.experiment_report import row_stats, write_results
from offline_graph.cli.experiment_run import record_episodes
from offline_graph.cli.train_config import quiet_ray_data
from offline_graph.rllib.evaluation.evaluate import DEFAULT_EVAL_SEED

ENV = "offline_graph/Team-v0"
ROWS = (
    Row("bc-expert", "expert", "bc"),
    Row("bc-mixed", "mixed", "bc"),
    Row("marwil-mixed", "mixed", "marwil", beta=1.0),
)
QUICK: dict[str, Any] = {
    "seeds": 1,
    "expert_episodes": 30,
    "mixed_episodes": 30,
    "iterations": 1,
    "eval_episodes": 6,
}
"""What --quick sets (a smoke run: tested for running, not for scores)."""


@dataclass(frozen=True)
class Config:
    """Settings of the whole table (the training settings apply to every run)."""

    output: str
    """Output directory: results.json, results.md and data/ (the recorded episodes)."""
    seeds: int = field(default=3, metadata=bounded(1, hint="Each row is trained once per seed."))
    """Training seeds per row (0..seeds-1)."""
    rows: list[str] = field(
        default_factory=lambda: [r.key for r in ROWS], metadata=arg(choices=[r.key for r in ROWS])
    )
    """Rows to run (keys of the table)."""
    expert_episodes: int = field(default=2000, metadata=bounded(1, hint="Record at least one episode."))
    """Episodes of the expert data (recording seed 0)."""
    mixed_episodes: int = field(default=2000, metadata=bounded(1, hint="Record at least one episode."))
    """Episodes of the mixed-quality data (recording seed 1)."""
    epsilon: float = field(
        default=0.6, metadata=bounded(0.0, 1.0, hint="It is the probability of a random action.")
    )
    """Probability of a uniformly random action in the mixed-quality data."""
    iterations: int = field(default=100, metadata=bounded(1, hint="Train at least once."))
    """algo.train() calls per run."""
    eval_episodes: int = field(
        default=200, metadata=bounded(1, hint="The table is made of evaluation scores.")
    )
    """Evaluation episodes per run (module, expert and random play the same seeds)."""
    eval_seed: int = DEFAULT_EVAL_SEED
    """Seed of the evaluation episodes (not a recording seed)."""
    gamma: float = field(default=0.99, metadata=bounded(0.0, 1.0, hint="It discounts MARWIL's returns."))
    """Discount of the MARWIL rows' advantages."""
    adv_norm_rate: float = field(
        default=0.01, metadata=bounded(0.0, 1.0, hint="It is a moving-average rate.")
    )
    """MARWIL's moving_average_sqd_adv_norm_update_rate (RLlib's 1e-8 keeps advantages divided
    by 10: with Team-v0's 0/1 rewards exp(beta * A / 10) ~ 1 and MARWIL is BC)."""
    layers: int = field(default=3, metadata=bounded(1, hint="The GNN needs a layer."))
    """Message-passing layers of each module."""
    hidden: int = field(default=64, metadata=bounded(1, hint="It is the node embedding width."))
    """GNN node embedding width."""
    batch_size: int = field(default=256, metadata=bounded(1, hint="It is a batch size."))
    """Transitions per learner batch (train_batch_size_per_learner)."""
    lr: float = field(default=1e-3, metadata=bounded(0.0, low_open=True, hint="It is Adam's step size."))
    """Adam learning rate."""
    num_learners: int = field(default=0, metadata=bounded(0, hint="0 trains in this process."))
    """RLlib learner actors (0: the learner runs in this process)."""
    torch_threads: int = field(default=1, metadata=bounded(0, hint="0 leaves torch's default."))
    """torch intra-op threads of this process (0 leaves torch's default); one, as in
    offline-graph experiment: on a shared 2-CPU machine more made iterations much slower."""
    quick: bool = False
    """Smoke run: sets seeds=1, expert_episodes=60, mixed_episodes=60, iterations=2,
    eval_episodes=10 (overriding those flags)."""


def build_parser() -> argparse.ArgumentParser:
    """The command line of :class:`Config` (one option per field)."""
    return parser_for(
        Config,
        "offline-graph ma-experiment",
        "Train the multi-agent learning-quality table (BC / MARWIL on TeamEnv, seeds, per module).",
    )


def parse_args(argv: list[str] | None = None) -> Config:
    """Command line -> :class:`Config` (--quick applied; exits with status 2 on bad values)."""
    cfg = parse_config(build_parser(), Config, argv, lambda c: check_bounds("ma-experiment", c))
    return dataclasses.replace(cfg, **QUICK) if cfg.quick else cfg


def rows_of(cfg: Config) -> list[Row]:
    """The rows of :data:`ROWS` that ``--rows`` selects, in table order."""
    return [r for r in ROWS if r.key in cfg.rows]


# --------------------------------------------------------------------------- data
def record_data(cfg: Config, policy: str, episodes: int, seed: int) -> tuple[str, str]:
    """(path, how it was made) of TeamEnv episodes recorded in this process into <output>/data."""
    eps = cfg.epsilon if policy == "mixed" else 0.0
    out = os.path.join(cfg.output, "data", f"{policy}-eps{eps:g}-n{episodes}-s{seed}")
    return record_episodes(out, policy, eps, episodes, seed, env=ENV)


# --------------------------------------------------------------------------- runs
MODULES = ("color", "pick")
"""The trained modules (one per agent kind of TeamEnv)."""
RESULT_KEYS = ("mean_return", "normalized", "illegal_actions", "expert_return", "random_return")
"""What results.json keeps of each module's evaluation."""


def build_config(row: Row, data: str, seed: int, s: Config) -> Any:
    """The RLlib multi-agent BC / MARWIL config of one run (``offline_graph.configure``d)."""
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.algorithms.marwil import MARWILConfig

    import offline_graph
    from offline_graph.rllib.algorithms.team_config import team_offline_config

    marwil: dict[str, Any] = (
        {"beta": row.beta, "gamma": s.gamma, "moving_average_sqd_adv_norm_update_rate": s.adv_norm_rate}
        if row.algo == "marwil"
        else {}
    )
    algo = MARWILConfig() if row.algo == "marwil" else BCConfig()
    model_config = {"hidden": s.hidden, "layers": s.layers}
    config = (
        team_offline_config(algo, data, {kind: kind for kind in MODULES}, model_config, MODULES)
        .training(train_batch_size_per_learner=s.batch_size, lr=s.lr, **marwil)
        .learners(num_learners=s.num_learners)
        .debugging(seed=seed)
    )
    return offline_graph.configure(config)


def train_run(row: Row, data: str, seed: int, s: Config, progress: Callable[[str], None]) -> dict[str, Any]:
    """Train one (row, seed) (Ray already up) and evaluate both modules; returns the run record
    of results.json. ``progress`` gets a line per iteration."""
    from offline_graph.env.team import TeamEnv
    from offline_graph.env.team_policies import team_policy_mapping_fn
    from offline_graph.rllib.evaluation.ma_evaluation import evaluate_multi_agent_module

    t0 = time.perf_counter()
    algo = build_config(row, data, seed, s).build_algo()
    try:
        for i in range(s.iterations):
            algo.train()
            progress(
                f"{row.key:<13} seed {seed}: iteration {i + 1}/{s.iterations}  "
                f"{time.perf_counter() - t0:.0f}s"
            )
        train_s = time.perf_counter() - t0
        modules = {m: algo.get_module(m) for m in MODULES}
        ev = evaluate_multi_agent_module(
            modules,
            TeamEnv(),
            episodes=s.eval_episodes,
            seed=s.eval_seed,
            policy_mapping_fn=team_policy_mapping_fn,
        )
    finally:
        algo.stop()
        del algo
        gc.collect()  # the learners' Ray Data iterators, while Ray still runs
    return {
        "row": row.key,
        "seed": seed,
        "iterations": s.iterations,
        "modules": {m: {k: ev["per_module"][m].get(k) for k in RESULT_KEYS} for m in MODULES},
        "train_seconds": train_s,
        "seconds": time.perf_counter() - t0,
    }


# --------------------------------------------------------------------------- table
def module_stats(runs: list[dict[str, Any]], module: str) -> dict[str, Any]:
    """:func:`~offline_graph.cli.experiment_report.row_stats` of one module's normalized scores."""
    return row_stats([{"score": r["modules"][module]["normalized"], "seconds": r["seconds"]} for r in runs])


def stats_of(rows: list[Row], runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{row key: {module: stats}}`` over the seeds of each row."""
    return {
        row.key: {m: module_stats([r for r in runs if r["row"] == row.key], m) for m in MODULES}
        for row in rows
    }


def targets(stats: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The two targets, per module: BC on expert data >= 95; MARWIL - BC on mixed data >= 10."""
    out = []
    if "bc-expert" in stats:
        means = {m: stats["bc-expert"][m]["mean"] for m in MODULES}
        out.append(
            {
                "target": "BC expert >= 95 per module",
                "values": means,
                "met": {m: v >= 95 for m, v in means.items()},
            }
        )
    if "bc-mixed" in stats and "marwil-mixed" in stats:
        diff = {m: stats["marwil-mixed"][m]["mean"] - stats["bc-mixed"][m]["mean"] for m in MODULES}
        out.append(
            {
                "target": "MARWIL - BC on mixed >= 10 per module",
                "values": diff,
                "met": {m: v >= 10 for m, v in diff.items()},
            }
        )
    return out


def markdown(result: dict[str, Any], rows: list[Row]) -> str:
    """results.md: a line per (row, module), the target lines and a line of settings."""
    s, stats = result["settings"], result["stats"]
    lines = [
        "| row | data | algorithm | module | normalized mean | std | min - max | per seed | s / run |",
        "|-----|------|-----------|--------|----------------:|----:|----------:|----------|--------:|",
    ]
    for row in rows:
        for m in MODULES:
            st = stats[row.key][m]
            seeds = ", ".join(f"{v:.1f}" for v in st["scores"])
            lines.append(
                f"| {row.key} | {row.data} | {row.label} | {m} | {st['mean']:.1f} | {st['std']:.1f} | "
                f"{st['min']:.1f} - {st['max']:.1f} | {seeds} | {st['seconds_per_run']:.0f} |"
            )
    lines.append("")
    for t in result["targets"]:
        parts = "; ".join(
            f"{m} {v:+.1f} {'met' if t['met'][m] else 'not met'}" for m, v in t["values"].items()
        )
        lines.append(f"- {t['target']}: {parts}")
    mean_base = {
        p: float(np.mean([r["modules"][m][f"{p}_return"] for r in result["runs"] for m in MODULES]))
        for p in ("expert", "random")
    }
    lines.append(
        f"\nSeeds 0..{s['seeds'] - 1}, {s['iterations']} iterations, gamma {s['gamma']:g} and "
        f"advantage-norm rate {s['adv_norm_rate']:g} (MARWIL), "
        f"hidden {s['hidden']}, layers {s['layers']}, {s['num_learners']} learners; "
        f"{s['eval_episodes']} evaluation episodes (seed {s['eval_seed']}), expert return "
        f"{mean_base['expert']:.2f}, random {mean_base['random']:.2f} (mean over modules). "
        f"Data: {result['data']['expert_made_by']}; {result['data']['mixed_made_by']}. "
        f"Wall time {result['wall_seconds'] / 60:.1f} min."
    )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- main
def run(cfg: Config) -> dict[str, Any]:
    """The whole table as ``cfg`` says; returns what results.json holds."""
    from offline_graph.rllib.core.ray_session import start_ray, stop_ray

    t0 = begin(cfg)
    rows = rows_of(cfg)
    data, made_by = {}, {"expert_made_by": "no expert data", "mixed_made_by": "no mixed data"}
    for kind, policy, episodes, seed in (
        ("expert", "expert", cfg.expert_episodes, 0),
        ("mixed", "mixed", cfg.mixed_episodes, 1),
    ):
        if any(r.data == kind for r in rows):
            data[kind], made_by[f"{kind}_made_by"] = record_data(cfg, policy, episodes, seed)

    started = start_ray(2)
    quiet_ray_data()
    runs: list[dict[str, Any]] = []
    try:
        for row in rows:
            for seed in range(cfg.seeds):
                r = train_run(row, data[row.data], seed, cfg, lambda line: print(line, flush=True))
                runs.append(r)
                scores = "  ".join(f"{m} {r['modules'][m]['normalized']:.1f}" for m in MODULES)
                print(
                    f"{row.key:<13} seed {seed}: {r['iterations']} iterations, {scores}  "
                    f"({r['seconds']:.0f}s, train {r['train_seconds']:.0f}s)  "
                    f"[{(time.perf_counter() - t0) / 60:.1f} min]",
                    flush=True,
                )
    finally:
        stop_ray(started)

    stats = stats_of(rows, runs)
    result = {
        "settings": dataclasses.asdict(cfg),
        "env": ENV,
        "data": {**data, **made_by},
        "runs": runs,
        "stats": stats,
        "targets": targets(stats),
    }
    return write_results(cfg.output, result, t0, lambda r: markdown(r, rows))


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    quiet_ray_data()
    return run_job("ma-experiment", run, cfg)


if __name__ == "__main__":
    sys.exit(main())
