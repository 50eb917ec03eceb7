"""Train BC or MARWIL on recorded graph episodes (or converted rows), then evaluate (CleanRL style).

Multi-agent episode files train with ``--multi-agent`` (one module per module id):
:mod:`offline_graph.cli.ma_train`.

Usage::

    offline-graph train --algo bc --data sample_data/expert --iterations 20 \\
        --num-learners 0 --checkpoint runs/bc
    python -m offline_graph.cli.train --algo marwil --beta 1.0 --data data/mixed --iterations 20 \\
        --num-learners 2 --checkpoint runs/marwil

The input kind (episode files or converted transition rows) is read from the files'
offline_graph metadata and sets ``input_read_episodes``. One ``algo.train()`` call is one
iteration of ``--updates-per-iteration`` learner updates of ``--batch-size`` transitions per
learner.

Printed per iteration: the losses (policy; vf and total for MARWIL), transitions/s
(``num_env_steps_trained`` of the iteration / wall seconds of ``algo.train()``; the first
iteration includes Ray Data's one-off read + map of the data set) and bytes/transition.
bytes/transition is measured *on the side* (:class:`offline_graph.cli.train_report.SideSampler`):
each iteration draws one learner-sized batch (``--batch-size`` transitions, uniformly, seeded)
from the locally decoded data (at most ``SIDE_SAMPLE_LIMIT`` transitions of the first files),
batches it with the same :func:`offline_graph.data.graphs.collate.collate` the learners use, and
divides the bytes of its ``x + edge_index + edge_attr`` arrays (the PyG layout: float32 /
int64 / float32) by the batch size. ``batch``/``ptr`` index arrays (``8 * (nodes + B + 1)``
bytes) are not counted.

At the end the trained module (``algo.get_module()``, a copy taken from the learner, see
:mod:`offline_graph.rllib.algorithms.offline_algorithms`) plays ``--eval-episodes`` greedy
episodes, and the expert
and random policies play the same seeded episodes; the normalized score is
``100 * (module - random) / (expert - random)``. Written to ``--checkpoint DIR``: the RLlib
checkpoint (``algo.save_to_path(DIR)``), ``learning_curve.png`` and ``summary.json``.

``--select-by fqe|wis|pdis|dr`` (with ``--checkpoint-every K``) estimates the module's value
off-policy at every checkpoint and writes the best-estimate one as the checkpoint instead of
the last (:mod:`offline_graph.cli.train_select`).

The spaces come from the data's metadata, ``--env``, ``--observation-space`` /
``--action-space``, else they are inferred from the data (:mod:`offline_graph.env.data_spaces`).
With no env given or recorded, ``--holdout`` (default 0.1) of the episodes are kept out of
training and the module's action agreement and log-likelihood on them are reported instead
of env returns (:mod:`offline_graph.rllib.evaluation.offline_metrics`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Any

import numpy as np

from offline_graph.data.store import storage
from offline_graph.cli.arguments import bad_value, check_bounds, parse_config, parser_for, run_job
from offline_graph.cli.train_config import (
    DEFAULT_HOLDOUT,
    Config,
    build_config,
    data_metadata,
)
from offline_graph.cli.ma_train import check_flags
from offline_graph.cli.train_resume import identity, resume_point, save_progress
from offline_graph.cli.train_select import TrainSelection, check_select, resumed_estimates
from offline_graph.rllib.core.ray_session import quiet_ray_data
from offline_graph.cli.train_report import (
    SideSampler,
    fmt,
    iteration_record,
    json_default,
    save_curve,
    versions,
)
from offline_graph.data.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    """The command line of :class:`Config` (one option per field)."""
    return parser_for(
        Config, "offline-graph train", "Train BC or MARWIL on recorded graph data, then evaluate in the env."
    )


def check_config(cfg: Config) -> None:
    """Refuse values that cannot work (message form of :mod:`offline_graph.data.errors`)."""

    def bad(name: str, expected: str, hint: str) -> ConfigError:
        return bad_value("train", cfg, name, expected, hint)

    if cfg.algo in ("bc", "cql") and cfg.beta is not None:
        raise bad("beta", f"unset for --algo {cfg.algo}", "--beta is MARWIL's / IQL's temperature.")
    if cfg.algo == "marwil" and cfg.beta is not None and cfg.beta > 1.0:
        raise bad("beta", "<= 1 for --algo marwil", "RLlib's MARWIL bounds beta by 1; IQL takes any.")
    if cfg.expectile is not None and cfg.algo != "iql":
        raise bad("expectile", "unset unless --algo iql", "It is IQL's value expectile.")
    if cfg.cql_alpha is not None and cfg.algo != "cql":
        raise bad("cql_alpha", "unset unless --algo cql", "It is CQL's conservative weight.")
    if cfg.reward_scaling is not None and cfg.algo not in ("iql", "cql"):
        raise bad(
            "reward_scaling", "unset unless --algo iql / cql", "BC and MARWIL train on rewards as logged."
        )
    check_bounds("train", cfg)
    if cfg.updates_per_iteration < 1 or (cfg.num_learners == 0 and cfg.updates_per_iteration < 2):
        raise bad(
            "updates_per_iteration",
            ">= 2 with --num-learners 0 (>= 1 otherwise)",
            "RLlib's single-batch path cannot apply the graph collate function.",
        )
    check_flags(cfg)
    check_select(cfg)
    if not storage.exists(cfg.data):
        raise bad("data", "an existing file or directory", "Record data with offline-graph record.")


def parse_args(argv: list[str] | None = None) -> Config:
    """Command line -> :class:`Config` (exits with status 2 on bad values, like argparse)."""
    return parse_config(build_parser(), Config, argv, check_config)


def run(cfg: Config) -> dict[str, Any]:
    """Train, save, evaluate as ``cfg`` says; returns the summary written to summary.json."""
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID

    from offline_graph.rllib.evaluation.evaluate import (
        baseline_scores,
        evaluate_module,
        normalized_score,
    )
    from offline_graph.data.episodes.reader import spec_from_spaces
    from offline_graph.env.data_input import open_input
    from offline_graph.jobs.recording import DEFAULT_MASK_KEY, make_env
    from offline_graph.rllib.evaluation.offline_metrics import format_metrics, holdout_metrics
    from offline_graph.rllib.algorithms.configure import data_report_or_error
    from offline_graph.rllib.core.ray_session import start_ray, stop_ray
    from offline_graph.cli.evaluate import format_legality

    # The kind (episodes / transitions) comes from the files' metadata; it sets
    # input_read_episodes. The input is listed and checked once: configure takes it.
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    data = open_input(cfg.data, cfg.on_error)
    scan = data.scan
    kind, files = scan.kind, scan.files
    if kind is None or not files:
        raise ConfigError(
            f"train: --data must contain Parquet files (found none under {cfg.data!r}). "
            "Record episodes with `offline-graph record --output DIR`."
        )
    if cfg.multi_agent:
        from offline_graph.cli import ma_train

        return ma_train.run(cfg, data)
    if data.multi_agent:
        raise ConfigError(
            f"train: --data must hold single-agent episodes without --multi-agent (found "
            f"multi-agent episode files under {cfg.data!r}). Pass --multi-agent (one module per "
            "module id; see offline-graph train --help)."
        )
    meta = data_metadata(data)
    spaces = data.resolve_spaces(
        env=cfg.env,
        env_config=cfg.env_config or None,
        observation_space=cfg.observation_space,
        action_space=cfg.action_space,
        who="train",
        announce=lambda m: print(f"offline-graph train: warning: {m}", file=sys.stderr),
    )
    env_name = spaces.env
    cfg = dataclasses.replace(cfg, env_config=dict(spaces.env_config))
    holdout = cfg.holdout if cfg.holdout is not None else (0.0 if env_name else DEFAULT_HOLDOUT)
    cfg = dataclasses.replace(cfg, holdout=holdout)
    mask_key = meta.get("mask_key") or DEFAULT_MASK_KEY
    env = make_env(env_name, cfg.env_config) if env_name else None
    obs_space, act_space = spaces.observation_space, spaces.action_space
    if env is not None and cfg.eval_episodes and meta.get("seed") == cfg.eval_seed:
        print(
            f"train: warning: --eval-seed {cfg.eval_seed} is the seed the data was recorded "
            "with; the evaluation replays training graphs.",
            file=sys.stderr,
        )

    side = SideSampler(files, kind, obs_space, act_space, cfg.batch_size, cfg.seed, cfg.on_error)
    print(
        f"spaces: {spaces.describe()}\n"
        f"data: {cfg.data} ({len(files)} file(s) of {kind}, env {env_name or 'none'}); "
        f"{side.data_bytes_per_transition():.0f} payload bytes/transition over "
        f"{side.num_transitions} locally decoded transitions"
    )

    ident = identity(cfg, spaces.texts)
    start, history = resume_point(cfg, ident) if cfg.resume else (0, [])
    if start:
        print(f"resuming from iteration {start} of {cfg.checkpoint}")
    started_ray = start_ray(cfg.num_cpus)
    algo = None
    selection = None
    try:
        config = build_config(cfg, kind, obs_space, act_space, data)
        gamma = float(config.gamma if cfg.select_gamma is None else cfg.select_gamma)
        if cfg.select_by:
            selection = TrainSelection(cfg, files, (obs_space, act_space), gamma, history)
        elif start:
            resumed_estimates(cfg, gamma, history)  # refuses a --select-by run resumed without
        t0 = time.perf_counter()
        algo = config.build_algo()
        if start:
            algo.restore_from_path(**storage.target(cfg.checkpoint))
        build_s = time.perf_counter() - t0
        print(
            f"{'iter':>5} {'policy_loss':>12} {'vf_loss':>10} {'qf_loss':>10} {'steps':>7} {'sec':>7} "
            f"{'trans/s':>9} {'bytes/trans':>11}"
        )
        for it in range(start + 1, cfg.iterations + 1):
            t = time.perf_counter()
            result = algo.train()
            rec = iteration_record(result, time.perf_counter() - t, it)
            rec["bytes_per_transition"] = side.batch_bytes_per_transition()
            history.append(rec)
            print(
                f"{it:>5} {fmt(rec['policy_loss']):>12} {fmt(rec['vf_loss']):>10} {fmt(rec['qf_loss']):>10} "
                f"{rec['env_steps_trained'] or 0:>7} {rec['seconds']:>7.2f} "
                f"{fmt(rec['transitions_per_s'], '.0f'):>9} "
                f"{fmt(rec['bytes_per_transition'], '.0f'):>11}",
                flush=True,
            )
            if selection and selection.due(it):
                selection.offer(algo, it, rec)
            if cfg.checkpoint_every and it % cfg.checkpoint_every == 0 and it < cfg.iterations:
                save_progress(algo, cfg, it, history, ident)
                if selection:
                    selection.selector.prune()  # the earlier best, now that progress names the new

        kept = selection.finish(algo) if selection else cfg.iterations
        if cfg.checkpoint_every:  # a URI: our retrying file system
            save_progress(algo, cfg, cfg.iterations, history, ident, selected_iteration=kept)
        else:
            storage.makedirs(cfg.checkpoint)
            algo.save_to_path(**storage.target(cfg.checkpoint))
        if selection:
            selection.selector.clear()
        ckpt = storage.absolute(cfg.checkpoint)
        module = algo.get_module()
        report: dict[str, Any] | None = data_report_or_error(config)
    finally:
        if algo is not None:
            algo.stop()
            del algo  # its learners' Ray Data iterators go in stop_ray's collection
        stop_ray(started_ray)

    evaluation: dict[str, Any] = {}
    score = None
    offline: dict[str, Any] | None = None
    if holdout > 0.0:
        offline = holdout_metrics(
            module,
            files,
            kind,
            spec_from_spaces(obs_space, act_space),
            holdout,
            cfg.holdout_seed,
            on_error=cfg.on_error,
        )
        print(format_metrics(offline))
    if env is not None and env_name and cfg.eval_episodes:
        t = time.perf_counter()
        evaluation["module"] = evaluate_module(
            module, env_name, cfg.eval_episodes, cfg.eval_seed, env_config=cfg.env_config, mask_key=mask_key
        )
        eval_s = time.perf_counter() - t
        evaluation.update(baseline_scores(env, cfg.eval_episodes, cfg.eval_seed, mask_key=mask_key))
        m, e, r = (evaluation[k]["mean_return"] for k in ("module", "expert", "random"))
        score = normalized_score(m, r, e) if e != r else None
        print(
            f"eval ({cfg.eval_episodes} episodes, seed {cfg.eval_seed}, {eval_s:.1f}s): "
            f"module {m:.2f} +- {evaluation['module']['std']:.2f}, expert {e:.2f}, random "
            f"{r:.2f}; normalized score {fmt(score, '.1f')} (0 = random, 100 = expert); "
            f"{format_legality(evaluation['module'])}"
        )
    if env is not None:
        env.close()

    curve = cfg.curve or storage.join(cfg.checkpoint, "learning_curve.png")
    save_curve(curve, history, f"{cfg.algo} on {os.path.basename(os.path.normpath(cfg.data))}")
    later = [h["transitions_per_s"] for h in history[1:] if h["transitions_per_s"]]
    summary = {
        "config": dataclasses.asdict(cfg),
        "data": {
            "kind": kind,
            "files": len(files),
            "env": env_name,
            "spaces": {**spaces.texts, "source": spaces.source},
            "metadata": meta,
            "payload_bytes_per_transition": side.data_bytes_per_transition(),
            "side_sample_transitions": side.num_transitions,
            "files_rejected_before_training": dict(scan.rejected),
            "report": report,
        },
        "bytes_per_transition_note": (
            "x + edge_index + edge_attr bytes of one collated learner-sized batch drawn "
            "locally per iteration, divided by the batch size (batch/ptr not counted)"
        ),
        "build_seconds": build_s,
        "iterations": cfg.iterations,
        "resumed_from_iteration": start or None,
        "history": history,
        "median_transitions_per_s_after_first": float(np.median(later)) if later else None,
        "evaluation": evaluation,
        "offline_metrics": offline,
        "normalized_score": score,
        "illegal_share": evaluation.get("module", {}).get("illegal_share"),
        "success_rate": evaluation.get("module", {}).get("success_rate"),
        "checkpoint": ckpt,
        "checkpoint_iteration": kept,
        "selection": selection.summary() if selection else None,
        "module_dir": storage.join(ckpt, "learner_group", "learner", "rl_module", DEFAULT_MODULE_ID),
        "curve": curve,
        "versions": versions(),
    }
    summary_path = storage.join(cfg.checkpoint, "summary.json")
    storage.write_bytes(summary_path, json.dumps(summary, indent=2, default=json_default).encode())
    print(f"checkpoint: {ckpt}\ncurve: {curve}\nsummary: {summary_path}")
    return summary


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    quiet_ray_data()
    return run_job("train", run, cfg)


if __name__ == "__main__":
    sys.exit(main())
