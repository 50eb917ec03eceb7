"""The stitching table: BC, MARWIL, IQL and CQL on the same Stitch-v0 logs, seeds, and the
expert-data control.

Usage::

    offline-graph stitch-experiment --output runs/stitch           # the table (21 runs)
    offline-graph stitch-experiment --quick --output /tmp/stitch   # a smoke run (~1-2 min)

Both data sets are recorded first into ``<output>/data`` from ``offline_graph/Stitch-v0`` (see
:mod:`offline_graph.env.stitch`), in this process:

- ``logs``: ``offline-graph record --env offline_graph/Stitch-v0 --policy stitch --epsilon 0.15
  --env-config '{"hub_start_prob": 0.5}' --episodes 2000 --seed 1``: the behaviour prefers a
  trap at the start; the door's worth shows only in the episodes that start at the hub;
- ``expert``: ``--policy expert --episodes 1000 --seed 2`` in the default config.

Rows (:data:`ROWS`, each trained with seeds ``0..S-1``, one shared Ray session, the settings
of ``offline-graph train`` via :func:`offline_graph.cli.train_config.build_config`): ``bc``,
``marwil-1``, ``iql``, ``cql`` on the logs; ``bc-expert``, ``iql-expert``, ``cql-expert`` on
the expert data. IQL and CQL use the same ``--iql-beta``, ``--expectile``, ``--cql-alpha`` and
``--tau`` on both data sets and every seed. Every module is evaluated greedily in the
*default* config (``hub_start_prob=0``: every episode starts at the start graph) on the same
seeded episodes as the expert, the random policy and the logs' behaviour policy; normalized
score ``100 * (module - random) / (expert - random)``.

Targets (:func:`targets`; issue "Learn better than the logs"): IQL and CQL on the logs score
>= 80 (80% of the expert's 100) on every seed; BC and MARWIL stay within 10 points of the
behaviour's score; on the expert data IQL and CQL score no more than 5 points below BC.
Written to ``--output``: ``results.json``, ``results.md`` (the table and the targets) and
``learning_curves.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from offline_graph.cli import train
from offline_graph.cli.arguments import arg, bounded, check_bounds, parse_config, parser_for, run_job
from offline_graph.cli.experiment import begin
from offline_graph.cli.experiment_report import save_curves, score_table, write_results
from offline_graph.cli.experiment_run import Row, record_episodes, table_train_config, train_rows
from offline_graph.cli.train_config import quiet_ray_data
from offline_graph.rllib.evaluation.evaluate import DEFAULT_EVAL_SEED

ENV = "offline_graph/Stitch-v0"
ROWS = (
    Row("bc", "logs", "bc"),
    Row("marwil-1", "logs", "marwil", beta=1.0),
    Row("iql", "logs", "iql"),
    Row("cql", "logs", "cql"),
    Row("bc-expert", "expert", "bc"),
    Row("iql-expert", "expert", "iql"),
    Row("cql-expert", "expert", "cql"),
)
QUICK: dict[str, Any] = {
    "seeds": 1,
    "logs_episodes": 100,
    "expert_episodes": 50,
    "iterations": 2,
    "eval_every": 1,
    "eval_episodes": 10,
}
"""What --quick sets (a smoke run: tested for running, not for scores)."""


@dataclass(frozen=True)
class Config:
    """Settings of the whole table (the training settings apply to every run)."""

    output: str
    """Output directory: results.json, results.md, learning_curves.png and data/."""
    seeds: int = field(default=3, metadata=bounded(1, hint="Each row is trained once per seed."))
    """Training seeds per row (0..seeds-1)."""
    rows: list[str] = field(
        default_factory=lambda: [r.key for r in ROWS], metadata=arg(choices=[r.key for r in ROWS])
    )
    """Rows to run (keys of the table)."""
    logs_episodes: int = field(default=2000, metadata=bounded(1, hint="Record at least one episode."))
    """Episodes of the logs (behaviour policy stitch, recording seed 1)."""
    logs_epsilon: float = field(
        default=0.15, metadata=bounded(0.0, 1.0, hint="It is the behaviour's door probability.")
    )
    """Probability that the logs' behaviour takes the door at the start graph."""
    hub_start_prob: float = field(
        default=0.5, metadata=bounded(0.0, 1.0, hint="It is the share of episodes starting at the hub.")
    )
    """Env config of the logs: probability that an episode starts at the hub (evaluation: 0)."""
    expert_episodes: int = field(default=1000, metadata=bounded(1, hint="Record at least one episode."))
    """Episodes of the expert data (default config, recording seed 2)."""
    iterations: int = field(default=30, metadata=bounded(1, hint="Train at least once."))
    """algo.train() calls per run."""
    updates_per_iteration: int = 10
    """Learner updates per iteration."""
    batch_size: int = 256
    """Transitions per learner batch."""
    lr: float = 1e-3
    """Adam learning rate (IQL: actor, critic and value; CQL: the Q network)."""
    hidden: int = 64
    """GNN node embedding width."""
    layers: int = 2
    """Message-passing layers."""
    iql_beta: float = field(default=10.0, metadata=bounded(0.0, hint="It is IQL's temperature."))
    """IQL's advantage temperature (the paper's antmaze value)."""
    expectile: float = field(
        default=0.9, metadata=bounded(0.0, 1.0, low_open=True, high_open=True, hint="It is IQL's expectile.")
    )
    """IQL's value expectile (the paper's antmaze value)."""
    cql_alpha: float = field(default=1.0, metadata=bounded(0.0, hint="It is CQL's conservative weight."))
    """CQL's min_q_weight."""
    tau: float = field(default=0.05, metadata=bounded(0.0, 1.0, low_open=True, hint="It is a Polyak rate."))
    """IQL / CQL: Polyak rate of the target Q networks after every gradient step."""
    eval_every: int = field(
        default=5, metadata=bounded(1, hint="It is the spacing of the learning-curve points.")
    )
    """Evaluate the module every this many iterations (and after the last): the curves."""
    eval_episodes: int = field(
        default=100, metadata=bounded(1, hint="The table is made of evaluation scores.")
    )
    """Evaluation episodes per point (the module, expert, random and behaviour play the same
    seeds), in the env's default config."""
    eval_seed: int = DEFAULT_EVAL_SEED
    """Seed of the evaluation episodes (not a recording seed)."""
    quick: bool = False
    """Smoke run: sets seeds=1, logs_episodes=100, expert_episodes=50, iterations=2,
    eval_every=1, eval_episodes=10 (overriding those flags)."""
    num_cpus: int | None = None
    """CPUs for ray.init (default: all)."""
    torch_threads: int = field(default=1, metadata=bounded(0, hint="0 leaves torch's default."))
    """torch intra-op threads of this process (0 leaves torch's default); one, as in
    offline-graph experiment."""


def build_parser() -> argparse.ArgumentParser:
    """The command line of :class:`Config` (one option per field)."""
    return parser_for(
        Config,
        "offline-graph stitch-experiment",
        "Train the stitching table (BC / MARWIL / IQL / CQL on Stitch-v0 logs, seeds, expert control).",
    )


def parse_args(argv: list[str] | None = None) -> Config:
    """Command line -> :class:`Config` (--quick applied; exits with status 2 on bad values)."""
    cfg = parse_config(build_parser(), Config, argv, lambda c: check_bounds("stitch-experiment", c))
    return dataclasses.replace(cfg, **QUICK) if cfg.quick else cfg


def train_config(cfg: Config, row: Row, data: str, seed: int) -> train.Config:
    """The ``offline-graph train`` settings of one run (evaluated in the default env config)."""
    value: dict[str, Any] = {"tau": cfg.tau} if row.algo in ("iql", "cql") else {}
    if row.algo == "iql":
        value.update(beta=cfg.iql_beta if row.beta is None else row.beta, expectile=cfg.expectile)
    elif row.algo == "cql":
        value.update(cql_alpha=cfg.cql_alpha)
    else:
        value.update(beta=row.beta)
    return table_train_config(cfg, row, data, seed, env=ENV, **value)


def baselines(cfg: Config) -> dict[str, float]:
    """Mean returns of the expert, random and the logs' behaviour policy on the evaluation
    episodes (default config)."""
    from offline_graph.rllib.evaluation.evaluate import evaluate_policy

    eps = {"expert": 0.0, "random": 0.0, "behaviour": cfg.logs_epsilon}
    return {
        name: float(evaluate_policy(policy, ENV, cfg.eval_episodes, cfg.eval_seed, e)["mean_return"])
        for (name, e), policy in zip(eps.items(), ("expert", "random", "stitch"))
    }


def targets(stats: dict[str, dict[str, Any]], behaviour: float) -> list[dict[str, Any]]:
    """The issue's targets that the rows present can check: ``{what, value, holds}`` each."""
    out = []
    for key in ("iql", "cql"):
        if key in stats:
            low = stats[key]["min"]
            out.append({"what": f"{key}: min over seeds >= 80", "value": low, "holds": low >= 80.0})
    for key in ("bc", "marwil-1"):
        if key in stats:
            diff = stats[key]["mean"] - behaviour
            what = f"{key}: mean within 10 of the behaviour's {behaviour:.1f}"
            out.append({"what": what, "value": diff, "holds": abs(diff) <= 10.0})
    for key in ("iql-expert", "cql-expert"):
        if key in stats and "bc-expert" in stats:
            diff = stats[key]["mean"] - stats["bc-expert"]["mean"]
            what = f"{key} - bc-expert: mean >= -5"
            out.append({"what": what, "value": diff, "holds": diff >= -5.0})
    return out


def markdown(result: dict[str, Any]) -> str:
    """results.md: the table, the behaviour's score, the targets and a line of settings."""
    s, base = result["settings"], result["baselines"]
    lines = [*score_table(result["rows"]), ""]
    lines.append(
        f"Logs' behaviour (the stitch policy, door probability {s['logs_epsilon']:g}) on the same "
        f"episodes: return {base['behaviour']:.3f}, normalized score {result['behaviour_score']:.1f}."
    )
    for t in result["targets"]:
        lines.append(f"- {t['what']}: {t['value']:+.1f} ({'holds' if t['holds'] else 'FAILS'})")
    lines.append(
        f"\nSeeds 0..{s['seeds'] - 1}, {s['iterations']} iterations x {s['updates_per_iteration']} "
        f"updates x {s['batch_size']} transitions, lr {s['lr']:g}, hidden {s['hidden']}, layers "
        f"{s['layers']}; IQL beta {s['iql_beta']:g}, expectile {s['expectile']:g}; CQL alpha "
        f"{s['cql_alpha']:g}; tau {s['tau']:g}. {s['eval_episodes']} evaluation episodes (seed "
        f"{s['eval_seed']}, default config): expert return {base['expert']:.2f}, random "
        f"{base['random']:.2f}."
    )
    for key, name in (("logs", "Logs"), ("expert", "Expert data")):
        if result["data"][key] is not None:
            lines[-1] += f" {name}: {result['data'][key + '_made_by']}."
    lines[-1] += f" Wall time {result['wall_seconds'] / 60:.1f} min."
    return "\n".join(lines) + "\n"


def run(cfg: Config) -> dict[str, Any]:
    """The whole table as ``cfg`` says; returns what results.json holds."""
    from offline_graph.rllib.evaluation.evaluate import normalized_score

    t0 = begin(cfg)
    rows = [r for r in ROWS if r.key in cfg.rows]
    root = os.path.join(cfg.output, "data")
    data: dict[str, str] = {}
    if any(r.data == "logs" for r in rows):
        name = f"logs-eps{cfg.logs_epsilon:g}-hub{cfg.hub_start_prob:g}-n{cfg.logs_episodes}"
        data["logs"], data["logs_made_by"] = record_episodes(
            os.path.join(root, name),
            "stitch",
            cfg.logs_epsilon,
            cfg.logs_episodes,
            1,
            ENV,
            {"hub_start_prob": cfg.hub_start_prob},
        )
    if any(r.data == "expert" for r in rows):
        out = os.path.join(root, f"expert-n{cfg.expert_episodes}")
        data["expert"], data["expert_made_by"] = record_episodes(
            out, "expert", 0.0, cfg.expert_episodes, 2, ENV
        )
    base = baselines(cfg)
    behaviour = normalized_score(base["behaviour"], base["random"], base["expert"])
    print(
        f"evaluation ({cfg.eval_episodes} episodes, seed {cfg.eval_seed}, default config): expert "
        f"return {base['expert']:.2f}, random {base['random']:.2f}, behaviour "
        f"{base['behaviour']:.2f} (score {behaviour:.1f})",
        flush=True,
    )
    results = train_rows(cfg, rows, data, train_config, base, t0)
    result = {
        "settings": dataclasses.asdict(cfg),
        "data": {k: data.get(k) for k in ("logs", "logs_made_by", "expert", "expert_made_by")},
        "baselines": base,
        "behaviour_score": behaviour,
        "rows": results,
        "targets": targets({r["key"]: r["stats"] for r in results}, behaviour),
    }
    return write_results(cfg.output, result, t0, markdown, save_curves)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    quiet_ray_data()
    return run_job("stitch-experiment", run, cfg)


if __name__ == "__main__":
    sys.exit(main())
