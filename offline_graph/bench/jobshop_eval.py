"""Greedy masked rollouts on JobShop-v0 (issue 41): a trained module, a dispatching rule or the
random policy, one instance at a time, and the gap per Taillard group.

The module's rollout is the documented loop of the node-action guide, nothing batched: each
step the env's observation becomes an observation dict with its ``action_mask``
(:func:`offline_graph.env.making.observe`) and the action is
:func:`offline_graph.rllib.evaluation.acting.greedy_actions` of that one graph (RLlib's
inference path: ``forward_inference`` -> ``from_logits`` -> ``to_deterministic().sample()``,
the most likely allowed node). The env keeps its schedule incrementally; an observation is a
copy of its arrays (no graph is rebuilt from Python objects), see :func:`profile_rollout`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.env.jobshop import JobShopEnv
from offline_graph.env.jobshop_instances import TAILLARD_GROUPS, TAILLARD_UPPER_BOUNDS, gap
from offline_graph.env.making import observe

Instance = tuple[np.ndarray, np.ndarray]
"""``(durations [J, M], machines [J, M])``."""
Chooser = Callable[[dict[str, Any], dict[str, Any]], int]


def _options(instance: str | Instance) -> dict[str, Any]:
    if isinstance(instance, str):
        return {"instance": instance}
    return {"durations": instance[0], "machines": instance[1]}


def rollout(chooser: Chooser, instance: str | Instance, env: JobShopEnv | None = None) -> dict[str, Any]:
    """One episode of ``chooser(obs_dict, info) -> node`` on ``instance`` (a Taillard name or
    ``(durations, machines)``): makespan, steps, seconds (whole loop), illegal actions (an
    illegal action ends the episode: makespan is then None)."""
    env = env or JobShopEnv()
    obs, info = env.reset(options=_options(instance))
    t0 = time.perf_counter()
    steps, illegal = 0, 0
    while True:
        current = observe(obs, info, 1, "action_mask")
        action = int(chooser(current, info))
        obs, _, terminated, truncated, info = env.step(action)
        steps += 1
        if info.get("illegal_action"):
            illegal += 1
        if terminated or truncated:
            break
    seconds = time.perf_counter() - t0
    return {
        "makespan": info.get("makespan"),
        "steps": steps,
        "seconds": seconds,
        "illegal": illegal,
        "start_times": env.start_times,
    }


def module_chooser(module: Any) -> Chooser:
    """The module's greedy masked action on one observation dict (``greedy_actions``)."""
    from offline_graph.rllib.evaluation.acting import greedy_actions

    module.eval()

    def choose(obs: dict[str, Any], info: dict[str, Any]) -> int:
        return int(greedy_actions(module, [obs], 1)[0])

    return choose


def policy_chooser(name: str, seed: int = 0) -> Chooser:  # rules read ratios and ranks only
    """A named JobShop behaviour policy (a rule, ``"random"``) as a chooser."""
    env = JobShopEnv()
    return env.make_policy(name, 0.0, np.random.default_rng(seed))


def taillard_gaps(
    chooser: Chooser,
    groups: Sequence[str],
    per_group: int | None = None,
    on_instance: Callable[[str, dict[str, Any]], None] | None = None,
    env_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Gap of ``chooser`` on the first ``per_group`` (all: None) instances of each Taillard
    group: ``{group: {"mean_gap", "gaps", "makespans", "seconds", "illegal"}}``."""
    unknown = [g for g in groups if g not in TAILLARD_GROUPS]
    if unknown:
        raise ConfigError(
            f"taillard_gaps: groups must be among {list(TAILLARD_GROUPS)} (found {unknown}). "
            "Name Taillard's size groups as J x M."
        )
    env = JobShopEnv(**(env_options or {}))
    out: dict[str, Any] = {}
    for group in groups:
        names = TAILLARD_GROUPS[group][: per_group or None]
        gaps, spans, secs, illegal = [], [], [], 0
        for name in names:
            res = rollout(chooser, name, env)
            illegal += res["illegal"]
            if res["makespan"] is None:
                raise RuntimeError(
                    f"taillard_gaps: every action on {name} must be allowed by its mask (found "
                    f"{res['illegal']} illegal). The policy must act on info['action_mask']."
                )
            gaps.append(gap(res["makespan"], name))
            spans.append(int(res["makespan"]))
            secs.append(res["seconds"])
            if on_instance is not None:
                on_instance(name, res)
        out[group] = {
            "instances": list(names),
            "mean_gap": float(np.mean(gaps)),
            "gaps": gaps,
            "makespans": spans,
            "upper_bounds": [TAILLARD_UPPER_BOUNDS[n] for n in names],
            "seconds": secs,
            "mean_seconds": float(np.mean(secs)),
            "illegal": illegal,
        }
    return out


def generated_rollouts(
    chooser: Chooser, instances: Sequence[Instance], env_options: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """``{"makespan", "start_times" [J][M], "seconds"}`` of ``chooser`` on each instance
    (an illegal action: an error)."""
    env = JobShopEnv(**(env_options or {}))
    out = []
    for inst in instances:
        res = rollout(chooser, inst, env)
        if res["makespan"] is None or res["illegal"]:
            raise RuntimeError(
                f"generated_rollouts: every action must be allowed by the mask (found "
                f"{res['illegal']} illegal). The policy must act on info['action_mask']."
            )
        out.append(
            {
                "makespan": int(res["makespan"]),
                "start_times": res["start_times"].tolist(),
                "seconds": res["seconds"],
            }
        )
    return out


def profile_rollout(
    module: Any, instance: str = "ta71", env_options: dict[str, Any] | None = None
) -> dict[str, float]:
    """Seconds of one greedy schedule of ``instance`` split into env step, observation dict +
    collate (``obs_batch``), forward and action: where a 100x20 schedule's time goes."""
    import torch
    from ray.rllib.core.columns import Columns

    from offline_graph.data.graphs.spaces import selection_level
    from offline_graph.rllib.evaluation.acting import obs_batch

    module.eval()
    env = JobShopEnv(**(env_options or {}))
    obs, info = env.reset(options={"instance": instance})
    parts = {"env_step": 0.0, "observe_collate": 0.0, "forward_action": 0.0}
    level = selection_level(module.action_space)
    dist_cls = module.get_inference_action_dist_cls()
    t_all = time.perf_counter()
    steps = 0
    with torch.no_grad():
        while True:
            t0 = time.perf_counter()
            batch = obs_batch([observe(obs, info, 1, "action_mask")], 1, None, level)
            t1 = time.perf_counter()
            logits = module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
            action = int(dist_cls.from_logits(logits).to_deterministic().sample()[0])
            t2 = time.perf_counter()
            obs, _, terminated, truncated, info = env.step(action)
            t3 = time.perf_counter()
            parts["observe_collate"] += t1 - t0
            parts["forward_action"] += t2 - t1
            parts["env_step"] += t3 - t2
            steps += 1
            if terminated or truncated:
                break
    parts["total"] = time.perf_counter() - t_all
    parts["steps"] = float(steps)
    parts["makespan"] = float(info.get("makespan", -1))
    return parts
