"""The learning-quality table: BC, MARWIL and a bag-of-nodes baseline, seeds, one PNG.

Usage::

    offline-graph experiment --output runs/experiment   # the table of docs/guides/training.md (~10 min)
    python -m offline_graph.cli.experiment --quick --output /tmp/quick   # a smoke run (~1-2 min)

Rows (each trained with ``--seeds`` seeds ``0..S-1``; see :data:`ROWS`):

- ``bc-expert``: BC on the expert data (``--expert-data``, default ``sample_data/expert``);
- on the mixed-quality data: ``bc``, ``marwil-1`` (MARWIL beta=1), ``marwil-0`` (MARWIL
  beta=0, which must match BC) and ``bag-marwil-1`` (MARWIL beta=1 with a module that ignores
  the edges, ``--bag-of-nodes``: mean-pooled node features into an MLP).

The mixed-quality data is recorded into ``<output>/data`` first (``offline-graph record
--policy decoy --epsilon 0.6 --episodes 3000 --seed 2``, see :attr:`Config.mixed_policy`)
unless ``--mixed-data`` names existing episode files. Each run is one in-process
``offline_graph.cli.train`` run (:func:`offline_graph.cli.train.build_config`, one shared Ray session) whose
module is evaluated every ``--eval-every`` iterations with
:func:`offline_graph.rllib.evaluation.evaluate.evaluate_module` on the same seeded episodes; the normalized
score is ``100 * (module - random) / (expert - random)`` as in ``offline-graph train``.

Written to ``--output``: ``results.json`` (settings, per-run curves, scores, seconds),
``results.md`` (the table) and ``learning_curves.png`` (score vs iteration, mean over seeds with
the min-max band, one panel per data set).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from offline_graph.cli import train
from offline_graph.cli.arguments import (
    arg,
    bad_value,
    bounded,
    check_bounds,
    config_from,
    parser_for,
    run_job,
)
from offline_graph.cli.experiment_report import gaps, markdown, save_curves, write_results
from offline_graph.cli.experiment_run import Row, record_episodes, table_train_config, train_rows
from offline_graph.cli.train_config import data_metadata, quiet_ray_data
from offline_graph.data.errors import ConfigError
from offline_graph.rllib.evaluation.evaluate import DEFAULT_EVAL_SEED

QUICK: dict[str, Any] = {
    "seeds": 1,
    "iterations": 2,
    "eval_every": 1,
    "eval_episodes": 10,
    "mixed_episodes": 200,
}
"""What --quick sets (a smoke run: tested for running, not for scores)."""


ROWS = (
    Row("bc-expert", "expert", "bc"),
    Row("bc", "mixed", "bc"),
    Row("marwil-1", "mixed", "marwil", beta=1.0),
    Row("marwil-0", "mixed", "marwil", beta=0.0),
    Row("bag-marwil-1", "mixed", "marwil", beta=1.0, bag_of_nodes=True),
)


@dataclass(frozen=True)
class Config:
    """Settings of the whole table (the training settings apply to every run)."""

    output: str
    """Output directory: results.json, results.md, learning_curves.png and data/."""
    seeds: int = field(default=3, metadata=bounded(1, hint="Each row is trained once per seed."))
    """Training seeds per row (0..seeds-1)."""
    iterations: int = 30
    """algo.train() calls per run."""
    updates_per_iteration: int = 10
    """Learner updates per iteration."""
    batch_size: int = 256
    """Transitions per learner batch."""
    lr: float = 1e-3
    """Adam learning rate."""
    hidden: int = 64
    """GNN node embedding width."""
    layers: int = 2
    """Message-passing layers."""
    eval_every: int = field(
        default=5, metadata=bounded(1, hint="It is the spacing of the learning-curve points.")
    )
    """Evaluate the module every this many iterations (and after the last): the curves."""
    eval_episodes: int = field(
        default=100, metadata=bounded(1, hint="The table is made of evaluation scores.")
    )
    """Evaluation episodes per point (module, expert and random play the same seeds)."""
    eval_seed: int = DEFAULT_EVAL_SEED
    """Seed of the evaluation episodes (not a recording seed)."""
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
    quick: bool = False
    """Smoke run: sets seeds=1, iterations=2, eval_every=1, eval_episodes=10,
    mixed_episodes=200 (overriding those flags)."""
    num_cpus: int | None = None
    """CPUs for ray.init (default: all)."""
    torch_threads: int = field(default=1, metadata=bounded(0, hint="0 leaves torch's default."))
    """torch intra-op threads of this process, where the learner runs (0 leaves torch's
    default). One thread: batches are small, and on a shared 2-CPU machine two spinning
    threads per process made iterations up to ~20x slower."""


def build_parser() -> argparse.ArgumentParser:
    """The command line of :class:`Config` (one option per field)."""
    return parser_for(
        Config,
        "offline-graph experiment",
        "Train the learning-quality table (BC / MARWIL / bag of nodes, seeds).",
    )


def check_config(cfg: Config) -> None:
    """Refuse values that cannot work (message form of :mod:`offline_graph.data.errors`)."""

    def bad(name: str, expected: str, hint: str) -> ConfigError:
        return bad_value("experiment", cfg, name, expected, hint)

    check_bounds("experiment", cfg)
    if not os.path.isdir(cfg.expert_data) and any(r.data == "expert" for r in rows_of(cfg)):
        raise bad("expert_data", "an existing directory", "Record it with offline-graph record.")
    if cfg.mixed_data is not None and not os.path.exists(cfg.mixed_data):
        raise bad(
            "mixed_data",
            "an existing file or directory",
            "Leave it unset to record the mixed data into <output>/data.",
        )
    # The training settings are checked where they are used, by offline_graph.cli.train.
    train.check_config(train_config(cfg, ROWS[0], cfg.expert_data, 0))


def parse_args(argv: list[str] | None = None) -> Config:
    """Command line -> :class:`Config` (--quick applied; exits with status 2 on bad values)."""
    parser = build_parser()
    cfg = config_from(Config, parser.parse_args(argv))
    if cfg.quick:
        cfg = dataclasses.replace(cfg, **QUICK)
    try:
        check_config(cfg)
    except ConfigError as err:
        parser.error(str(err))
    return cfg


def rows_of(cfg: Config) -> list[Row]:
    """The rows of :data:`ROWS` that ``--rows`` selects, in table order."""
    return [r for r in ROWS if r.key in cfg.rows]


def train_config(cfg: Config, row: Row, data: str, seed: int) -> train.Config:
    """The ``offline-graph train`` settings of one run (no checkpoint is written)."""
    return table_train_config(cfg, row, data, seed, beta=row.beta, bag_of_nodes=row.bag_of_nodes)


# --------------------------------------------------------------------------- data
def mixed_data(cfg: Config) -> tuple[str, str]:
    """(path, how it was made) of the mixed-quality data; records it unless --mixed-data."""
    if cfg.mixed_data is not None:
        return cfg.mixed_data, f"given: {cfg.mixed_data}"
    out = os.path.join(
        cfg.output,
        "data",
        f"{cfg.mixed_policy}-eps{cfg.mixed_epsilon:g}-n{cfg.mixed_episodes}-s{cfg.mixed_seed}",
    )
    return record_episodes(out, cfg.mixed_policy, cfg.mixed_epsilon, cfg.mixed_episodes, cfg.mixed_seed)


def baselines(cfg: Config, env_name: str) -> dict[str, float]:
    """Mean returns of the expert and random policies on the evaluation episodes."""
    from offline_graph.rllib.evaluation.evaluate import baseline_scores

    scores = baseline_scores(env_name, cfg.eval_episodes, cfg.eval_seed)
    return {p: float(ev["mean_return"]) for p, ev in scores.items()}


def begin(cfg: Any) -> float:
    """torch's threads and the output directory as ``cfg`` (a Config of this or the
    multi-agent experiment) says; returns the start time."""
    import torch

    t0 = time.perf_counter()
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    os.makedirs(cfg.output, exist_ok=True)
    return t0


# --------------------------------------------------------------------------- main
def run(cfg: Config) -> dict[str, Any]:
    """The whole table as ``cfg`` says; returns what results.json holds."""
    from offline_graph.data.files import scan_files
    from offline_graph.jobs.recording import DEFAULT_ENV

    t0 = begin(cfg)
    rows = rows_of(cfg)
    data = {"expert": cfg.expert_data}
    made_by = f"given: {cfg.expert_data}"
    if any(r.data == "mixed" for r in rows):
        data["mixed"], made_by = mixed_data(cfg)
    files = scan_files(data[rows[0].data], "raise").files
    base = baselines(cfg, data_metadata(files).get("env") or DEFAULT_ENV)
    print(
        f"evaluation ({cfg.eval_episodes} episodes, seed {cfg.eval_seed}): expert return "
        f"{base['expert']:.2f}, random {base['random']:.2f}",
        flush=True,
    )

    results = train_rows(cfg, rows, data, train_config, base, t0)
    stats = {r["key"]: r["stats"] for r in results}
    result = {
        "settings": dataclasses.asdict(cfg),
        "data": {"expert": data["expert"], "mixed": data.get("mixed"), "mixed_made_by": made_by},
        "baselines": base,
        "rows": results,
        "gaps": gaps(stats),
    }
    return write_results(cfg.output, result, t0, markdown, save_curves)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    quiet_ray_data()
    return run_job("experiment", run, cfg)


if __name__ == "__main__":
    sys.exit(main())
