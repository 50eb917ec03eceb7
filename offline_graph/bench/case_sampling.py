"""Bench case ``sampling``: env steps/s of RLlib's EnvRunner on ``offline_graph/Graph-v0``.

Ours: :class:`~offline_graph.rllib.env.env_runner.GraphEnvRunner` as
:func:`offline_graph.rllib.algorithms.online.configure_online` sets it for PPO (graph dicts in the
episodes, one PyG batch per step, ``GNNModule``). Stock: RLlib's ``SingleAgentEnvRunner`` on
the same env padded to a flat ``Box`` (:class:`PaddedGraphEnv`: nodes ``n_max x F``, a node
mask, edge links, edge features and an edge mask, ``E_max = edges_per_node * n_max``) with
RLlib's default PPO module (an MLP over the padded vector; a GNN cannot read it without
unpadding). Both in this process, ``num_envs_per_env_runner=8``, exploring, one torch
thread; the first ``sample()`` (env and module warm-up) is not timed.
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
