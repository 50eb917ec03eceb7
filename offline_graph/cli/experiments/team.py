"""``offline-graph experiment --task team`` (alias ``offline-graph ma-experiment``): BC / MARWIL
on Team-v0 episodes, seeds, a line per trained module.

Rows (each trained with ``--seeds`` seeds): ``bc-expert`` (BC on the expert data),
``bc-mixed`` (BC on the mixed-quality data) and ``marwil-mixed`` (MARWIL beta=1, ``--gamma``,
on the mixed-quality data). Both data sets are recorded first into ``<output>/data``
(``offline-graph record --env offline_graph/Team-v0 --policy expert --episodes 2000 --seed 0``
and ``--policy mixed --epsilon 0.6 --episodes 2000 --seed 1``). Every run trains one GNN
module per agent kind (``color``, ``pick``; mapped by ``team_policy_mapping_fn``), then scores
each module with ``evaluate_multi_agent_module`` on seeded episodes where the env's expert and
random policies play too (``100 * (module - random) / (expert - random)`` per module).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from offline_graph.cli.arguments import arg, bounded
from offline_graph.cli.experiments.spec import Logged, Row, TableConfig, Task
from offline_graph.cli.experiments.targets import at_least, gap, present

MODULES = ("color", "pick")
"""The trained modules (one per agent kind of Team-v0)."""
ROWS = (
    Row("bc-expert", "expert", "bc"),
    Row("bc-mixed", "mixed", "bc"),
    Row("marwil-mixed", "mixed", "marwil", beta=1.0),
)


@dataclass(frozen=True)
class Config(TableConfig):
    """Settings of the whole table (the training settings apply to every run)."""

    iterations: int = field(default=100, metadata=bounded(1, hint="Train at least once."))
    """algo.train() calls per run."""
    eval_episodes: int = field(
        default=200, metadata=bounded(1, hint="The table is made of evaluation scores.")
    )
    """Evaluation episodes per run (module, expert and random play the same seeds)."""
    num_cpus: int | None = 2
    """CPUs for ray.init (None: all)."""
    expert_episodes: int = field(default=2000, metadata=bounded(1, hint="Record at least one episode."))
    """Episodes of the expert data (recording seed 0)."""
    mixed_episodes: int = field(default=2000, metadata=bounded(1, hint="Record at least one episode."))
    """Episodes of the mixed-quality data (recording seed 1)."""
    epsilon: float = field(
        default=0.6, metadata=bounded(0.0, 1.0, hint="It is the probability of a random action.")
    )
    """Probability of a uniformly random action in the mixed-quality data."""
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
    rows: list[str] = field(
        default_factory=lambda: [r.key for r in ROWS], metadata=arg(choices=[r.key for r in ROWS])
    )
    """Rows to run (keys of the table)."""


def data(cfg: Config) -> dict[str, Logged | str]:
    return {
        "expert": Logged("expert", 0.0, cfg.expert_episodes, 0),
        "mixed": Logged("mixed", cfg.epsilon, cfg.mixed_episodes, 1),
    }


def settings(cfg: Config, row: Row) -> dict[str, Any]:
    """MARWIL's training settings (BC: none)."""
    if row.algo != "marwil":
        return {}
    return {
        "beta": row.beta,
        "gamma": cfg.gamma,
        "moving_average_sqd_adv_norm_update_rate": cfg.adv_norm_rate,
    }


def targets(stats: dict[str, dict[str, Any]], scores: dict[str, float]) -> list[dict[str, Any]]:
    """Per module: BC on the expert data >= 95; MARWIL - BC on the mixed data >= 10."""
    return present(
        *(at_least(stats, f"bc-expert/{m}", "mean", 95.0) for m in MODULES),
        *(gap(stats, f"marwil-mixed/{m}", f"bc-mixed/{m}", 10.0) for m in MODULES),
    )


TASK = Task(
    name="team",
    prog="ma-experiment",
    description="Train the multi-agent learning-quality table (BC / MARWIL on Team-v0, seeds, per module).",
    env="offline_graph/Team-v0",
    config=Config,
    rows=ROWS,
    quick={"seeds": 1, "expert_episodes": 30, "mixed_episodes": 30, "iterations": 1, "eval_episodes": 6},
    data=data,
    trainer="team",
    settings=settings,
    targets=targets,
    shown=("gamma", "adv_norm_rate", "hidden", "layers", "batch_size", "lr", "num_learners"),
    baselines=(),
    modules=MODULES,
)


def main(argv: list[str] | None = None) -> int:
    """``offline-graph experiment --task team`` (what ``offline_graph.cli.ma_experiment.main`` was)."""
    from offline_graph.cli.experiments.runner import main_for

    return main_for("team", argv)
