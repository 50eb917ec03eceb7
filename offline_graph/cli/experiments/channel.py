"""``offline-graph experiment --task channel``: BC and IQL on Channel-v0 logs with the graph-level
parts of its ``Dict`` observation and without them, seeds.

Channel-v0 (:mod:`offline_graph.env.channel`) pays 1 per step for the node of the type that its
graph-level part ``channel`` asks for with the largest value: a policy that sees the graph
alone can only guess the type (a third of the expert's return). The logs, ``logs``, are
recorded first into ``<output>/data``: the expert with a random node on ``--logs-epsilon``
(0.2) of the steps, ``--logs-episodes`` episodes, recording seed 0. Rows: ``bc`` and ``iql``
(the module reads ``globals``, the parts flattened), ``bc-graph-only`` and ``iql-graph-only``
(the same data and network with ``model_config["globals"] = False``, ``offline-graph train
--graph-only``). Every module is evaluated greedily on the same seeded episodes as the expert
and the random policy. Targets (issue "Observations as real systems log them"): BC and IQL
with the parts score at least 30 points above the same algorithm on the graph alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from offline_graph.cli.arguments import arg, bounded
from offline_graph.cli.experiments.spec import Baseline, Logged, Row, Task, TrainingConfig
from offline_graph.cli.experiments.targets import gap, present

ENV = "offline_graph/Channel-v0"
ROWS = (
    Row("bc", "logs", "bc"),
    Row("iql", "logs", "iql"),
    Row("bc-graph-only", "logs", "bc", graph_only=True),
    Row("iql-graph-only", "logs", "iql", graph_only=True),
)


@dataclass(frozen=True)
class ExpertLogsConfig(TrainingConfig):
    """Settings of a table trained on one noisy expert's logs (the training settings apply to
    every run): Channel-v0's here, Dispatch-v0's (:mod:`offline_graph.cli.experiments.dispatch`)."""

    iterations: int = field(default=6, metadata=bounded(1, hint="Train at least once."))
    """algo.train() calls per run."""
    updates_per_iteration: int = 30
    """Learner updates per iteration."""
    batch_size: int = 64
    """Transitions per learner batch."""
    lr: float = 3e-3
    """Adam learning rate (IQL: actor, critic and value)."""
    hidden: int = 32
    """GNN node embedding width."""
    eval_every: int = field(
        default=2, metadata=bounded(1, hint="It is the spacing of the learning-curve points.")
    )
    """Evaluate the module every this many iterations (and after the last): the curves."""
    logs_episodes: int = field(default=300, metadata=bounded(1, hint="Record at least one episode."))
    """Episodes of the logs (the expert with random actions, recording seed 0)."""
    logs_epsilon: float = field(
        default=0.2, metadata=bounded(0.0, 1.0, hint="It is the probability of a random action.")
    )
    """Probability of a random action (node, job) in the logs."""


@dataclass(frozen=True)
class Config(ExpertLogsConfig):
    """Settings of the whole table (the training settings apply to every run)."""

    rows: list[str] = field(
        default_factory=lambda: [r.key for r in ROWS], metadata=arg(choices=[r.key for r in ROWS])
    )
    """Rows to run (keys of the table)."""


def data(cfg: ExpertLogsConfig) -> dict[str, Logged | str]:
    return {"logs": Logged("expert", cfg.logs_epsilon, cfg.logs_episodes, 0)}


def settings(cfg: Config, row: Row) -> dict[str, Any]:
    """The env, and whether the module sees the graph-level parts."""
    return {"env": ENV, "graph_only": row.graph_only}


def targets(stats: dict[str, dict[str, Any]], scores: dict[str, float]) -> list[dict[str, Any]]:
    """BC and IQL with the parts >= 30 points above the same algorithm on the graph alone."""
    return present(*(gap(stats, algo, f"{algo}-graph-only", 30.0) for algo in ("bc", "iql")))


QUICK = {"seeds": 1, "logs_episodes": 30, "iterations": 1, "eval_every": 1, "eval_episodes": 5}
"""``--quick`` of an :class:`ExpertLogsConfig` table."""
SHOWN = ("updates_per_iteration", "batch_size", "lr", "hidden", "layers", "logs_epsilon")
BASELINES = (
    Baseline("expert", "expert", 0.0),
    Baseline("random", "random", 0.0),
    Baseline("behaviour", "expert", "logs_epsilon"),
)
"""The expert, random and the logs' behaviour policy, evaluated beside the trained modules."""


def expert_logs_task(
    name: str, description: str, env: str, config: type, rows: Any, settings: Any, targets: Any
) -> Task:
    """The :class:`Task` of a table trained on one noisy expert's logs (an
    :class:`ExpertLogsConfig`): the shared ``--quick``, data, trainer, shown settings and
    baselines, the task's own rows, settings and targets."""
    return Task(
        name=name,
        prog="experiment",
        description=description,
        env=env,
        config=config,
        rows=rows,
        quick=QUICK,
        data=data,
        trainer="single_agent",
        settings=settings,
        targets=targets,
        shown=SHOWN,
        baselines=BASELINES,
    )


TASK = expert_logs_task(
    "channel",
    "Train the graph-level features table (BC / IQL on Channel-v0, with and without the parts).",
    ENV,
    Config,
    ROWS,
    settings,
    targets,
)
