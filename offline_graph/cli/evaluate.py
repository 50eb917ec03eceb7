"""Evaluate a checkpoint written by ``offline-graph train`` in the env (CleanRL style).

Usage::

    offline-graph evaluate --checkpoint runs/bc --episodes 100 --seed 7

Restores the trained RLModule alone, from ``<checkpoint>/learner_group/learner/rl_module/
<module id>`` with :func:`offline_graph.rllib.evaluation.evaluate.restore_module` (no Ray cluster, no
training data needed), and plays ``--episodes`` greedy episodes; the expert and random
policies play the same seeded episodes, and the normalized score is
``100 * (module - random) / (expert - random)``. To resume training instead, rebuild the whole
algorithm with ``Algorithm.from_checkpoint(DIR)`` (needs Ray and the data; see
:mod:`offline_graph.rllib.algorithms.offline_algorithms`).

The env defaults to the one named in ``<checkpoint>/summary.json`` (written by train); a
module trained on data without an env needs ``--env`` (no default env is assumed), and the
env's spaces must be the module's.

For an RLlib ``MultiAgentEnv`` every module of the checkpoint is restored
(:func:`offline_graph.rllib.evaluation.ma_evaluation.restore_modules`), agents are mapped to modules by
``--policy-mapping module:function``, and one line per module (return, normalized score,
illegal actions) and per agent is printed; ``--policy NAME`` evaluates the env's policy the
same way (see :mod:`offline_graph.rllib.evaluation.ma_evaluation`).

Without a simulator: ``--data LOGS --method fqe|wis|pdis|dr`` estimates the checkpoint's
value from logged episodes (:func:`offline_graph.estimate_value`; printed with its bootstrap
interval), and plays it in the env too, side by side, when ``--env`` is given
(:mod:`offline_graph.cli.evaluate_offline`)::

    offline-graph evaluate --checkpoint runs/bc --data logs/ --method fqe [--env ID]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError
from offline_graph.rllib.evaluation.evaluate import DEFAULT_EVAL_SEED
from offline_graph.cli.arguments import arg, config_from, parser_for, run_job
from offline_graph.cli.checkpoint_info import checkpoint_summary, load_mapping_fn
from offline_graph.cli.evaluate_offline import check_module_env


@dataclass(frozen=True)
class Config:
    """Settings of one evaluation run."""

    checkpoint: str | None = None
    """Directory written by offline-graph train --checkpoint (algo.save_to_path), or the
    module directory inside it. Give this or --policy."""
    policy: str | None = None
    """Evaluate a behaviour policy instead of a checkpoint: module:function (called as
    function(obs_dict, info) -> action; obs_dict has action_mask for node/edge-selection envs)
    or a name (expert, random, mixed) the env provides."""
    mask_key: str = "action_mask"
    """For NodeAction / EdgeAction envs: the info key holding the action mask."""
    episodes: int = 50
    """Episodes for the module, the expert and the random policy (same seeds for all)."""
    seed: int = DEFAULT_EVAL_SEED
    """Evaluation seed (episode i resets the env with a seed derived from (seed, i))."""
    env: str | None = None
    """Env id or module:ClassName (default: the env in <checkpoint>/summary.json; required
    when none is recorded there, e.g. for data without an env, and with --policy)."""
    env_config: dict = field(default_factory=dict, metadata=arg(default=None))
    """Keyword arguments of the env, as a JSON object (default: from summary.json)."""
    num_envs: int = 16
    """Episodes run in lockstep with one batched forward pass (results do not depend on it)."""
    baselines: bool = True
    """Also evaluate the expert and random policies (--no-baselines skips them and the
    normalized score)."""
    output: str | None = None
    """Optional JSON file for the results."""
    data: str | None = None
    """Off-policy evaluation: episode files or directories (local or URI) to estimate the
    checkpoint's value from, without a simulator (with --method; --env optional)."""
    method: Literal["fqe", "wis", "pdis", "dr"] = "fqe"
    """With --data: fqe (fitted Q evaluation), wis / pdis (weighted importance sampling),
    dr (doubly robust)."""
    gamma: float | None = None
    """With --data: discount (default 0.99; 1.0 estimates the undiscounted episode return)."""
    fqe_epochs: int | None = None
    """With --data and fqe / dr: epochs of fitted Q evaluation (one iteration each); default:
    iterate until the estimate settles."""
    horizon: int | None = None
    """With --data and fqe / dr: the most steps an episode can last (the env's time limit):
    that many FQE iterations (default: the longest truncated logged episode, else until the
    estimate settles)."""
    fqe_by_step: bool = False
    """With --data and fqe / dr: one Q per step before the horizon (time-indexed FQE), for a
    task whose value depends on a step count its observation hides (a time limit the logs
    reach); needs --horizon or truncated logged episodes."""
    explore: bool = False
    """With --data: evaluate the module's stochastic policy instead of its greedy one."""
    policy_mapping: str | None = None
    """Multi-agent envs and --data: module:function mapping an agent id to a module id
    (RLlib's policy_mapping_fn(agent_id, episode, **kw)); default: the only module, else the
    module named like the agent (for --policy: the agent id); with --data the mapping train
    used, else the module recorded with each agent."""


def build_parser() -> argparse.ArgumentParser:
    return parser_for(
        Config, "offline-graph evaluate", "Evaluate a trained checkpoint greedily in the env, with baselines."
    )


def parse_args(argv: list[str] | None = None) -> Config:
    """Command line -> :class:`Config` (exits with status 2 on bad values, like argparse)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    if (ns.checkpoint is None) == (ns.policy is None):
        parser.error(
            "evaluate: exactly one of --checkpoint and --policy must be given (found "
            f"checkpoint={ns.checkpoint!r}, policy={ns.policy!r}). --policy evaluates a "
            "module:function or a named policy of the env."
        )
    if ns.env_config is None:  # not given: the one train used, from summary.json
        summary = checkpoint_summary(ns.checkpoint) if ns.checkpoint else {}
        ns.env_config = summary.get("config", {}).get("env_config") or {}
    cfg = config_from(Config, ns)
    if cfg.episodes < 1:
        parser.error(f"evaluate: --episodes must be >= 1 (found {cfg.episodes}).")
    if cfg.num_envs < 1:
        parser.error(f"evaluate: --num-envs must be >= 1 (found {cfg.num_envs}).")
    if cfg.data is not None and cfg.checkpoint is None:
        parser.error(
            "evaluate: --data must come with --checkpoint (found --policy). It estimates a module's value."
        )
    if cfg.checkpoint is not None and not storage.is_dir(cfg.checkpoint):
        parser.error(
            f"evaluate: --checkpoint must be a directory (found {cfg.checkpoint!r} missing). "
            "Pass the --checkpoint directory of offline-graph train."
        )
    return cfg


def format_legality(ev: dict[str, Any]) -> str:
    """``illegal actions 0/123 (0.0%)[, success rate 97.0%]`` of one evaluation result."""
    text = f"illegal actions {ev['illegal_actions']}/{ev['actions']} ({100.0 * ev['illegal_share']:.1f}%)"
    if ev.get("success_rate") is not None:
        text += f", success rate {100.0 * ev['success_rate']:.1f}%"
    return text


def run(cfg: Config) -> dict[str, Any]:
    """Restore the module, evaluate it (and the baselines); returns the results."""
    from offline_graph.rllib.evaluation.evaluate import (
        baseline_scores,
        evaluate_module,
        evaluate_policy,
        normalized_score,
        restore_module,
    )

    if cfg.data is not None:
        from offline_graph.cli.evaluate_offline import run_offline

        return run_offline(cfg)
    summary = checkpoint_summary(cfg.checkpoint)
    env_name = cfg.env or summary.get("data", {}).get("env")
    if not env_name and cfg.policy is not None:
        raise ConfigError(
            "evaluate: env must be given with --env for --policy (found none). A policy plays "
            "in an env: pass --env ID or module:Class."
        )
    if not env_name:
        spaces = summary.get("data", {}).get("spaces") or {}
        trained = (
            f"; the module's spaces are {spaces['observation_space']} / {spaces['action_space']}"
            if spaces
            else ""
        )
        raise ConfigError(
            "evaluate: env must be given with --env or recorded in the checkpoint's summary.json "
            f"(found neither{trained}). Pass --env ID or module:Class whose spaces match the "
            "module; without an env, train reports offline metrics on held-out episodes."
        )
    from offline_graph.rllib.evaluation.ma_evaluation import is_multi_agent

    if is_multi_agent(env_name, cfg.env_config):
        return run_multi_agent(cfg, env_name)
    t = time.perf_counter()
    res: dict[str, Any] = {"env": env_name}
    if cfg.checkpoint is not None:
        res["checkpoint"] = storage.absolute(cfg.checkpoint)
        module = restore_module(cfg.checkpoint)
        check_module_env(module, env_name, cfg.env_config)
        res["module"] = evaluate_module(
            module,
            env_name,
            cfg.episodes,
            cfg.seed,
            cfg.num_envs,
            env_config=cfg.env_config,
            mask_key=cfg.mask_key,
        )
        who = "module"
    else:
        res["policy"] = cfg.policy
        res["module"] = evaluate_policy(
            cfg.policy,  # type: ignore[arg-type]  # set: parse_args requires one of the two
            env_name,
            cfg.episodes,
            cfg.seed,
            env_config=cfg.env_config,
            mask_key=cfg.mask_key,
        )
        who = f"policy {cfg.policy}"
    seconds = time.perf_counter() - t
    m = res["module"]["mean_return"]
    line = (
        f"{who}: mean return {m:.2f} +- {res['module']['std']:.2f} over {cfg.episodes} "
        f"episodes (seed {cfg.seed}, {seconds:.1f}s); {format_legality(res['module'])}"
    )
    res["normalized_score"] = None
    if cfg.baselines:
        res.update(
            baseline_scores(
                env_name, cfg.episodes, cfg.seed, env_config=cfg.env_config, mask_key=cfg.mask_key
            )
        )
        e, r = res["expert"]["mean_return"], res["random"]["mean_return"]
        res["normalized_score"] = normalized_score(m, r, e) if e != r else None
        score = res["normalized_score"]
        line += (
            f"\nexpert {e:.2f}, random {r:.2f}; normalized score "
            f"{'-' if score is None else format(score, '.1f')} (0 = random, 100 = expert)"
        )
    print(line)
    if cfg.output:
        storage.write_bytes(cfg.output, json.dumps(res, indent=2).encode())  # a path or a URI
    return res


def format_multi_agent(res: dict[str, Any]) -> str:
    """One line per module (return, normalized score, illegal actions), then one per agent."""
    lines = []
    for mid, m in res["per_module"].items():
        line = f"module {mid}: mean return {m['mean_return']:.2f} over {m['agent_episodes']} agent-episodes"
        if "normalized" in m:
            score = m["normalized"]
            line += (
                f"; normalized {'-' if score is None else format(score, '.1f')} (expert "
                f"{m['expert_return']}, random {m['random_return']})"
            )
        lines.append(f"{line}; {format_legality(m)}")
    for aid, a in res["per_agent"].items():
        lines.append(f"agent {aid}: mean return {a['mean_return']:.2f} over {a['episodes']} episodes")
    return "\n".join(lines)


def run_multi_agent(cfg: Config, env_name: str) -> dict[str, Any]:
    """:func:`run` for a MultiAgentEnv: every module of the checkpoint (or ``--policy``)."""
    from offline_graph.rllib.evaluation import ma_evaluation as ma

    # The mapping: --policy-mapping, else the one `train --multi-agent` used (summary.json),
    # else for its checkpoints the env's module_of (it recorded the module ids train used).
    trained = checkpoint_summary(cfg.checkpoint).get("config", {})
    spec = cfg.policy_mapping or trained.get("policy_mapping")
    t = time.perf_counter()
    env = ma.make_multi_agent_env(env_name, cfg.env_config)
    mapping = load_mapping_fn(spec) if spec else (ma.env_mapping(env) if trained.get("multi_agent") else None)
    try:
        if cfg.checkpoint is not None:
            modules = ma.restore_modules(cfg.checkpoint)
            res = ma.evaluate_multi_agent_module(
                modules, env, cfg.episodes, cfg.seed, mapping, mask_key=cfg.mask_key, baselines=cfg.baselines
            )
            res.update(checkpoint=storage.absolute(cfg.checkpoint), modules=sorted(modules))
            who = "modules"
        else:
            res = ma.evaluate_multi_agent_policy(
                cfg.policy,  # type: ignore[arg-type]  # set: parse_args requires one of the two
                env,
                cfg.episodes,
                cfg.seed,
                policy_mapping_fn=mapping,
                mask_key=cfg.mask_key,
            )
            if cfg.baselines:
                ma.add_baselines(res, env, cfg.episodes, cfg.seed, mapping, cfg.mask_key)
            res["policy"] = cfg.policy
            who = f"policy {cfg.policy}"
    finally:
        env.close()
    res["env"] = env_name
    print(
        f"{who}: team mean return {res['mean_return']:.2f} over {cfg.episodes} episodes "
        f"(seed {cfg.seed}, {time.perf_counter() - t:.1f}s)\n{format_multi_agent(res)}"
    )
    if cfg.output:
        storage.write_bytes(cfg.output, json.dumps(res, indent=2, default=str).encode())
    return res


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    return run_job("evaluate", run, cfg)


if __name__ == "__main__":
    sys.exit(main())
