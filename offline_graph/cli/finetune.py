"""Fine-tune a checkpoint of ``offline-graph train`` online with PPO in the env (CleanRL style).

Usage::

    offline-graph finetune --checkpoint runs/bc_expert --algo ppo --iterations 20 --save runs/ppo_ft

Restores the trained module (:func:`offline_graph.rllib.evaluation.evaluate.restore_module`), builds
RLlib's PPO on the env with the same ``model_config`` through
:func:`offline_graph.rllib.algorithms.online.configure_online` (``GraphEnvRunner``, ``GNNModule`` with a
value head, ``GraphPPOTorchLearner``), copies the module's weights in
(:func:`offline_graph.rllib.algorithms.online.load_module_weights`; the value head starts fresh) and
trains. The module is evaluated greedily before training and every ``--eval-every``
iterations on the same seeded episodes as ``offline-graph evaluate``; the normalized score
uses the expert and random policies on those episodes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from offline_graph.cli.arguments import arg, config_from, parser_for, run_job
from offline_graph.data.errors import ConfigError
from offline_graph.rllib.evaluation.evaluate import DEFAULT_EVAL_SEED


@dataclass(frozen=True)
class Config:
    """Settings of one fine-tuning run."""

    checkpoint: str = field(default="", metadata=arg(required=True))
    """Directory written by offline-graph train --checkpoint (algo.save_to_path)."""
    algo: Literal["ppo"] = "ppo"
    """Online algorithm (RLlib's PPO; APPO is not supported yet)."""
    iterations: int = 20
    """PPO iterations (train() calls), each train_batch_size env steps."""
    env: str | None = None
    """Env id or module:ClassName (default: the env in <checkpoint>/summary.json)."""
    env_config: dict = field(default_factory=dict, metadata=arg(default=None))
    """Keyword arguments of the env, as a JSON object (default: from summary.json)."""
    lr: float = 3e-4
    """Learning rate."""
    train_batch_size: int = 2000
    """Env steps per iteration."""
    minibatch_size: int = 250
    """Transitions per gradient step (graphs re-batched per minibatch)."""
    num_epochs: int = 4
    """Passes over each train batch."""
    gamma: float = 0.9
    """Discount."""
    gae_lambda: float = 0.9
    """GAE lambda."""
    num_env_runners: int = 0
    """Remote EnvRunners (0: sample in this process)."""
    num_envs_per_env_runner: int = 8
    """Sub-envs stepped in lockstep by each EnvRunner."""
    eval_every: int = 5
    """Evaluate every this many iterations (and before training, and after the last)."""
    eval_episodes: int = 50
    """Evaluation episodes (module, expert and random play the same seeds)."""
    eval_seed: int = DEFAULT_EVAL_SEED
    """Evaluation seed."""
    save: str | None = None
    """Directory for the fine-tuned algorithm (algo.save_to_path) and summary.json."""
    num_cpus: int | None = None
    """CPUs for ray.init when this script starts Ray (default: all)."""
    torch_threads: int = 1
    """torch intra-op threads (0 leaves torch's default)."""


def parse_args(argv: list[str] | None = None) -> Config:
    """Command line -> :class:`Config` (exits with status 2 on bad values, like argparse)."""
    parser: argparse.ArgumentParser = parser_for(
        Config, "offline-graph finetune", "Fine-tune a trained checkpoint online with PPO in the env."
    )
    ns = parser.parse_args(argv)
    summary = _summary(ns.checkpoint)
    if ns.env_config is None:
        ns.env_config = summary.get("config", {}).get("env_config") or {}
    cfg = config_from(Config, ns)
    if not os.path.isdir(cfg.checkpoint):
        parser.error(
            f"finetune: --checkpoint must be a directory (found {cfg.checkpoint!r} missing). "
            "Pass the --checkpoint directory of offline-graph train."
        )
    for name in (
        "iterations",
        "train_batch_size",
        "minibatch_size",
        "num_epochs",
        "eval_every",
        "eval_episodes",
    ):
        if getattr(cfg, name) < 1:
            parser.error(f"finetune: --{name.replace('_', '-')} must be >= 1 (found {getattr(cfg, name)}).")
    return cfg


def _summary(checkpoint: str | None) -> dict[str, Any]:
    try:
        with open(os.path.join(checkpoint or "", "summary.json")) as f:
            return dict(json.load(f))
    except (OSError, ValueError):
        return {}


def run(cfg: Config) -> dict[str, Any]:
    """Restore, build PPO, load the weights, train and evaluate; returns the results."""
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.rllib.evaluation.evaluate import (
        baseline_scores,
        evaluate_module,
        normalized_score,
        restore_module,
    )
    from offline_graph.rllib.algorithms.online import configure_online, load_module_weights
    from offline_graph.rllib.core.ray_session import start_ray

    env_name = cfg.env or _summary(cfg.checkpoint).get("data", {}).get("env")
    if not env_name:
        raise ConfigError(
            "finetune: env must be given with --env or recorded in the checkpoint's summary.json "
            "(found neither). Pass --env ID or module:Class whose spaces match the module."
        )
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    module = restore_module(cfg.checkpoint)
    base = baseline_scores(env_name, cfg.eval_episodes, cfg.eval_seed, env_config=cfg.env_config)
    expert, random_ = base["expert"]["mean_return"], base["random"]["mean_return"]

    def score(m: Any) -> dict[str, float]:
        ret = evaluate_module(m, env_name, cfg.eval_episodes, cfg.eval_seed, env_config=cfg.env_config)[
            "mean_return"
        ]
        return {"mean_return": float(ret), "normalized": float(normalized_score(ret, random_, expert))}

    start_ray(cfg.num_cpus)
    model_config: dict[str, Any] = dict(module.model_config or {})  # type: ignore[arg-type]
    config = (
        PPOConfig()
        .environment(env_name, env_config=dict(cfg.env_config))
        .env_runners(num_env_runners=cfg.num_env_runners, num_envs_per_env_runner=cfg.num_envs_per_env_runner)
        .training(
            train_batch_size_per_learner=cfg.train_batch_size,
            minibatch_size=cfg.minibatch_size,
            num_epochs=cfg.num_epochs,
            lr=cfg.lr,
            gamma=cfg.gamma,
            lambda_=cfg.gae_lambda,
        )
        .rl_module(rl_module_spec=RLModuleSpec(module_class=type(module), model_config=model_config))
    )
    algo = configure_online(config).build_algo()
    try:
        load_module_weights(algo, module)
        curve = [{"iteration": 0, **score(algo.get_module())}]
        print(f"iteration 0 (loaded): normalized {curve[-1]['normalized']:.1f}", flush=True)
        t0 = time.perf_counter()
        for i in range(1, cfg.iterations + 1):
            result = algo.train()
            if i % cfg.eval_every == 0 or i == cfg.iterations:
                curve.append(
                    {
                        "iteration": i,
                        "seconds": round(time.perf_counter() - t0, 1),
                        **score(algo.get_module()),
                    }
                )
                sampled = result["env_runners"].get("episode_return_mean")
                print(
                    f"iteration {i}: normalized {curve[-1]['normalized']:.1f}, sampled return {sampled}",
                    flush=True,
                )
        res = {"env": env_name, "expert": expert, "random": random_, "curve": curve, "config": vars(cfg)}
        if cfg.save:
            algo.save_to_path(os.path.abspath(cfg.save))
            with open(os.path.join(cfg.save, "summary.json"), "w") as f:
                json.dump({**res, "data": {"env": env_name}}, f, indent=2, default=str)
        return res
    finally:
        algo.stop()


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    return run_job("finetune", run, cfg)


if __name__ == "__main__":
    sys.exit(main())
