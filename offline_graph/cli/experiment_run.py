"""The runs of ``offline-graph experiment`` and ``offline-graph stitch-experiment``: a
:class:`Row` of the table, its data recorded in this process (:func:`record_episodes`), one
(row, seed) trained while its module is scored (:func:`train_run`), and every row over its
seeds in one Ray session (:func:`train_rows`)."""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from offline_graph.cli import train
from offline_graph.cli.train_config import Algo, build_config, data_metadata
from offline_graph.cli.train_report import iteration_record
from offline_graph.data.errors import ConfigError


@dataclass(frozen=True)
class Row:
    """One line of a table: an algorithm on a data set, trained once per seed."""

    key: str
    data: str
    """The data set's key (``expert``, ``mixed``, ``logs``, ...)."""
    algo: Algo
    beta: float | None = None
    """MARWIL's or IQL's temperature (None: the algorithm's default)."""
    bag_of_nodes: bool = False

    @property
    def label(self) -> str:
        names = {"bc": "BC", "marwil": "MARWIL", "iql": "IQL", "cql": "CQL"}
        name = names[self.algo] + ("" if self.beta is None else f" beta={self.beta:g}")
        return name + (", bag of nodes" if self.bag_of_nodes else ", GNN")


def record_episodes(
    out: str,
    policy: str,
    epsilon: float,
    episodes: int,
    seed: int,
    env: str | None = None,
    env_config: dict[str, Any] | None = None,
) -> tuple[str, str]:
    """Record episodes into ``out`` (``offline-graph record`` in this process; ``env=None``: its
    default env); returns ``(out, the equivalent command line)``."""
    import json

    from offline_graph.cli import record

    argv = [] if env is None else ["--env", env]
    argv += ["--policy", policy, "--epsilon", f"{epsilon:g}", "--episodes", str(episodes)]
    argv += ["--seed", str(seed)]
    if env_config:
        argv += ["--env-config", json.dumps(env_config)]
    argv += ["--episodes-per-file", "500", "--output", out, "--overwrite", "--no-progress"]
    summary = record.run(record.parse_args(argv))
    print(
        f"recorded {summary['episodes']} episodes, {summary['transitions']} transitions, "
        f"return mean {summary['return_mean']:.2f} in {summary['seconds']:.1f}s: {out}",
        flush=True,
    )
    shown = [f"'{a}'" if a.startswith("{") else a for a in argv]
    return out, "offline-graph record " + " ".join(shown)


def train_run(tcfg: train.Config, eval_every: int, base: dict[str, float]) -> dict[str, Any]:
    """Train as ``tcfg`` says (Ray already up), scoring the module every ``eval_every``
    iterations; returns the curve, the final score and the seconds."""
    from offline_graph.rllib.evaluation.evaluate import evaluate_module, normalized_score
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


def table_train_config(cfg: Any, row: Row, data: str, seed: int, **settings: Any) -> train.Config:
    """The ``offline-graph train`` settings of one (row, seed) run of a table whose Config
    ``cfg`` has the training fields (``iterations`` .. ``num_cpus``); ``settings``: the
    table's own (``beta``, ``env``, ...). The checkpoint path ``<output>/runs/<row>-s<seed>``
    is only a name: :func:`train_run` saves nothing."""
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
        **settings,
    )


def train_rows(
    cfg: Any,
    rows: list[Row],
    data: dict[str, str],
    train_config: Callable[[Any, Row, str, int], train.Config],
    base: dict[str, float],
    t0: float,
) -> list[dict[str, Any]]:
    """Every row trained with seeds ``0..cfg.seeds-1`` on its data set ``data[row.data]``
    (``train_config(cfg, row, data, seed)``, scored every ``cfg.eval_every`` iterations) in
    one Ray session (started on ``cfg.num_cpus`` unless one runs), a line printed per run;
    returns the rows of results.json."""
    from offline_graph.cli.experiment_report import row_stats
    from offline_graph.rllib.core.ray_session import start_ray, stop_ray

    started = start_ray(cfg.num_cpus)
    results: list[dict[str, Any]] = []
    try:
        for row in rows:
            runs = []
            for seed in range(cfg.seeds):
                r = train_run(train_config(cfg, row, data[row.data], seed), cfg.eval_every, base)
                runs.append(r)
                curve = " ".join(f"{c['score']:.0f}" for c in r["curve"])
                print(
                    f"{row.key:<13} seed {seed}: score {r['score']:6.1f}  ({r['seconds']:.0f}s: train "
                    f"{r['train_seconds']:.0f}s, eval {r['eval_seconds']:.0f}s; curve {curve})  "
                    f"[{(time.perf_counter() - t0) / 60:.1f} min]",
                    flush=True,
                )
            results.append(
                {
                    "key": row.key,
                    "data": row.data,
                    "label": row.label,
                    "algo": row.algo,
                    "beta": row.beta,
                    "bag_of_nodes": row.bag_of_nodes,
                    "runs": runs,
                    "stats": row_stats(runs),
                }
            )
    finally:
        stop_ray(started)
    return results
