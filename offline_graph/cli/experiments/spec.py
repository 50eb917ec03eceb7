"""What a task of ``offline-graph experiment`` declares (:class:`Task`): its env, its options
(a Config dataclass), the logged data sets (:class:`Logged`: a behaviour and how many
episodes), the rows of its table (:class:`Row`: an algorithm and its settings on a data set),
how a run is trained and scored, the baselines of the normalized score and the targets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from offline_graph.cli.arguments import bounded
from offline_graph.cli.train_config import Algo
from offline_graph.rllib.evaluation.evaluate import DEFAULT_EVAL_SEED


@dataclass(frozen=True)
class TableConfig:
    """The options of every task (a task's Config extends it with its data, rows and
    training settings)."""

    output: str
    """Output directory: results.json, results.md, learning_curves.png and data/."""
    seeds: int = field(default=3, metadata=bounded(1, hint="Each row is trained once per seed."))
    """Training seeds per row (0..seeds-1)."""
    iterations: int = field(default=30, metadata=bounded(1, hint="Train at least once."))
    """algo.train() calls per run."""
    eval_episodes: int = field(
        default=100, metadata=bounded(1, hint="The table is made of evaluation scores.")
    )
    """Evaluation episodes per point (the module and the baseline policies play the same seeds)."""
    eval_seed: int = DEFAULT_EVAL_SEED
    """Seed of the evaluation episodes (not a recording seed)."""
    quick: bool = False
    """Smoke run (tested for running, not for scores)."""
    num_cpus: int | None = None
    """CPUs for ray.init (default: all)."""
    torch_threads: int = field(default=1, metadata=bounded(0, hint="0 leaves torch's default."))
    """torch intra-op threads of this process, where the learner runs (0 leaves torch's
    default). One thread: batches are small, and on a shared 2-CPU machine two spinning
    threads per process made iterations up to ~20x slower."""


@dataclass(frozen=True)
class TrainingConfig(TableConfig):
    """A :class:`TableConfig` with ``offline-graph train``'s settings, the same for every run,
    and the spacing of the learning-curve points (the ``single_agent`` trainer)."""

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
    eval_every: int = field(
        default=5, metadata=bounded(1, hint="It is the spacing of the learning-curve points.")
    )
    """Evaluate the module every this many iterations (and after the last): the curves."""


@dataclass(frozen=True)
class Row:
    """One row of a table: an algorithm on a data set, trained once per seed."""

    key: str
    data: str
    """The data set's key (``expert``, ``mixed``, ``logs``, ...)."""
    algo: Algo
    beta: float | None = None
    """MARWIL's or IQL's temperature (None: the algorithm's default)."""
    bag_of_nodes: bool = False
    graph_only: bool = False
    """The module ignores the graph-level parts of a Dict observation (``--graph-only``)."""
    node_types: tuple[str, ...] | None = None
    """Typed graphs: the node types the module reads (``--node-types``; None: all). A task's
    ``settings`` passes it on (``node_types=row.node_types``)."""

    @property
    def label(self) -> str:
        names = {"bc": "BC", "marwil": "MARWIL", "iql": "IQL", "cql": "CQL"}
        name = names[self.algo] + ("" if self.beta is None else f" beta={self.beta:g}")
        return (
            name
            + (", bag of nodes" if self.bag_of_nodes else ", GNN")
            + (", graph only" if self.graph_only else "")
            + ("" if self.node_types is None else f", {'/'.join(self.node_types)} nodes only")
        )


@dataclass(frozen=True)
class Logged:
    """A data set the task records into ``<output>/data`` before training: ``episodes``
    episodes of the behaviour ``policy`` (noise or door probability ``epsilon``), recording
    seed ``seed``, in the task's env with ``env_config``."""

    policy: str
    epsilon: float
    episodes: int
    seed: int
    env_config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Baseline:
    """A policy played on the evaluation episodes: ``expert`` and ``random`` set the normalized
    score ``100 * (module - random) / (expert - random)``; others (the logs' behaviour) are
    reported on the same scale. ``epsilon``: its noise, a number or the Config field that holds
    it (None: the evaluation's default, which the expert and random policies ignore)."""

    name: str
    policy: str
    epsilon: str | float | None = None


@dataclass(frozen=True)
class Task:
    """One table of ``offline-graph experiment --task <name>``."""

    name: str
    prog: str
    """The command's name in messages (the old command of the task)."""
    description: str
    env: str | None
    """The env the modules are evaluated in (None: the one the first row's data names)."""
    config: type[Any]
    """The task's options: a dataclass, one option per field (for the runner's own run, a
    :class:`TableConfig` with a ``rows`` field and the task's own)."""
    rows: tuple[Row, ...]
    quick: dict[str, Any]
    """What ``--quick`` sets (a smoke run: tested for running, not for scores)."""
    data: Callable[[Any], dict[str, Logged | str]]
    """``data(cfg)``: per data key, how it is recorded, or the path of given episode files."""
    trainer: Literal["single_agent", "team"]
    """How one (row, seed) is trained and scored (:mod:`offline_graph.cli.experiments.runs`)."""
    settings: Callable[[Any, Row], dict[str, Any]]
    """``settings(cfg, row)``: the row's own training settings (``beta``, ``env``, ...)."""
    targets: Callable[[dict[str, dict[str, Any]], dict[str, float]], list[dict[str, Any]]]
    """``targets(stats, baselines)``: ``{what, value, holds}`` per target the present rows can
    check (``stats`` by table line key: ``row`` or ``row/module``)."""
    shown: tuple[str, ...]
    """The settings named in the line under the table."""
    baselines: tuple[Baseline, ...] = (Baseline("expert", "expert"), Baseline("random", "random"))
    """Played once before training; none: the trainer scores each module against the expert
    and random play of its own evaluation (``team``), and the table shows their means."""
    modules: tuple[str, ...] | None = None
    """The modules scored per run (a line of the table each), or None: one module."""
    check: Callable[[Any], None] | None = None
    """More checks of a parsed Config than its fields' bounds (a ConfigError each)."""
    run: Callable[[Any], Any] | None = None
    """``run(cfg)``: the task's own table, for a task whose table is not the runner's (rows'
    normalized scores over seeds ``0..S-1``; job-shop's is a gap per Taillard group). The
    runner still parses and checks its Config, applies ``quick`` and reports its errors;
    ``data``, ``trainer``, ``settings``, ``targets`` and ``baselines`` are then descriptive."""
