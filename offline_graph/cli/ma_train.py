"""``offline-graph train --multi-agent``: BC / MARWIL on multi-agent episode files, one GNN
module per module id (see :mod:`offline_graph.cli.train` for the single-agent run).

Usage::

    offline-graph record --env offline_graph/Team-v0 --policy expert --episodes 2000 --output data/team
    offline-graph train --multi-agent --algo bc --data data/team --iterations 100 --checkpoint runs/team
    offline-graph evaluate --checkpoint runs/team

Modules and their spaces (:func:`plan_modules`, from the first decodable episodes of the data):

* agent -> module: ``--policy-mapping module:function`` (RLlib's ``policy_mapping_fn(agent_id,
  episode)``), else the module id recorded with each agent (``offline-graph record`` records
  the env's ``module_of(agent_id)``), else ``default_policy``; the prelearner maps every row
  the same way (:mod:`offline_graph.rllib.offline.multi_agent`);
* a module's spaces: those of its agents (the metadata's ``agent_spaces``, else inferred per
  agent id; all of a module's agents must agree), or ``--module-spaces``;
* ``--modules a,b`` names the modules to build (default: every module the agents map to);
  ``--train-modules a`` the ones to train (RLlib's ``policies_to_train``; default: all).

Written to ``--checkpoint DIR``: the RLlib checkpoint (every module under
``learner_group/learner/rl_module/<module_id>``), ``learning_curve_<module_id>.png`` per
trained module and ``summary.json`` (per module: agents, spaces, loss history, evaluation;
the data report). With an env (``--env`` or the one recorded) every module plays
``--eval-episodes`` greedy episodes with the env's expert and random policies on the same
seeds (:func:`offline_graph.rllib.evaluation.ma_evaluation.evaluate_multi_agent_module`); the normalized
score per module is ``100 * (module - random) / (expert - random)``.

``--eval-interval K`` adds RLlib's own evaluation every K iterations (on
:class:`~offline_graph.rllib.env.ma_env_runner.GraphMultiAgentEnvRunner`); each module's
``module_episode_returns_mean`` goes into its history as ``eval_return``. Note RLlib's unit:
per episode the *sum* over the module's agents (Team-v0 has 1-2 agents per module), where
``evaluate_multi_agent_module`` averages per agent-episode.

Not for multi-agent data: --algo iql / cql, --frame-stack / --memory, --resume /
--checkpoint-every, --holdout (no offline metrics without an env).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from offline_graph.cli.arguments import bad_value
from offline_graph.cli.train_config import Config, algo_config, configure
from offline_graph.cli.train_report import fmt, iteration_record, json_default, save_curve, versions
from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError
from offline_graph.data.store.files import FileScan

MODULE_RETURNS = "module_episode_returns_mean"
"""RLlib's per-module evaluation return (``result["evaluation"]["env_runners"][...]``): per
episode, the sum of the returns of the module's agents, averaged over episodes."""
DEFAULT_MODULE = "default_policy"
"""The module of agents recorded without a module id when no mapping is given (RLlib's)."""


def ids(values: list[str] | None) -> list[str] | None:
    """``--modules a,b`` / ``--modules a b`` -> ``["a", "b"]`` (None stays None)."""
    if values is None:
        return None
    return [part for v in values for part in v.split(",") if part]


def check_flags(cfg: Config) -> None:
    """Refuse multi-agent flags without ``--multi-agent`` and what multi-agent runs lack."""

    def bad(name: str, expected: str, hint: str) -> ConfigError:
        return bad_value("train", cfg, name, expected, hint)

    if not cfg.multi_agent:
        for name in ("policy_mapping", "modules", "train_modules", "module_spaces", "eval_interval"):
            if getattr(cfg, name):
                raise bad(name, "unset without --multi-agent", "It applies to multi-agent data.")
        return
    if cfg.algo not in ("bc", "marwil"):
        raise bad("algo", "bc or marwil with --multi-agent", "IQL / CQL train single-agent data.")
    if cfg.frame_stack > 1 or cfg.memory:
        raise bad("memory", "unset with --multi-agent (and --frame-stack 1)", "Memory is single-agent.")
    if cfg.resume or cfg.checkpoint_every:
        raise bad("checkpoint_every", "0 with --multi-agent (no --resume)", "Runs save at the end.")
    if cfg.holdout:
        raise bad("holdout", "unset with --multi-agent", "Multi-agent runs evaluate in the env.")
    modules, trained = ids(cfg.modules), ids(cfg.train_modules)
    for name, given in (("modules", modules), ("train_modules", trained)):
        if given is not None and (not given or any("/" in m for m in given)):
            raise bad(name, "module ids without '/'", "RLlib splits batch columns on '/'.")
    if modules and trained and set(trained) - set(modules):
        raise bad("train_modules", f"a subset of --modules {modules}", "Only built modules train.")


@dataclass(frozen=True)
class ModulePlan:
    """The modules of a multi-agent run: spaces, agents and where the spaces came from."""

    spaces: dict[str, tuple[gym.Space, gym.Space]]
    agents: dict[str, list[str]]
    """Per module: the agent ids (as str) mapped to it in the sampled episodes."""
    sources: dict[str, str]
    agent_spaces: tuple[dict[str, gym.Space], dict[str, gym.Space]]
    """Per agent id (str): observation and action spaces (the config's Dict spaces)."""
    trained: list[str]

    def texts(self, mid: str) -> dict[str, str]:
        from offline_graph.data.graphs.space_text import space_text

        obs, act = self.spaces[mid]
        return {
            "observation_space": space_text(obs),
            "action_space": space_text(act),
            "source": self.sources[mid],
        }


def plan_modules(cfg: Config, scan: FileScan, mapping: Any) -> ModulePlan:
    """:class:`ModulePlan` of ``cfg`` on the scanned data (see the module docstring)."""
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    from offline_graph.data.analysis.ma_stats import resolve_agent_spaces, sample_episodes
    from offline_graph.data.graphs.space_text import parse_space, space_text

    agent_sp = resolve_agent_spaces(scan, scan.metadata or {}, "train")  # the scan's kept rows
    texts = agent_sp.texts
    episodes, _ = sample_episodes(scan)
    agents: dict[str, set[str]] = {}
    for ep in episodes:
        for a in ep.agents:
            mid = mapping(a.agent_id, MultiAgentEpisode(id_=ep.id)) if mapping else a.module_id  # type: ignore[call-arg]
            agents.setdefault(str(mid or DEFAULT_MODULE), set()).add(str(a.agent_id))
    found: dict[str, tuple[str, str, str]] = {}  # module -> (obs text, act text, source)
    for mid, keys in sorted(agents.items()):
        pairs = {(texts[k]["observation_space"], texts[k]["action_space"]) for k in keys if k in texts}
        if len(pairs) > 1:
            raise ConfigError(
                f"train: the agents mapped to module {mid!r} must share one observation / action "
                f"space (found {sorted(pairs)} for agents {sorted(keys)}). Map agents with other "
                "spaces to another module with --policy-mapping module:function."
            )
        if pairs:
            obs, act = pairs.pop()
            found[mid] = (obs, act, f"agents {', '.join(sorted(keys))} ({texts[min(keys)]['source']})")
    for mid, pair in (cfg.module_spaces or {}).items():
        given = (pair.get("observation_space"), pair.get("action_space")) if isinstance(pair, dict) else ()
        if len(given) != 2 or not all(isinstance(t, str) for t in given):
            raise ConfigError(
                f"train: --module-spaces entry {mid!r} must be an object with observation_space "
                f"and action_space texts (found {pair!r}). E.g. "
                '{"color": {"observation_space": "graph:F=8,D=2", "action_space": "discrete:4"}}.'
            )
        obs_t = space_text(parse_space(str(given[0]), "observation"))
        act_t = space_text(parse_space(str(given[1]), "action"))
        if mid in found and found[mid][:2] != (obs_t, act_t):
            raise ConfigError(
                f"train: --module-spaces of module {mid!r} must match its agents' spaces (found "
                f"{obs_t} / {act_t}, agents have {found[mid][0]} / {found[mid][1]}). Leave it out."
            )
        found.setdefault(mid, (obs_t, act_t, "--module-spaces"))
    modules = ids(cfg.modules) or sorted(found)
    strays = sorted(set(agents) - set(modules))
    if strays:
        raise ConfigError(
            f"train: every agent must map to one of --modules {modules} (found agents "
            f"{sorted(k for m in strays for k in agents[m])} mapped to {strays}). Add the modules "
            "or map the agents with --policy-mapping module:function."
        )
    lacking = [m for m in modules if m not in found]
    if lacking:
        raise ConfigError(
            f"train: every module must have spaces (found none for {lacking}: no agent of the "
            f"sampled episodes maps to it). Pass --module-spaces, or leave it out of --modules."
        )
    trained = ids(cfg.train_modules) or list(modules)
    unknown = sorted(set(trained) - set(modules))
    if unknown:
        raise ConfigError(f"train: --train-modules must name modules of {modules} (found {unknown}).")

    def spaces(obs: str, act: str) -> tuple[gym.Space, gym.Space]:
        return parse_space(obs, "observation"), parse_space(act, "action")

    parsed = {k: spaces(v["observation_space"], v["action_space"]) for k, v in texts.items()}
    return ModulePlan(
        spaces={m: spaces(*found[m][:2]) for m in modules},
        agents={m: sorted(agents.get(m, ())) for m in modules},
        sources={m: found[m][2] for m in modules},
        agent_spaces=({k: o for k, (o, _) in parsed.items()}, {k: a for k, (_, a) in parsed.items()}),
        trained=trained,
    )


def curve_path(cfg: Config, mid: str) -> str:
    """``--curve`` with ``_<module_id>`` before its extension, else
    ``<checkpoint>/learning_curve_<module_id>.png``."""
    if cfg.curve:
        root, ext = os.path.splitext(cfg.curve)
        return f"{root}_{mid}{ext or '.png'}"
    return storage.join(cfg.checkpoint, f"learning_curve_{mid}.png")


def run(cfg: Config, data: Any) -> dict[str, Any]:
    """Train, save and evaluate every module as ``cfg`` says (``data``: the data's files, a
    ``FileScan`` or the input resolved, :class:`~offline_graph.env.data_input.DataInput`;
    not listed again); returns the summary written to summary.json."""
    import torch

    from offline_graph.data.store.files import scan_input

    from offline_graph.cli.checkpoint_info import load_mapping_fn
    from offline_graph.cli.evaluate import format_multi_agent
    from offline_graph.data.analysis.ma_stats import is_multi_agent_data
    from offline_graph.env.making import DEFAULT_MASK_KEY
    from offline_graph.rllib.evaluation import ma_evaluation as ma
    from offline_graph.rllib.evaluation.checkpoints import MODULE_SUBDIR
    from offline_graph.rllib.algorithms.configure import data_report_or_error
    from offline_graph.rllib.core.ray_session import start_ray, stop_ray
    from offline_graph.rllib.algorithms.team_config import multi_agent_offline_config

    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    scan = scan_input(data)
    meta = scan.metadata or {}
    if scan.kind != "episodes" or not is_multi_agent_data(scan, meta):
        raise ConfigError(
            f"train: --data must hold multi-agent episode files with --multi-agent (found "
            f"{scan.kind} files without multi_agent metadata under {cfg.data!r}). Record a "
            "MultiAgentEnv with offline-graph record, or drop --multi-agent."
        )
    mapping = load_mapping_fn(cfg.policy_mapping, "train") if cfg.policy_mapping else None
    plan = plan_modules(cfg, scan, mapping)
    env_name = cfg.env or meta.get("env")
    env_config = dict(cfg.env_config or meta.get("env_config") or {})
    cfg = dataclasses.replace(cfg, env_config=env_config)
    for mid in plan.spaces:
        shown = plan.texts(mid)
        mark = " (trained)" if mid in plan.trained else ""
        print(
            f"module {mid}{mark}: {shown['observation_space']} / {shown['action_space']} "
            f"from {shown['source']}"
        )
    print(f"data: {cfg.data} ({len(scan.files)} file(s) of multi-agent episodes, env {env_name or 'none'})")

    started_ray = start_ray(cfg.num_cpus)
    algo = None
    history: dict[str, list[dict[str, Any]]] = {m: [] for m in plan.trained}
    try:
        config, model_config = algo_config(cfg)
        config = multi_agent_offline_config(
            config,
            list(scan.files),
            plan.spaces,
            model_config,
            plan.trained,
            agent_spaces=plan.agent_spaces,
            policy_mapping_fn=mapping,
        )
        if cfg.eval_interval and env_name and cfg.eval_episodes:
            if mapping is None:  # RLlib's runner maps agents as the recording did
                probe = ma.make_multi_agent_env(env_name, env_config)
                recorded = ma.env_mapping(probe)
                probe.close()
                if recorded is not None:
                    config.multi_agent(policy_mapping_fn=recorded)
            config.environment(env=env_name, env_config=env_config).evaluation(
                evaluation_interval=cfg.eval_interval,
                evaluation_duration=cfg.eval_episodes,
                evaluation_duration_unit="episodes",
            )
        config = configure(dataclasses.replace(cfg, holdout=0.0), config, scan)
        t0 = time.perf_counter()
        algo = config.build_algo()
        build_s = time.perf_counter() - t0
        heads = " ".join(f"{m + ' loss':>14}" for m in plan.trained)
        print(f"{'iter':>5} {heads} {'steps':>7} {'sec':>7}")
        for it in range(1, cfg.iterations + 1):
            t = time.perf_counter()
            result = algo.train()
            seconds = time.perf_counter() - t
            evaluated = bool(cfg.eval_interval) and it % cfg.eval_interval == 0  # RLlib's rule
            found = result.get("evaluation", {}).get("env_runners", {}).get(MODULE_RETURNS, {})
            # RLlib repeats the last evaluation (or NaN) in the other iterations' results
            returns = {m: float(v) for m, v in found.items() if evaluated and np.isfinite(v)}
            for m in plan.trained:
                history[m].append(iteration_record(result, seconds, it, m))
                history[m][-1]["eval_return"] = returns.get(m)
            steps = history[plan.trained[0]][-1]["env_steps_trained"] or 0
            losses = " ".join(f"{fmt(history[m][-1]['policy_loss']):>14}" for m in plan.trained)
            evals = "  ".join(f"{m} {v:.2f}" for m, v in sorted(returns.items()))
            evals = f"  eval: {evals}" if evals else ""
            print(f"{it:>5} {losses} {steps:>7} {seconds:>7.2f}{evals}", flush=True)
        storage.makedirs(cfg.checkpoint)
        algo.save_to_path(**storage.target(cfg.checkpoint))  # a URI: our retrying file system
        ckpt = storage.absolute(cfg.checkpoint)
        modules = {m: algo.get_module(m) for m in plan.spaces}
        report: dict[str, Any] | None = data_report_or_error(config)
    finally:
        if algo is not None:
            algo.stop()
            del algo  # its learners' Ray Data iterators go in stop_ray's collection
        stop_ray(started_ray)

    evaluation: dict[str, Any] = {}
    if env_name and cfg.eval_episodes:
        t = time.perf_counter()
        env = ma.make_multi_agent_env(env_name, env_config)
        try:
            evaluation = ma.evaluate_multi_agent_module(
                modules,
                env,
                cfg.eval_episodes,
                cfg.eval_seed,
                mapping or ma.env_mapping(env),
                mask_key=meta.get("mask_key") or DEFAULT_MASK_KEY,
            )
        finally:
            env.close()
        print(
            f"eval ({cfg.eval_episodes} episodes, seed {cfg.eval_seed}, {time.perf_counter() - t:.1f}s): "
            f"team mean return {evaluation['mean_return']:.2f}\n{format_multi_agent(evaluation)}"
        )
    per_module: dict[str, Any] = {}
    for mid in plan.spaces:
        ev = evaluation.get("per_module", {}).get(mid)
        entry = {
            "agents": plan.agents[mid],
            "spaces": plan.texts(mid),
            "trained": mid in plan.trained,
            "module_dir": storage.join(ckpt, MODULE_SUBDIR, mid),
            "evaluation": ev,
            "normalized_score": (ev or {}).get("normalized"),
        }
        if mid in plan.trained:
            entry["curve"] = curve_path(cfg, mid)
            entry["history"] = history[mid]
            data_name = os.path.basename(os.path.normpath(cfg.data))
            save_curve(entry["curve"], history[mid], f"{cfg.algo} {mid} on {data_name}")
        per_module[mid] = entry
    summary = {
        "config": dataclasses.asdict(cfg),
        "data": {
            "kind": scan.kind,
            "multi_agent": True,
            "files": len(scan.files),
            "env": env_name,
            "metadata": meta,
            "files_rejected_before_training": dict(scan.rejected),
            "report": report,
        },
        "modules": per_module,
        "build_seconds": build_s,
        "iterations": cfg.iterations,
        "evaluation": evaluation,
        "checkpoint": ckpt,
        "versions": versions(),
    }
    summary_path = storage.join(cfg.checkpoint, "summary.json")
    storage.write_bytes(summary_path, json.dumps(summary, indent=2, default=json_default).encode())
    curves = ", ".join(e["curve"] for e in per_module.values() if "curve" in e)
    print(f"checkpoint: {ckpt}\ncurves: {curves}\nsummary: {summary_path}", file=sys.stdout)
    return summary
