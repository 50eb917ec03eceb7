"""``offline-graph experiment --task dispatch``: BC and IQL on Dispatch-v0 logs with every node
type of its typed graph and with the job nodes alone, seeds.

Dispatch-v0 (:mod:`offline_graph.env.typed.dispatch`) pays 1 per step for the job of the largest
value among those that fit an idle machine: whether a job is ready is on the machine nodes and
the job-machine edges, so a policy that reads the job nodes alone can only rank by value (about
3.3 of the expert's 8 per episode, normalized score about 27; a random job 1.6). The logs,
``logs``, are recorded first into ``<output>/data``: the expert with a random job on
``--logs-epsilon`` (0.2) of the steps, ``--logs-episodes`` episodes, recording seed 0. Rows:
``bc`` and ``iql`` (the module reads every node and edge type), ``bc-jobs-only`` and
``iql-jobs-only`` (the same data and network with ``model_config["node_types"] = ["job"]``,
``offline-graph train --node-types job``: the job nodes and the edges between jobs, none here).
Every module is evaluated greedily on the same seeded episodes as the expert and the random
policy. Targets: BC and IQL with every node type score at least 30 points above the same
algorithm on the job nodes alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from offline_graph.cli.arguments import arg
from offline_graph.cli.experiments.channel import ExpertLogsConfig, expert_logs_task
from offline_graph.cli.experiments.spec import Row
from offline_graph.cli.experiments.targets import gap, present

ENV = "offline_graph/Dispatch-v0"
JOBS_ONLY = ("job",)
"""The node types of the ``-jobs-only`` rows."""
ROWS = (
    Row("bc", "logs", "bc"),
    Row("iql", "logs", "iql"),
    Row("bc-jobs-only", "logs", "bc", node_types=JOBS_ONLY),
    Row("iql-jobs-only", "logs", "iql", node_types=JOBS_ONLY),
)


@dataclass(frozen=True)
class Config(ExpertLogsConfig):
    """Settings of the whole table (the training settings apply to every run)."""

    rows: list[str] = field(
        default_factory=lambda: [r.key for r in ROWS], metadata=arg(choices=[r.key for r in ROWS])
    )
    """Rows to run (keys of the table)."""


def settings(cfg: Config, row: Row) -> dict[str, Any]:
    """The env, and the node types the module reads (None: all)."""
    return {"env": ENV, "node_types": None if row.node_types is None else list(row.node_types)}


def targets(stats: dict[str, dict[str, Any]], scores: dict[str, float]) -> list[dict[str, Any]]:
    """BC and IQL with every node type >= 30 points above the same algorithm on the jobs alone."""
    return present(*(gap(stats, algo, f"{algo}-jobs-only", 30.0) for algo in ("bc", "iql")))


TASK = expert_logs_task(
    "dispatch",
    "Train the typed-graph table (BC / IQL on Dispatch-v0, all node types and jobs only).",
    ENV,
    Config,
    ROWS,
    settings,
    targets,
)
