"""Bench case ``inference``: a module acting in Graph-v0 through our two paths against a plain
batched forward of the same module on the same kind of observations.

* **plain loop**: 16 Graph-v0 envs stepped in lockstep by the module's argmax: observation
  dicts, our public collate (the learner's layout), ``forward_inference`` under
  ``torch.no_grad``, ``env.step``; what a user writes by hand (the forward's share of its time
  is printed).
* **evaluate_module**: greedy episodes in 16 envs in lockstep (env steps, observation dicts,
  collate, the forward, RLlib's action distribution, legality checks, returns).
* **GraphEnvRunner**: ``sample(num_timesteps=..., explore=False)`` of RLlib's EnvRunner with our
  vector env and connectors (16 envs per runner), the same module class and ``model_config``
  (PPO's spec: a value head the inference forward does not run).

All at 1 torch thread; the module is freshly initialized (the speed does not depend on the
weights).
"""

from __future__ import annotations

import time
from typing import Any


from offline_graph.bench.harness import BenchContext, Row

ENV = "offline_graph/Graph-v0"
ENVS = 16


def plain_loop_rate(module: Any, edge_dim: int | None, steps: int, repeats: int) -> tuple[list[float], float]:
    """Env steps/s of the plain loop (``ENVS`` Graph-v0 envs in lockstep: observation dicts,
    our public collate, ``forward_inference``, argmax, ``env.step``; resets on episode ends),
    and the forward's share of its time."""
    import gymnasium as gym
    import torch
    from ray.rllib.core.columns import Columns

    from offline_graph.env.making import observe
    from offline_graph.rllib.evaluation.acting import obs_batch

    envs = [gym.make(ENV) for _ in range(ENVS)]
    obs = [env.reset(seed=i) for i, env in enumerate(envs)]
    rates, forward = [], 0.0
    with torch.no_grad():
        for rep in range(repeats + 1):
            t, forward = time.perf_counter(), 0.0
            for _ in range(steps):
                batch = obs_batch([observe(o, info, edge_dim, None) for o, info in obs], edge_dim)
                f = time.perf_counter()
                actions = module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS].argmax(dim=-1).tolist()
                forward += time.perf_counter() - f
                nxt = []
                for env, action in zip(envs, actions):
                    o, _, term, trunc, info = env.step(action)
                    nxt.append(env.reset() if term or trunc else (o, info))
                obs = nxt
            if rep:
                rates.append(ENVS * steps / (time.perf_counter() - t))
    return rates, forward / (ENVS * steps / rates[-1])


def case_inference(ctx: BenchContext) -> list[Row]:
    """evaluate_module and GraphEnvRunner steps/s against the plain batched forward."""
    import gymnasium as gym
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.bench.case_learner import MODEL
    from offline_graph.data.graphs.graph import space_sizes
    from offline_graph.rllib.algorithms.online import configure_online
    from offline_graph.rllib.core.gnn_module import GNNModule
    from offline_graph.rllib.env.env_runner import GraphEnvRunner
    from offline_graph.rllib.evaluation.evaluate import evaluate_module

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    probe = gym.make(ENV)
    spaces = (probe.observation_space, probe.action_space)
    probe.close()
    steps = 100 if ctx.quick else 400  # lockstep steps: x16 observations
    repeats = max(2, ctx.repeats)
    try:
        torch.manual_seed(0)
        module = RLModuleSpec(
            module_class=GNNModule,
            observation_space=spaces[0],
            action_space=spaces[1],
            model_config=dict(MODEL),
        ).build()
        edge_dim = space_sizes(spaces[0])[1]
        plain, forward_share = plain_loop_rate(module, edge_dim, steps, repeats)
        evaluated = []
        for rep in range(repeats):
            t = time.perf_counter()
            # each call makes its ENVS envs (gymnasium's env checker runs on their first
            # reset and step): enough episodes that this fixed cost does not dominate
            result = evaluate_module(
                module, ENV, episodes=(4 if ctx.quick else 16) * ENVS, seed=rep, num_envs=ENVS
            )
            evaluated.append(result["mean_length"] * result["episodes"] / (time.perf_counter() - t))
        config = configure_online(
            PPOConfig()
            .environment(ENV)
            .env_runners(num_envs_per_env_runner=ENVS)
            .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config=dict(MODEL)))
        )
        runner = GraphEnvRunner(config=config)
        sampled = []
        try:
            runner.sample(num_timesteps=ENVS * 10, explore=False)  # warm-up
            for _ in range(repeats):
                t = time.perf_counter()
                episodes = runner.sample(num_timesteps=ENVS * steps // 4, explore=False)
                sampled.append(sum(len(e) for e in episodes) / (time.perf_counter() - t))
        finally:
            runner.stop()
    finally:
        torch.set_num_threads(threads)
    base = (
        f"plain loop: {ENVS} envs stepped in lockstep, collate, forward_inference, argmax "
        f"(the forward {100 * forward_share:.0f}% of its time)"
    )
    return [
        Row("inference", "evaluate_module, greedy, 16 envs: steps/s", "steps/s", evaluated, plain, base),
        Row(
            "inference",
            "GraphEnvRunner.sample, explore=False, 16 envs: steps/s",
            "steps/s",
            sampled,
            plain,
            base,
        ),
    ]
