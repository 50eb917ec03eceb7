"""One (row, seed) of a table trained while its module is scored, by a task's ``trainer``:
:func:`single_agent` (one module, ``offline-graph train``'s settings, scored every
``eval_every`` iterations) and :func:`team` (one module per agent kind of Team-v0, scored after
the last iteration). Each returns ``{module: run}``: a run holds the ``seed``, the final
``score``, the ``curve`` (``iteration``, ``score``, ``mean_return`` per point) and seconds."""

from __future__ import annotations

import gc
import os
import time
from typing import Any

from offline_graph.cli import train
from offline_graph.cli.experiments.spec import Row, Task
from offline_graph.cli.train_config import build_config, data_metadata
from offline_graph.cli.train_report import iteration_record
from offline_graph.data.errors import ConfigError

SINGLE = "default_policy"
"""The module key of a one-module run."""


def train_config(task: Task, cfg: Any, row: Row, data: str, seed: int) -> train.Config:
    """The ``offline-graph train`` settings of one (row, seed) run: the table's training fields
    and the row's own (``task.settings``). The checkpoint ``<output>/runs/<row>-s<seed>`` is
    only a name: nothing is saved."""
    return train.Config(
        algo=row.algo,
        data=data,
        checkpoint=os.path.join(cfg.output, "runs", f"{row.key}-s{seed}"),
        iterations=cfg.iterations,
        updates_per_iteration=cfg.updates_per_iteration,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        hidden=cfg.hidden,
        layers=cfg.layers,
        seed=seed,
        eval_episodes=cfg.eval_episodes,
        eval_seed=cfg.eval_seed,
        num_cpus=cfg.num_cpus,
        **task.settings(cfg, row),
    )


def single_agent(
    task: Task, cfg: Any, row: Row, data: str, seed: int, base: dict[str, float]
) -> dict[str, dict[str, Any]]:
    """Train as :func:`train_config` says (Ray already up), scoring the module every
    ``cfg.eval_every`` iterations against ``base`` (expert and random returns)."""
    from offline_graph.data.store.files import scan_files
    from offline_graph.jobs.recording import DEFAULT_ENV, make_env
    from offline_graph.rllib.evaluation.evaluate import evaluate_module, normalized_score

    tcfg = train_config(task, cfg, row, data, seed)
    t_start = time.perf_counter()
    scan = scan_files(tcfg.data, tcfg.on_error)
    if scan.kind is None:
        raise ConfigError(
            f"experiment: {tcfg.data} must hold Parquet files (found none). "
            "Record episodes with offline-graph record."
        )
    env_name = data_metadata(scan.files).get("env") or DEFAULT_ENV
    env = make_env(env_name, tcfg.env_config)
    config = build_config(tcfg, scan.kind, env.observation_space, env.action_space)
    env.close()
    algo = config.build_algo()
    curve: list[dict[str, Any]] = []
    seconds: list[float] = []
    eval_s = 0.0
    try:
        for it in range(1, tcfg.iterations + 1):
            t = time.perf_counter()
            rec = iteration_record(algo.train(), time.perf_counter() - t, it)
            seconds.append(rec["seconds"])
            if it % cfg.eval_every == 0 or it == tcfg.iterations:
                t = time.perf_counter()
                ev = evaluate_module(
                    algo.get_module(),
                    env_name,
                    tcfg.eval_episodes,
                    tcfg.eval_seed,
                    env_config=tcfg.env_config,
                )
                eval_s += time.perf_counter() - t
                rec["mean_return"] = ev["mean_return"]
                rec["score"] = normalized_score(ev["mean_return"], base["random"], base["expert"])
                curve.append(rec)
    finally:
        algo.stop()
        del algo
        gc.collect()  # the learners' Ray Data iterators, while Ray still runs
    run = {
        "seed": seed,
        "score": curve[-1]["score"],
        "mean_return": curve[-1]["mean_return"],
        "curve": curve,
        "iteration_seconds": seconds,
        "train_seconds": sum(seconds),
        "eval_seconds": eval_s,
        "seconds": time.perf_counter() - t_start,
    }
    return {SINGLE: run}


TEAM_KEYS = ("illegal_actions", "expert_return", "random_return")
"""What a Team-v0 run keeps of each module's evaluation, besides its return and score."""


def team_config(task: Task, cfg: Any, row: Row, data: str, seed: int) -> Any:
    """The RLlib multi-agent BC / MARWIL config of one Team-v0 run (``offline_graph.configure``d):
    one GNN module per agent kind."""
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.algorithms.marwil import MARWILConfig

    import offline_graph
    from offline_graph.rllib.algorithms.team_config import team_offline_config

    modules = task.modules or ()
    algo = MARWILConfig() if row.algo == "marwil" else BCConfig()
    model_config = {"hidden": cfg.hidden, "layers": cfg.layers}
    config = (
        team_offline_config(algo, data, {kind: kind for kind in modules}, model_config, modules)
        .training(train_batch_size_per_learner=cfg.batch_size, lr=cfg.lr, **task.settings(cfg, row))
        .learners(num_learners=cfg.num_learners)
        .debugging(seed=seed)
    )
    return offline_graph.configure(config)


def team(
    task: Task, cfg: Any, row: Row, data: str, seed: int, base: dict[str, float]
) -> dict[str, dict[str, Any]]:
    """Train one Team-v0 (row, seed) (Ray already up), a line printed per iteration, then score
    each module against the expert and random play of the same evaluation episodes."""
    from offline_graph.env.team import TeamEnv
    from offline_graph.env.team_policies import team_policy_mapping_fn
    from offline_graph.rllib.evaluation.ma_evaluation import evaluate_multi_agent_module

    modules = task.modules or ()
    t0 = time.perf_counter()
    algo = team_config(task, cfg, row, data, seed).build_algo()
    try:
        for i in range(cfg.iterations):
            algo.train()
            took = time.perf_counter() - t0
            print(f"{row.key:<13} seed {seed}: iteration {i + 1}/{cfg.iterations}  {took:.0f}s", flush=True)
        train_s = time.perf_counter() - t0
        t = time.perf_counter()
        ev = evaluate_multi_agent_module(
            {m: algo.get_module(m) for m in modules},
            TeamEnv(),
            episodes=cfg.eval_episodes,
            seed=cfg.eval_seed,
            policy_mapping_fn=team_policy_mapping_fn,
        )
        eval_s = time.perf_counter() - t
    finally:
        algo.stop()
        del algo
        gc.collect()  # the learners' Ray Data iterators, while Ray still runs
    out = {}
    for m in modules:
        got = ev["per_module"][m]
        point = {"iteration": cfg.iterations, "score": got["normalized"], "mean_return": got["mean_return"]}
        out[m] = {
            "seed": seed,
            "score": point["score"],
            "mean_return": point["mean_return"],
            **{k: got.get(k) for k in TEAM_KEYS},
            "curve": [point],
            "train_seconds": train_s,
            "eval_seconds": eval_s,
            "seconds": time.perf_counter() - t0,
        }
    return out


TRAINERS = {"single_agent": single_agent, "team": team}
