"""Data builders and outside target modules of tests/test_ope_outside*.py (round 1): tasks
whose values are computed by hand, behaviour data written the ways the docs show."""

from __future__ import annotations

import math
import os

import gymnasium as gym
import msgpack
import msgpack_numpy
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.models.torch.torch_distributions import TorchCategorical

import offline_graph

F = 3
OBS = offline_graph.graph_space(F)
ACT = gym.spaces.Discrete(2)


def graph(n: int) -> dict:
    """A ring of ``n`` nodes; the node count is the context (or the time step); node
    features: n, the node's index, whether it is the last node."""
    ring = np.arange(n, dtype=np.int64)
    x = np.stack([np.full(n, float(n)), ring, ring == n - 1], axis=1).astype(np.float32)  # n, index, last
    return {"x": x, "edge_index": np.stack([ring, (ring + 1) % n])}


class CategoricalModule(TorchRLModule):
    """An outside module whose every action distribution is RLlib's TorchCategorical."""

    def get_inference_action_dist_cls(self):
        return TorchCategorical

    def get_exploration_action_dist_cls(self):
        return TorchCategorical

    def get_train_action_dist_cls(self):
        return TorchCategorical


class NodeCountPolicy(CategoricalModule):
    """An outside module: ``pi(a=1 | graph) = model_config["p1"][n]``, ``n`` the graph's node
    count read from the learner batch's ``ptr``; a categorical over ``Discrete(2)``."""

    def setup(self):
        self.p1 = {int(k): float(v) for k, v in self.model_config["p1"].items()}
        self.unused = torch.nn.Linear(1, 1)  # a module with parameters, like any real one

    def _forward(self, batch, **kwargs):
        obs = batch[Columns.OBS]
        assert set(obs) >= {"x", "edge_index", "batch", "ptr"}, sorted(obs)
        n = (obs["ptr"][1:] - obs["ptr"][:-1]).tolist()
        p = torch.tensor([self.p1[k] for k in n], dtype=torch.float64)
        logits = torch.stack([torch.log1p(-p), torch.log(p)], dim=1).float()
        return {Columns.ACTION_DIST_INPUTS: logits}


def policy(p1: dict) -> NodeCountPolicy:
    return NodeCountPolicy(observation_space=OBS, action_space=ACT, model_config={"p1": p1})


# --- episodes --------------------------------------------------------------------------------


def rllib_episode(
    i, ns, actions, rewards, logps, *, terminated, truncated, action_kind="int", numpy=False, spaces=True
):
    """One episode built with RLlib's own API as an EnvRunner does: ``action_logp`` in
    ``extra_model_outputs`` as an np.float32 scalar; ``ns`` the node counts of the len+1
    observations. ``spaces``: set the episode's spaces, as an EnvRunner does (RLlib's own
    ``get_state()`` cannot serialize a Graph space; ``write_episodes`` handles it)."""
    kw = {"observation_space": OBS, "action_space": ACT} if spaces else {}
    ep = SingleAgentEpisode(id_=f"ep-{i:04d}", **kw)
    ep.add_env_reset(observation=graph(ns[0]))
    for t, (a, r) in enumerate(zip(actions, rewards)):
        act = {"int": int(a), "np": np.int64(a), "0d": np.array(a, np.int64)}[action_kind]
        extra = {"action_logp": np.float32(logps[t])} if logps is not None else None
        last = t == len(actions) - 1
        ep.add_env_step(
            observation=graph(ns[t + 1]),
            action=act,
            reward=float(r),
            terminated=terminated and last,
            truncated=truncated and last,
            extra_model_outputs=extra,
        )
    return ep.to_numpy() if numpy else ep


def write_raw(path, episodes):
    """Parquet as RLlib's ``output_write_episodes=True`` writes it: msgpack'd get_state() rows
    in an ``item`` column, no metadata."""
    os.makedirs(path, exist_ok=True)
    rows = [msgpack.packb(ep.get_state(), default=msgpack_numpy.encode) for ep in episodes]
    pq.write_table(pa.table({"item": pa.array(rows, pa.binary())}), f"{path}/part-0.parquet")
    return path


# --- task 1: a contextual bandit on graphs (one-step episodes) --------------------------------

REWARD = {2: (1.0, 0.0), 3: (0.0, 2.0), 4: (0.5, 1.5)}  # r(n, a)
MU1 = {2: 0.5, 3: 0.3, 4: 0.6}  # behaviour pi_b(a=1 | n), depends on the graph
PI1 = {2: 0.2, 3: 0.9, 4: 0.5}  # a stochastic target


def bandit_logs(n_episodes=300, seed=0):
    rng = np.random.default_rng(seed)
    logs = []
    for i in range(n_episodes):
        n = int(rng.integers(2, 5))
        a = int(rng.random() < MU1[n])
        p = MU1[n] if a == 1 else 1.0 - MU1[n]
        logs.append((i, [n, n], [a], [REWARD[n][a]], [math.log(p)]))
    return logs


def bandit_episodes(logs, **kw):
    return [
        rllib_episode(i, ns, a, r, lp, terminated=True, truncated=False, **kw) for i, ns, a, r, lp in logs
    ]


def wis_by_hand(logs, pi1, mu=None, gamma=1.0):
    """sum_i W_i G_i / sum_i W_i with W_i the product of pi/mu over the episode."""
    num = den = 0.0
    for _, ns, acts, rews, lps in logs:
        w = 1.0
        for t, a in enumerate(acts):
            p = pi1[ns[t]] if a == 1 else 1.0 - pi1[ns[t]]
            w *= p / math.exp(lps[t])
        num += w * sum(gamma**t * r for t, r in enumerate(rews))
        den += w
    return num / den


def bandit_true(logs, pi1):
    """E_{a ~ pi}[r(n, a)] averaged over the logged contexts (what FQE estimates)."""
    return float(
        np.mean([pi1[ns[0]] * REWARD[ns[0]][1] + (1 - pi1[ns[0]]) * REWARD[ns[0]][0] for _, ns, *_ in logs])
    )


def make_bandit_dir(tmp_path_factory):
    logs = bandit_logs()
    path = str(tmp_path_factory.mktemp("bandit") / "logs")
    offline_graph.write_episodes(path, bandit_episodes(logs), observation_space=OBS, action_space=ACT)
    return logs, path
