"""``offline-graph experiment`` (``--task graph``, the default): BC, MARWIL and a bag-of-nodes
baseline on Graph-v0, seeds, one PNG.

Rows (each trained with ``--seeds`` seeds ``0..S-1``): ``bc-expert`` (BC on the expert data,
``--expert-data``, default ``sample_data/expert``); on the mixed-quality data ``bc``,
``marwil-1`` (MARWIL beta=1), ``marwil-0`` (MARWIL beta=0, which must match BC) and
``bag-marwil-1`` (MARWIL beta=1 with a module that ignores the edges, ``--bag-of-nodes``:
mean-pooled node features into an MLP). The mixed-quality data is recorded into
``<output>/data`` first (``offline-graph record --policy decoy --epsilon 0.6 --episodes 3000
--seed 2``) unless ``--mixed-data`` names existing episode files. Each run is scored every
``--eval-every`` iterations on the same seeded episodes as the expert and random policies.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

from offline_graph.cli import train
from offline_graph.cli.arguments import arg, bad_value, bounded
from offline_graph.cli.experiments.runs import train_config
from offline_graph.cli.experiments.spec import Logged, Row, Task, TrainingConfig
from offline_graph.cli.experiments.targets import gap, present

ROWS = (
    Row("bc-expert", "expert", "bc"),
    Row("bc", "mixed", "bc"),
    Row("marwil-1", "mixed", "marwil", beta=1.0),
    Row("marwil-0", "mixed", "marwil", beta=0.0),
    Row("bag-marwil-1", "mixed", "marwil", beta=1.0, bag_of_nodes=True),
)


@dataclass(frozen=True)
class Config(TrainingConfig):
    """Settings of the whole table (the training settings apply to every run)."""

    expert_data: str = "sample_data/expert"
    """Episode files of the expert policy (the bc-expert row)."""
    mixed_data: str | None = None
    """Existing episode files of the mixed-quality rows; default: record them into
    <output>/data with --mixed-policy, --mixed-epsilon, --mixed-episodes, --mixed-seed."""
    mixed_policy: Literal["decoy", "mixed"] = "decoy"
    """Behaviour policy of the recorded mixed data: decoy (the expert, else with probability
    epsilon the most frequent node color, a systematic mistake) or mixed (the expert, else a
    uniformly random action)."""
    mixed_epsilon: float = field(
        default=0.6, metadata=bounded(0.0, 1.0, hint="It is the probability of the noise action.")
    )
    """Noise probability of the recorded mixed data."""
    mixed_episodes: int = field(default=3000, metadata=bounded(1, hint="Record at least one episode."))
    """Episodes of the recorded mixed data."""
    mixed_seed: int = 2
    """Recording seed of the mixed data (not the evaluation seed)."""
    rows: list[str] = field(
        default_factory=lambda: [r.key for r in ROWS], metadata=arg(choices=[r.key for r in ROWS])
    )
    """Rows to run (keys of the table)."""


def data(cfg: Config) -> dict[str, Logged | str]:
    mixed = Logged(cfg.mixed_policy, cfg.mixed_epsilon, cfg.mixed_episodes, cfg.mixed_seed)
    return {"expert": cfg.expert_data, "mixed": cfg.mixed_data or mixed}


def settings(cfg: Config, row: Row) -> dict[str, Any]:
    return {"beta": row.beta, "bag_of_nodes": row.bag_of_nodes}


def targets(stats: dict[str, dict[str, Any]], scores: dict[str, float]) -> list[dict[str, Any]]:
    """MARWIL beta=1 beats BC by 10 and the bag of nodes by 20; MARWIL beta=0 is BC."""
    return present(
        gap(stats, "marwil-1", "bc", 10.0),
        gap(stats, "marwil-0", "bc", None),
        gap(stats, "marwil-1", "bag-marwil-1", 20.0),
    )


def check(cfg: Config) -> None:
    """The data the rows need exists; the training settings are ``offline-graph train``'s."""
    if not os.path.isdir(cfg.expert_data) and any(r.data == "expert" for r in ROWS if r.key in cfg.rows):
        raise bad_value(
            "experiment", cfg, "expert_data", "an existing directory", "Record it with offline-graph record."
        )
    if cfg.mixed_data is not None and not os.path.exists(cfg.mixed_data):
        raise bad_value(
            "experiment",
            cfg,
            "mixed_data",
            "an existing file or directory",
            "Leave it unset to record the mixed data into <output>/data.",
        )
    train.check_config(train_config(TASK, cfg, ROWS[0], cfg.expert_data, 0))


TASK = Task(
    name="graph",
    prog="experiment",
    description="Train the learning-quality table (BC / MARWIL / bag of nodes on Graph-v0, seeds).",
    env=None,
    config=Config,
    rows=ROWS,
    quick={"seeds": 1, "iterations": 2, "eval_every": 1, "eval_episodes": 10, "mixed_episodes": 200},
    data=data,
    trainer="single_agent",
    settings=settings,
    targets=targets,
    shown=("updates_per_iteration", "batch_size", "lr", "hidden", "layers"),
    check=check,
)
