"""Bench case ``sampling``: env steps/s of RLlib's EnvRunner on ``offline_graph/Graph-v0``.

Ours: :class:`~offline_graph.rllib.env.env_runner.GraphEnvRunner` as
:func:`offline_graph.rllib.algorithms.online.configure_online` sets it for PPO (graph dicts in the
episodes, one PyG batch per step, ``GNNModule``). Stock: RLlib's ``SingleAgentEnvRunner`` on
the same env padded to a flat ``Box`` (:class:`PaddedGraphEnv`: nodes ``n_max x F``, a node
mask, edge links, edge features and an edge mask, ``E_max = edges_per_node * n_max``) with
RLlib's default PPO module (an MLP over the padded vector; a GNN cannot read it without
unpadding). Both in this process, ``num_envs_per_env_runner=8``, exploring, one torch
thread; the first ``sample()`` (env and module warm-up) is not timed.

Bench case ``inference`` (here too, acting speed): a module acting in Graph-v0 through our two
paths against a plain loop of the same module on the same kind of observations.

* **plain loop**: 16 Graph-v0 envs stepped in lockstep by the module's argmax: observation
  dicts, our public collate (the learner's layout), ``forward_inference`` under
  ``torch.no_grad``, ``env.step``; what a user writes by hand (the forward's share of its time
  is printed).
* **evaluate_module**: greedy episodes in 16 envs in lockstep (env steps, observation dicts,
  collate, the forward, the mode of RLlib's action distribution, legality checks, returns); each
  call makes its envs (gymnasium's env checker runs on their first reset and step).
* **GraphEnvRunner**: ``sample(num_timesteps=..., explore=False)`` of RLlib's EnvRunner with our
  vector env and connectors (16 envs per runner), the same module class and ``model_config``
  (PPO's spec: a value head the inference forward does not run).

All at 1 torch thread; the module is freshly initialized (the speed does not depend on the
weights). Each repeat measures the three in turn, so a change of the machine's load between
repeats hits them alike.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

from offline_graph.bench.harness import BenchContext, Row

ENVS = 8


class PaddedGraphEnv(gym.ObservationWrapper):
    """``offline_graph/Graph-v0`` with its graph observation zero-padded to one flat Box."""

    def __init__(self, env_config: Any = None) -> None:
        from offline_graph.env import GraphEnv

        env = GraphEnv(**dict(env_config or {}))
        super().__init__(env)
        cfg = env.config
        self.n_max = int(cfg.n_max)
        self.e_max = int(round(cfg.edges_per_node * self.n_max))
        self.f = int(cfg.num_features)
        self.d = int(cfg.edge_dim)
        self.size = self.n_max * (self.f + 1) + self.e_max * (2 + self.d + 1)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self.size,), np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        n, f, d = self.n_max, self.f, self.d
        out = np.zeros(self.size, np.float32)
        nodes = np.asarray(observation.nodes, np.float32)
        k = nodes.shape[0]
        out[: k * f] = nodes.reshape(-1)
        out[n * f : n * f + k] = 1.0
        links = observation.edge_links
        if links is not None and len(links):
            e = len(links)
            base = n * (f + 1)
            out[base : base + 2 * e] = np.asarray(links, np.float32).reshape(-1)
            base += 2 * self.e_max
            if d and observation.edges is not None:
                out[base : base + e * d] = np.asarray(observation.edges, np.float32).reshape(-1)
            base += d * self.e_max
            out[base : base + e] = 1.0
        return out


def _rate(runner: Any, steps: int, repeats: int) -> list[float]:
    runner.sample(num_timesteps=ENVS * 4, explore=True)  # warm-up, not timed
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        episodes = runner.sample(num_timesteps=steps, explore=True)
        seconds = time.perf_counter() - t
        rates.append(sum(len(e) for e in episodes) / seconds)
    return rates


def case_sampling(ctx: BenchContext) -> list[Row]:
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from offline_graph.rllib.env.env_runner import GraphEnvRunner
    from offline_graph.rllib.algorithms.online import configure_online

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    steps = 1_000 if ctx.quick else 4_000
    try:
        ours_cfg = configure_online(
            PPOConfig().environment("offline_graph/Graph-v0").env_runners(num_envs_per_env_runner=ENVS)
        )
        ours = GraphEnvRunner(config=ours_cfg)
        stock_cfg = (
            PPOConfig()
            .environment(PaddedGraphEnv)
            .env_runners(num_envs_per_env_runner=ENVS, gym_env_vectorize_mode="sync")
        )
        stock = SingleAgentEnvRunner(config=stock_cfg)
        try:
            mine, base = _rate(ours, steps, ctx.repeats), _rate(stock, steps, ctx.repeats)
        finally:
            ours.stop()
            stock.stop()
    finally:
        torch.set_num_threads(threads)
    probe = PaddedGraphEnv()
    size = probe.size
    probe.close()
    return [
        Row(
            "sampling",
            f"EnvRunner.sample, Graph-v0, {ENVS} envs, exploring",
            "env steps/s",
            mine,
            base,
            baseline=f"SingleAgentEnvRunner, env padded to Box({size}), default PPO MLP",
            note="ours: GraphEnvRunner + GNNModule (hidden 64, 2 layers)",
        )
    ]


INFERENCE_ENV = "offline_graph/Graph-v0"
INFERENCE_ENVS = 16


class PlainLoop:
    """The plain loop: ``INFERENCE_ENVS`` Graph-v0 envs in lockstep (observation dicts, our public
    collate, ``forward_inference``, argmax, ``env.step``; resets on episode ends), run
    ``steps`` lockstep steps per call, continuing where the last call stopped."""

    def __init__(self, module: Any, edge_dim: int | None) -> None:
        import gymnasium as gym

        self.module, self.edge_dim = module, edge_dim
        self.envs = [gym.make(INFERENCE_ENV) for _ in range(INFERENCE_ENVS)]
        self.obs = [env.reset(seed=i) for i, env in enumerate(self.envs)]

    def rate(self, steps: int) -> tuple[float, float]:
        """(env steps/s, the forward's share of the time) of ``steps`` lockstep steps."""
        import torch
        from ray.rllib.core.columns import Columns

        from offline_graph.env.making import observe
        from offline_graph.rllib.evaluation.acting import obs_batch

        module, edge_dim, obs = self.module, self.edge_dim, self.obs
        with torch.no_grad():
            t, forward = time.perf_counter(), 0.0
            for _ in range(steps):
                batch = obs_batch([observe(o, info, edge_dim, None) for o, info in obs], edge_dim)
                f = time.perf_counter()
                actions = module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS].argmax(dim=-1).tolist()
                forward += time.perf_counter() - f
                nxt = []
                for env, action in zip(self.envs, actions):
                    o, _, term, trunc, info = env.step(action)
                    nxt.append(env.reset() if term or trunc else (o, info))
                obs = nxt
            seconds = time.perf_counter() - t
        self.obs = obs
        return INFERENCE_ENVS * steps / seconds, forward / seconds


def case_inference(ctx: BenchContext) -> list[Row]:
    """evaluate_module and GraphEnvRunner steps/s against the plain env loop, measured in turn
    within each repeat (a change of the machine's load hits all three alike)."""
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
    probe = gym.make(INFERENCE_ENV)
    spaces = (probe.observation_space, probe.action_space)
    probe.close()
    steps = 100 if ctx.quick else 400  # lockstep steps: x16 observations
    repeats = max(2, ctx.repeats)
    plain: list[float] = []
    evaluated: list[float] = []
    sampled: list[float] = []
    try:
        torch.manual_seed(0)
        module: Any = RLModuleSpec(
            module_class=GNNModule,
            observation_space=spaces[0],
            action_space=spaces[1],
            model_config=dict(MODEL),
        ).build()
        loop = PlainLoop(module, space_sizes(spaces[0])[1])
        loop.rate(steps)  # warm-up, not timed (gymnasium's env checker, torch)
        config = configure_online(
            PPOConfig()
            .environment(INFERENCE_ENV)
            .env_runners(num_envs_per_env_runner=INFERENCE_ENVS)
            .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config=dict(MODEL)))
        )
        runner = GraphEnvRunner(config=config)
        try:
            runner.sample(num_timesteps=INFERENCE_ENVS * 10, explore=False)  # warm-up
            for rep in range(repeats):
                module.train()  # as built (evaluate_module leaves it in eval mode)
                rate, forward_share = loop.rate(steps)
                plain.append(rate)
                t = time.perf_counter()
                # each call makes its INFERENCE_ENVS envs (gymnasium's env checker runs on their
                # first reset and step): enough episodes that this fixed cost does not dominate
                result = evaluate_module(
                    module,
                    INFERENCE_ENV,
                    episodes=(4 if ctx.quick else 16) * INFERENCE_ENVS,
                    seed=rep,
                    num_envs=INFERENCE_ENVS,
                )
                evaluated.append(result["mean_length"] * result["episodes"] / (time.perf_counter() - t))
                t = time.perf_counter()
                episodes = runner.sample(num_timesteps=INFERENCE_ENVS * steps // 4, explore=False)
                sampled.append(sum(len(e) for e in episodes) / (time.perf_counter() - t))
        finally:
            runner.stop()
            for env in loop.envs:
                env.close()
    finally:
        torch.set_num_threads(threads)
    base = (
        f"plain loop: {INFERENCE_ENVS} envs stepped in lockstep, collate, forward_inference, argmax "
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
