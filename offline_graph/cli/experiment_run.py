"""One run of ``offline-graph experiment``: train one (row, seed), scoring the module as it goes."""

from __future__ import annotations

import gc
import time
from typing import Any

from offline_graph.cli import train
from offline_graph.cli.train_config import build_config, data_metadata
from offline_graph.cli.train_report import iteration_record
from offline_graph.data.errors import ConfigError


def train_run(tcfg: train.Config, eval_every: int, base: dict[str, float]) -> dict[str, Any]:
    """Train as ``tcfg`` says (Ray already up), scoring the module every ``eval_every``
    iterations; returns the curve, the final score and the seconds."""
    from offline_graph.rllib.evaluation import evaluate_module, normalized_score
    from offline_graph.data.files import scan_files
    from offline_graph.jobs.recording import DEFAULT_ENV, make_env

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
            if it % eval_every == 0 or it == tcfg.iterations:
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
    return {
        "seed": tcfg.seed,
        "score": curve[-1]["score"],
        "mean_return": curve[-1]["mean_return"],
        "curve": curve,
        "iteration_seconds": seconds,
        "train_seconds": sum(seconds),
        "eval_seconds": eval_s,
        "seconds": time.perf_counter() - t_start,
    }
