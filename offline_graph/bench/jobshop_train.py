"""Logs and training for the job-shop experiment (issue 41): record CP-SAT and noisy-expert
episodes of JobShop-v0 on generated instances through the public recording job, and train
BC / MARWIL / IQL / CQL on them through RLlib's configs and ``offline_graph.configure``.

Recording is :func:`offline_graph.jobs.recording.plan_jobs` + ``record`` (what
``offline-graph record`` runs) with ``env="offline_graph/JobShop-v0"``, ``env_config={"n_jobs":
J, "n_machines": M, "expert_time_limit": s}`` and ``policy="expert"`` (CP-SAT, replayed as
dispatches) or ``"mixed"`` (the same with a random allowed operation with probability
``epsilon``). Every episode is a new instance of L2D's generator drawn from its episode seed.

The module is :class:`~offline_graph.GNNModule` with a ``NodeAction(2000)`` action space (the
env's: up to 100x20 operations): GINE layers over the job-order and machine-order edges (edge
feature 0 / 1), a node-selection head ``MLP([h_v, g_b])`` masked to the candidate operations.
Its weights do not depend on the instance size, so it runs on any J x M.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

ENV_ID = "offline_graph/JobShop-v0"
ALGOS = ("bc", "marwil", "iql", "cql")


def record_logs(
    output: str,
    sizes: Sequence[tuple[int, int]],
    episodes: int,
    policy: str,
    epsilon: float,
    seed: int,
    time_limit: float,
    time_scale: float = 1000.0,
    extra_features: bool = False,
) -> dict[str, Any]:
    """Record ``episodes`` episodes per size into ``output/<policy>_<J>x<M>``; returns the
    directories, transitions, mean return and the CP-SAT time spent (solves, seconds, proven
    optimal), measured in this process (one recording worker)."""
    from offline_graph.env import jobshop_expert
    from offline_graph.jobs.recording import plan_jobs, record

    before = dict(jobshop_expert.SOLVER_TOTALS)
    dirs, transitions, returns = [], 0, []
    t0 = time.perf_counter()
    for i, (J, M) in enumerate(sizes):
        path = os.path.join(output, f"{policy}_{J}x{M}")
        jobs = plan_jobs(
            env=ENV_ID,
            env_config={
                "n_jobs": J,
                "n_machines": M,
                "expert_time_limit": time_limit,
                "time_scale": time_scale,
                **({"extra_features": True} if extra_features else {}),
            },
            policy=policy,
            epsilon=epsilon,
            seed=seed + 1000 * i,
            episodes=episodes,
            episodes_per_file=50,
            output=path,
        )
        for summary in record(jobs, workers=1, show_progress=False):
            transitions += summary["transitions"]
            returns += summary["returns"]
        dirs.append(path)
    after = jobshop_expert.SOLVER_TOTALS
    return {
        "dirs": dirs,
        "policy": policy,
        "epsilon": epsilon,
        "sizes": [f"{J}x{M}" for J, M in sizes],
        "episodes": episodes * len(sizes),
        "transitions": transitions,
        "mean_return": float(sum(returns) / max(len(returns), 1)),
        "record_seconds": time.perf_counter() - t0,
        "solves": int(after["solves"] - before["solves"]),
        "solver_seconds": float(after["seconds"] - before["seconds"]),
        "solver_optimal": int(after["optimal"] - before["optimal"]),
        "time_limit": time_limit,
        "time_scale": time_scale,
        "extra_features": extra_features,
    }


def make_config(
    algo: str,
    data: Sequence[str],
    seed: int,
    *,
    hidden: int = 64,
    layers: int = 3,
    batch: int = 128,
    lr: float = 1e-3,
    updates: int = 10,
    env_options: dict[str, Any] | None = None,
) -> Any:
    """The configured RLlib config of ``algo`` (``"bc"``, ``"marwil"``, ``"iql"``, ``"cql"``)
    on the episode directories ``data`` (recorded with the env config ``env_options``)."""
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.algorithms.cql import CQLConfig
    from ray.rllib.algorithms.iql import IQLConfig
    from ray.rllib.algorithms.marwil import MARWILConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import offline_graph
    from offline_graph import GNNModule, GraphOfflinePreLearner
    from offline_graph.data.errors import ConfigError
    from offline_graph.env.jobshop import JobShopEnv

    if algo not in ALGOS:
        raise ConfigError(f"jobshop make_config: algo must be one of {ALGOS} (found {algo!r}).")
    env = JobShopEnv(**(env_options or {}))
    model_config: dict[str, Any] = {"hidden": hidden, "layers": layers, "head_hidden": hidden}
    training: dict[str, Any] = {"train_batch_size_per_learner": batch, "lr": lr}
    config: Any = {"bc": BCConfig, "marwil": MARWILConfig, "iql": IQLConfig, "cql": CQLConfig}[algo]()
    if algo == "marwil":
        training["beta"] = 1.0
        model_config["beta"] = 1.0
    if algo in ("iql", "cql"):
        training.update(lr=None, critic_lr=lr, tau=0.005)
    if algo == "iql":
        training.update(actor_lr=lr, value_lr=lr, beta=3.0, expectile=0.8)
    if algo == "cql":
        training["min_q_weight"] = 1.0
    config = (
        config.environment(observation_space=env.observation_space, action_space=env.action_space)
        .offline_data(
            input_=list(data),
            input_read_episodes=True,
            prelearner_class=GraphOfflinePreLearner,
            dataset_num_iters_per_learner=updates,
        )
        .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config=model_config))
        .training(**training)
        .learners(num_learners=0)
        .debugging(seed=seed)
    )
    return offline_graph.configure(config, seed=seed)


def train(
    algo: str, data: Sequence[str], seed: int, iterations: int, **options: Any
) -> tuple[Any, dict[str, Any]]:
    """Train ``iterations`` iterations; (the trained module, a CPU copy; facts: seconds,
    losses per iteration, the data report)."""
    import offline_graph

    config = make_config(algo, data, seed, **options)
    t0 = time.perf_counter()
    algo_obj = config.build_algo()
    build = time.perf_counter() - t0
    losses = []
    try:
        for it in range(1, iterations + 1):
            result = algo_obj.train()
            stats = result.get("learners", {}).get("default_policy", {})
            key = next((k for k in ("policy_loss", "actor_loss", "qf_loss", "cql_loss") if k in stats), None)
            losses.append(float(stats[key]) if key else float("nan"))
            if it == 1 or it % 5 == 0 or it == iterations:  # progress on a run of many minutes
                print(
                    f"{algo} seed {seed}: iteration {it}/{iterations}, {key or 'loss'} {losses[-1]:.4g}, "
                    f"{time.perf_counter() - t0:.0f} s",
                    flush=True,
                )
        module = algo_obj.get_module()
        report = offline_graph.data_report(config)
    finally:
        algo_obj.stop()
    facts = {
        "algo": algo,
        "seed": seed,
        "iterations": iterations,
        "build_seconds": build,
        "train_seconds": time.perf_counter() - t0,
        "losses": losses,
        "data_report": {k: v for k, v in report.items() if isinstance(v, (int, float, str, dict))},
        "options": options,
    }
    return module, facts
