"""Bench case ``learner``: our learners through ``algo.train()`` against a plain PyTorch loop of
the same ``GNNModule`` on the same kind of collated batches, at the same torch thread count.

* **ours**: ``offline_graph.configure(BCConfig / MARWILConfig / IQLConfig ...)`` from the episode
  files (``sample_data/expert`` where the run starts in the repository, else Graph-v0 expert
  episodes recorded into the work directory), ``U`` updates of ``B`` transitions per
  ``algo.train()``, a local learner and one remote learner; the whole iteration is counted
  (data wait, connectors, metrics, RLlib's bookkeeping); transitions/s per iteration after the
  first two (start-up: actors, the first Ray Data blocks).
* **plain loop**: the same module class and ``model_config``, ``U`` updates (forward, loss,
  backward, Adam step) on batches collated beforehand by our public path (transitions ->
  Arrow rows -> ``table_to_batch``; IQL: value runs of the default length), timed per ``U``
  updates. BC: ``-logp``; MARWIL: ``-logp`` + the value head's squared error (the exponential
  advantage weights cost one ``exp`` per transition); IQL: :func:`iql_losses` (no target-network
  Polyak step: the loop is the lower bound).
* **overhead**: per iteration, the time that is not the model: ``U * B / ours - U * B / plain``
  in milliseconds, the number that decides a GPU learner (where the model's share shrinks).
"""

from __future__ import annotations

import os
import time
from statistics import median
from typing import Any

import numpy as np

from offline_graph.bench.harness import BenchContext, Row

SHIPPED = os.path.join("sample_data", "expert")
MODEL = {"hidden": 64, "layers": 2}
"""``offline-graph train``'s defaults, for both sides."""
LR = 1e-3


def learner_data(ctx: BenchContext) -> str:
    """The shipped expert episodes when the run starts in the repository, else Graph-v0
    expert episodes recorded into the work directory (120 episodes, seed 0)."""
    if os.path.isdir(SHIPPED):
        return os.path.abspath(SHIPPED)
    from offline_graph.jobs.recording import plan_jobs, record

    out = os.path.join(ctx.data.root, "learner_expert")
    if not os.path.isdir(out):
        jobs = plan_jobs(
            env="offline_graph/Graph-v0",
            env_config=None,
            policy="expert",
            epsilon=0.0,
            seed=0,
            episodes=120,
            episodes_per_file=60,
            output=out,
        )
        list(record(jobs, workers=1, show_progress=False))
    return out


def _config(kind: str, spaces: tuple[Any, Any], data: str, updates: int, batch: int, learners: int) -> Any:
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.algorithms.iql import IQLConfig
    from ray.rllib.algorithms.marwil import MARWILConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import offline_graph
    from offline_graph.rllib.core.gnn_module import GNNModule

    cls = {"bc": BCConfig, "marwil": MARWILConfig, "iql": IQLConfig}[kind]
    training: dict[str, Any] = {"train_batch_size_per_learner": batch, "lr": LR}
    if kind == "iql":
        training.update(lr=None, actor_lr=LR, critic_lr=LR, value_lr=LR)
    config = (
        cls()
        .environment(observation_space=spaces[0], action_space=spaces[1])
        .offline_data(input_=[data], input_read_episodes=True, dataset_num_iters_per_learner=updates)
        .training(**training)
        .learners(num_learners=learners)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config=dict(MODEL)))
        .debugging(seed=0)
    )
    return offline_graph.configure(config)


def ours_rates(
    kind: str, spaces: tuple[Any, Any], data: str, updates: int, batch: int, learners: int, iters: int
) -> tuple[list[float], float, dict[str, float]]:
    """Transitions/s of ``algo.train()`` per iteration after the first two, the median
    transitions trained per iteration, and RLlib's own timers of those iterations (median
    seconds per timer)."""
    algo = _config(kind, spaces, data, updates, batch, learners).build_algo()
    rates: list[float] = []
    trained: list[float] = []
    timers: dict[str, list[float]] = {}
    try:
        for it in range(iters + 2):
            t = time.perf_counter()
            result = algo.train()
            seconds = time.perf_counter() - t
            if it < 2:
                continue
            steps = float(result["learners"]["__all_modules__"]["num_env_steps_trained"])
            rates.append(steps / seconds)
            trained.append(steps)
            for name, value in _timers(result).items():
                timers.setdefault(name, []).append(value)
    finally:
        algo.stop()
    return rates, median(trained), {name: median(values) for name, values in timers.items()}


def _timers(result: dict[str, Any]) -> dict[str, float]:
    """RLlib's timers of one result (seconds), flattened: ``timers/...`` and the learners'."""
    out: dict[str, float] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}/{k}" if prefix else str(k), v)
        elif isinstance(value, (int, float)) and ("timer" in prefix or prefix.startswith("timers")):
            out[prefix] = float(value)

    walk("timers", result.get("timers", {}))
    walk("learners", {k: v for k, v in result.get("learners", {}).items() if isinstance(v, dict)})
    return out


def plain_rates(
    kind: str, spaces: tuple[Any, Any], data: str, updates: int, batch: int, repeats: int
) -> list[float]:
    """Transitions/s of the plain loop, one value per ``updates`` updates (after one warm-up
    chunk)."""
    import torch

    from offline_graph.bench.case_value import _module, _tensors, _update_fn
    from offline_graph.bench.data import read_items
    from offline_graph.data.episodes.reader import read_transitions, spec_from_spaces
    from offline_graph.data.learning.transitions import Transitions, table_to_batch
    from offline_graph.data.learning.value_runs import (
        collate_value_runs,
        sample_value_runs,
        value_runs_to_arrow,
    )
    from offline_graph.rllib.algorithms.value_configure import DEFAULT_RUN_LENGTH
    from offline_graph.rllib.offline.reading import keep_columns

    torch.manual_seed(0)
    items = read_items(data)
    trans = Transitions.concat(read_transitions(items, [None] * len(items), spec_from_spaces(*spaces), 0.99))
    rng = np.random.default_rng(0)
    batches, counts = [], []
    for _ in range(8):  # a few distinct batches, cycled: the sizes vary as the data's do
        if kind == "iql":
            start, stop = sample_value_runs(trans, rng, batch, DEFAULT_RUN_LENGTH)
            cols = _tensors(collate_value_runs(value_runs_to_arrow(trans, start, stop)))
        else:
            sample = trans.take(rng.integers(0, len(trans), size=batch))
            cols = _tensors(table_to_batch(sample.to_arrow(columns=keep_columns(sample))))
        batches.append(cols)
        counts.append(len(cols["actions"]))
    module = _module(kind, spaces, MODEL["hidden"])
    steps = [_update_fn(kind, module, b) for b in batches]
    rates = []
    for chunk in range(repeats + 1):
        t, done = time.perf_counter(), 0
        for u in range(updates):
            steps[u % len(steps)]()
            done += counts[u % len(steps)]
        if chunk:
            rates.append(done / (time.perf_counter() - t))
    return rates


def case_learner(ctx: BenchContext) -> list[Row]:
    """BC and MARWIL (local and one remote learner) and IQL (local) against their plain loops."""
    import torch

    import offline_graph

    ctx.ray()
    torch.set_num_threads(1)
    data = learner_data(ctx)
    resolved = offline_graph.resolve_spaces(data, who="bench learner")
    spaces = (resolved.observation_space, resolved.action_space)
    updates, batch = (10, ctx.batch_size)
    iters = 2 if ctx.quick else max(4, 2 * ctx.repeats)
    rows: list[Row] = []
    plain: dict[str, list[float]] = {}
    for kind, learners in (("bc", 0), ("bc", 1), ("marwil", 0), ("marwil", 1), ("iql", 0)):
        if kind not in plain:
            plain[kind] = plain_rates(kind, spaces, data, updates, batch, max(3, ctx.repeats))
        ours, per_iter, timers = ours_rates(kind, spaces, data, updates, batch, learners, iters)
        overhead = 1000 * (per_iter / median(ours) - per_iter / median(plain[kind]))
        where = "local learner" if learners == 0 else "1 remote learner"
        top = sorted(timers.items(), key=lambda kv: -kv[1])[:4]
        rows.append(
            Row(
                "learner",
                f"{kind.upper()} algo.train(), {where}: transitions/s",
                "transitions/s",
                ours,
                plain[kind],
                f"plain PyTorch loop of the same GNNModule, {updates} updates of B={batch}, 1 torch thread",
                False,
                f"not the model: {overhead:.0f} ms per iteration of {updates} updates; "
                + "RLlib timers (median s): "
                + ", ".join(f"{k} {v:.3f}" for k, v in top),
            )
        )
        ctx.log(
            f"learner {kind} ({where}): {median(ours):.0f} vs plain {median(plain[kind]):.0f} transitions/s"
        )
    return rows
