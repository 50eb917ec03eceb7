"""``offline-graph experiment --task jobshop``: job-shop scheduling learned from logs, measured
on Taillard's benchmark (issue 41; the steps are :mod:`offline_graph.bench.jobshop`'s).

CP-SAT and noisy-expert logs of JobShop-v0 on generated ``--sizes`` instances, each ``--algos``
trained with each of ``--seeds`` through ``offline_graph.configure``, greedy masked rollouts on
the Taillard ``--groups``. Its table is a gap per Taillard group, not a normalized score over
seeds ``0..S-1``: the task declares its own :attr:`~offline_graph.cli.experiments.spec.Task.run`.
Its Config is the one definition of the job-shop options (the old ``python -m
offline_graph.bench.jobshop`` had a copy; it now says where the command went). Written: the results JSON
(``--output``), the two PNGs (``--plots``, default beside it: the gap per group and a Gantt
chart of one schedule, :mod:`offline_graph.bench.experiments.jobshop_report`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from offline_graph.bench import jobshop
from offline_graph.cli.arguments import arg, bad_value, bounded
from offline_graph.cli.experiments.spec import Row, Task
from offline_graph.env.jobshop_instances import TAILLARD_GROUPS
from offline_graph.env.jobshop_rules import JOBSHOP_RULES

ROWS = tuple(Row(a, "logs", a) for a in ("bc", "marwil", "iql", "cql"))


@dataclass(frozen=True)
class Config:
    """Settings of the whole job-shop table (the training settings apply to every run)."""

    output: str | None = None
    """Results JSON path (the table is also printed)."""
    plots: str | None = None
    """Directory of jobshop_gaps.png and jobshop_gantt.png (default: the directory of --output;
    none without either)."""
    logs: str | None = None
    """Episode directory to keep and reuse (default: a temporary directory)."""
    sizes: list[str] = field(default_factory=lambda: ["10x10"])
    """Sizes JxM of the generated instances the logs are recorded on."""
    episodes: int = field(default=100, metadata=bounded(1, hint="Record at least one episode."))
    """Episodes per size and behaviour."""
    epsilon: float = field(default=0.1, metadata=bounded(0.0, 1.0, hint="It is a probability."))
    """The noisy expert's random-action rate."""
    no_noisy: bool = False
    """Record only the expert."""
    time_limit: float = field(default=2.0, metadata=bounded(0.0, hint="CP-SAT needs time."))
    """CP-SAT seconds per instance."""
    time_scale: float = field(default=1000.0, metadata=bounded(0.0, hint="Node time features / it."))
    """The env's time_scale (node time features are divided by it)."""
    extra_features: bool = False
    """Record with JobShopConfig(extra_features=True) (rows labelled +x)."""
    algos: list[Literal["bc", "marwil", "iql", "cql"]] = field(default_factory=lambda: ["bc"])
    """Algorithms trained (a row each)."""
    seeds: list[int] = field(default_factory=lambda: [0])
    """Training seeds of every algorithm."""
    iterations: int = field(default=20, metadata=bounded(1, hint="Train at least once."))
    """algo.train() calls per run."""
    updates: int = field(default=10, metadata=bounded(1, hint="Update at least once."))
    """Learner updates per iteration."""
    batch: int = field(default=128, metadata=bounded(1, hint="It is a number of transitions."))
    """Transitions per learner batch."""
    lr: float = 1e-3
    """Adam learning rate (IQL: actor, critic and value; CQL: the Q network)."""
    hidden: int = 64
    """GNN node embedding width."""
    layers: int = 3
    """Message-passing layers."""
    groups: list[str] = field(default_factory=lambda: ["15x15", "20x15"])
    """Taillard groups evaluated, or all."""
    per_group: int | None = None
    """Instances per group (default: all 10)."""
    rules: list[str] = field(default_factory=lambda: list(JOBSHOP_RULES), metadata=arg(nargs="*"))
    """Dispatching rules measured in the env (none: no rule columns)."""
    generated: int = 10
    """Held-out generated instances (the trained policy against the random one)."""
    validate: list[str] = field(default_factory=list)
    """Sizes JxM of held-out generated instances every trained run (and rule) is also scored on:
    mean makespan / lower bound; the lowest is the table's selected policy, chosen without
    Taillard's instances (none: no selection)."""
    validate_instances: int = field(default=5, metadata=bounded(1, hint="Score on at least one instance."))
    """Generated instances per --validate size."""
    time_100x20: bool = False
    """Profile one greedy schedule of ta71 (100x20)."""
    merge: list[str] | None = None
    """Combine these results JSONs into one table (no run)."""
    quick: bool = False
    """Tiny run for the tests (< 60 s)."""


def check(cfg: Config) -> None:
    """Sizes are JxM, groups Taillard's, rules the env's."""
    for name in ("sizes", "validate"):
        for size in getattr(cfg, name):
            parts = size.lower().split("x")
            if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
                raise bad_value("experiment --task jobshop", cfg, name, "JxM sizes", "For example 10x10.")
    if cfg.groups != ["all"] and not set(cfg.groups) <= set(TAILLARD_GROUPS):
        raise bad_value(
            "experiment --task jobshop", cfg, "groups", f"among {list(TAILLARD_GROUPS)} or all", "J x M."
        )
    if not set(cfg.rules) <= set(JOBSHOP_RULES):
        raise bad_value("experiment --task jobshop", cfg, "rules", f"among {list(JOBSHOP_RULES)}", "Or none.")


def run(cfg: Config) -> dict[str, Any]:
    """The whole table as ``cfg`` says (:func:`offline_graph.bench.jobshop.run_and_write`)."""
    return jobshop.run_and_write(jobshop.resolve(cfg))


TASK = Task(
    name="jobshop",
    prog="experiment --task jobshop",
    description="Job-shop scheduling learned from CP-SAT logs, gaps on Taillard's benchmark.",
    env="offline_graph/JobShop-v0",
    config=Config,
    rows=ROWS,
    quick=dict(jobshop.QUICK),
    data=lambda cfg: {"logs": cfg.logs or "recorded into a temporary directory"},
    trainer="single_agent",
    settings=lambda cfg, row: {},
    targets=lambda stats, scores: [],
    shown=("iterations", "updates", "batch", "lr", "hidden", "layers"),
    baselines=(),
    check=check,
    run=run,
)
