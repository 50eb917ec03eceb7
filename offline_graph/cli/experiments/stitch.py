"""``offline-graph experiment --task stitch`` (alias ``offline-graph stitch-experiment``): BC,
MARWIL, IQL and CQL on the same Stitch-v0 logs, seeds, and the expert-data control.

Both data sets are recorded first into ``<output>/data`` from ``offline_graph/Stitch-v0``
(:mod:`offline_graph.env.stitch`): ``logs``, the behaviour ``stitch`` (door probability
``--logs-epsilon`` 0.15) with ``{"hub_start_prob": 0.5}``, 2000 episodes, seed 1: it prefers a
trap at the start, and the door's worth shows only in the episodes that start at the hub;
``expert``, 1000 expert episodes, seed 2, in the default config. Rows: ``bc``, ``marwil-1``,
``iql``, ``cql`` on the logs; ``bc-expert``, ``iql-expert``, ``cql-expert`` on the expert data
(IQL and CQL with the same ``--iql-beta``, ``--expectile``, ``--cql-alpha`` and ``--tau``
everywhere). Every module is evaluated greedily in the *default* config (every episode starts
at the start graph) on the same seeded episodes as the expert, the random policy and the logs'
behaviour. Targets (issue "Learn better than the logs"): IQL and CQL on the logs score >= 80 on
every seed; BC and MARWIL stay within 10 points of the behaviour's score; on the expert data
IQL and CQL score no more than 5 points below BC.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from offline_graph.cli.arguments import arg, bounded
from offline_graph.cli.experiments.spec import Baseline, Logged, Row, Task, TrainingConfig
from offline_graph.cli.experiments.targets import at_least, gap, near, present

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


@dataclass(frozen=True)
class Config(TrainingConfig):
    """Settings of the whole table (the training settings apply to every run); the modules
    are evaluated in the env's default config."""

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
    rows: list[str] = field(
        default_factory=lambda: [r.key for r in ROWS], metadata=arg(choices=[r.key for r in ROWS])
    )
    """Rows to run (keys of the table)."""


def data(cfg: Config) -> dict[str, Logged | str]:
    return {
        "logs": Logged(
            "stitch", cfg.logs_epsilon, cfg.logs_episodes, 1, {"hub_start_prob": cfg.hub_start_prob}
        ),
        "expert": Logged("expert", 0.0, cfg.expert_episodes, 2),
    }


def settings(cfg: Config, row: Row) -> dict[str, Any]:
    """The env (evaluated in its default config) and the value-based settings of the row."""
    value: dict[str, Any] = {"env": ENV}
    if row.algo in ("iql", "cql"):
        value["tau"] = cfg.tau
    if row.algo == "iql":
        value.update(beta=cfg.iql_beta if row.beta is None else row.beta, expectile=cfg.expectile)
    elif row.algo == "cql":
        value.update(cql_alpha=cfg.cql_alpha)
    else:
        value.update(beta=row.beta)
    return value


def targets(stats: dict[str, dict[str, Any]], scores: dict[str, float]) -> list[dict[str, Any]]:
    """IQL / CQL on the logs >= 80 on every seed; BC / MARWIL within 10 of the behaviour; IQL /
    CQL on the expert data at most 5 below BC."""
    behaviour = scores.get("behaviour", 0.0)
    return present(
        *(at_least(stats, key, "min", 80.0) for key in ("iql", "cql")),
        *(near(stats, key, "behaviour", behaviour, 10.0) for key in ("bc", "marwil-1")),
        *(gap(stats, key, "bc-expert", -5.0) for key in ("iql-expert", "cql-expert")),
    )


TASK = Task(
    name="stitch",
    prog="stitch-experiment",
    description="Train the stitching table (BC / MARWIL / IQL / CQL on Stitch-v0 logs, expert control).",
    env=ENV,
    config=Config,
    rows=ROWS,
    quick={
        "seeds": 1,
        "logs_episodes": 100,
        "expert_episodes": 50,
        "iterations": 2,
        "eval_every": 1,
        "eval_episodes": 10,
    },
    data=data,
    trainer="single_agent",
    settings=settings,
    targets=targets,
    shown=(
        "updates_per_iteration",
        "batch_size",
        "lr",
        "hidden",
        "layers",
        "iql_beta",
        "expectile",
        "cql_alpha",
        "tau",
        "logs_epsilon",
        "hub_start_prob",
    ),
    baselines=(
        Baseline("expert", "expert", 0.0),
        Baseline("random", "random", 0.0),
        Baseline("behaviour", "stitch", "logs_epsilon"),
    ),
)


def main(argv: list[str] | None = None) -> int:
    """``offline-graph experiment --task stitch`` (what ``offline_graph.cli.stitch_experiment.main`` was)."""
    from offline_graph.cli.experiments.runner import main_for

    return main_for("stitch", argv)
