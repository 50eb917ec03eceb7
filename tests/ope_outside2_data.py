"""Data builders and outside target modules of tests/test_ope_outside2*.py (round 2): a plain
parameter-free TorchRLModule, and the long-episode chain whose values are computed by hand."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

import offline_graph
from tests.ope_outside_data import CategoricalModule


ev = offline_graph.estimate_value


class Outside(CategoricalModule):
    """A plain outside module, no parameters: ``_forward_inference`` gives the logits of the
    policy under test (``logits(obs) -> [B, k]``); ``_forward`` (exploration / train) gives
    uniform logits on purpose, so a caller that reads the wrong forward gets a wrong value."""

    def setup(self):
        self.rule = self.model_config["rule"]

    def _forward_inference(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: self.rule(batch[Columns.OBS])}

    def _forward(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: torch.zeros_like(self.rule(batch[Columns.OBS]))}


def outside(obs_space, act_space, rule):
    return Outside(observation_space=obs_space, action_space=act_space, model_config={"rule": rule})


def sizes(obs):
    return (obs["ptr"][1:] - obs["ptr"][:-1]).tolist()


def softmax(logits):
    z = np.exp(logits - logits.max())
    return z / z.sum()


def write(tmp_path, name, episodes, obs_space, act_space, **kw):
    path = str(tmp_path / name)
    offline_graph.write_episodes(path, episodes, observation_space=obs_space, action_space=act_space, **kw)
    return path


# --- 1. graphs with no edges and a single node, Discrete(20) --------------------------------------
# One step; the context is the node count n in 1..3 (edge_index [2, 0], no edge features);
# reward r(n, a) = ((a * n) % 7) / 2 in [0, 3]; the behaviour is uniform over the 20 actions.

K = 20
OBS1 = offline_graph.graph_space(2)
ACT1 = gym.spaces.Discrete(K)


def reward1(n, a):
    return ((a * n) % 7) / 2.0


def logits1(n):
    """The stochastic target's logits for a graph of n nodes (float32, as the module gives them)."""
    return (2.0 * np.cos(np.arange(K) + n)).astype(np.float32)


def rule1(obs):
    return torch.from_numpy(np.stack([logits1(n) for n in sizes(obs)]))


def rule1_greedy(obs):
    """Deterministic: one-hot logits, 0 on the arg max, -inf elsewhere."""
    out = torch.full((len(sizes(obs)), K), float("-inf"))
    for b, n in enumerate(sizes(obs)):
        out[b, int(np.argmax(logits1(n)))] = 0.0
    return out


def edgeless(n):
    return {"x": np.stack([np.full(n, float(n)), np.arange(n)], 1).astype(np.float32),
            "edge_index": np.zeros((2, 0), np.int64)}  # fmt: skip


# --- 2. long episodes, 1 to 50 steps in one file, 100 per step --------------------------------
# "go" (1) earns 100 and goes on, "stop" (0) earns 0 and ends (terminated); the time limit
# truncates after H = 50 steps. The observation shows the step t (a 2-node graph, x = [t, i]).
# Behaviour: go with 0.5 at t = 0, 0.96 after (half the episodes last one step, ~20% reach
# the limit); target: 0.8 at t = 0, 0.98 after.

H, GO = 50, 100.0
OBS2 = offline_graph.graph_space(2)
ACT2 = gym.spaces.Discrete(2)


def step_graph(t):
    return {"x": np.array([[t, 0.0], [t, 1.0]], np.float32), "edge_index": np.array([[0, 1], [1, 0]])}


def p_go(first, later):
    return lambda t: first if t == 0 else later


MU2, PI2 = p_go(0.5, 0.96), p_go(0.8, 0.98)


def chain_value(p, horizon=H):
    v = 0.0
    for t in reversed(range(horizon)):
        v = p(t) * (GO + v)
    return v


def rule_of(p_of_t):
    """A module rule: go with ``p_of_t(t)``, t read from the graph's first node."""

    def rule(obs):
        p = np.array([p_of_t(int(t)) for t in obs["x"][obs["ptr"][:-1], 0]])
        return torch.from_numpy(np.stack([np.log1p(-p), np.log(p)], 1)).float()

    return rule


rule2 = rule_of(PI2)


def chain_logs(n, seed, mu=MU2):
    rng = np.random.default_rng(seed)
    logs = []
    for _ in range(n):
        acts = []
        while len(acts) < H:
            acts.append(int(rng.random() < mu(len(acts))))
            if acts[-1] == 0:
                break
        logs.append(acts)
    return logs


def chain_episodes(logs, mu=MU2):
    eps = []
    for i, acts in enumerate(logs):
        ep = SingleAgentEpisode(id_=f"c-{i}", observation_space=OBS2, action_space=ACT2)
        ep.add_env_reset(observation=step_graph(0))
        for t, a in enumerate(acts):
            last = t == len(acts) - 1
            ep.add_env_step(
                observation=step_graph(t + 1), action=a, reward=GO * a, terminated=last and a == 0,
                truncated=last and a == 1, extra_model_outputs={"action_logp": np.float32(
                    math.log(mu(t) if a else 1 - mu(t)))},
            )  # fmt: skip
        eps.append(ep)
    return eps


def weights(logs, pi, mu=MU2):
    """Per episode, the running products of pi / mu (the logged float32 log-probs, as read)."""
    out = []
    for acts in logs:
        w, run = [], 1.0
        for t, a in enumerate(acts):
            m = math.exp(float(np.float32(math.log(mu(t) if a else 1 - mu(t)))))
            run *= (pi(t) if a else 1 - pi(t)) / m
            w.append(run)
        out.append(w)
    return out


def wis_pdis_by_hand(logs, pi):
    ws = weights(logs, pi)
    wis = sum(w[-1] * GO * sum(a) for w, a in zip(ws, logs)) / sum(w[-1] for w in ws)
    pdis = 0.0
    for t in range(max(map(len, logs))):
        s_t = sum(w[min(t, len(w) - 1)] for w in ws)
        pdis += sum(w[t] * GO * a[t] for w, a in zip(ws, logs) if t < len(a)) / s_t
    return wis, pdis


def make_chain(tmp_path_factory):
    logs = chain_logs(200, seed=1)
    assert min(map(len, logs)) == 1 and max(map(len, logs)) == H
    return logs, write(tmp_path_factory.mktemp("chain"), "logs", chain_episodes(logs), OBS2, ACT2)
