"""Fitted Q evaluation (Le et al. 2019) of a fixed target policy over graph observations.

A GNN Q network (:class:`~offline_graph.rllib.critic.QNetwork`: ``Discrete`` / node / edge
heads, masked choices ``finfo.min``) is regressed on the logged transitions
``(s, a, r, s', terminated)``::

    y = r + gamma * (1 - end) * sum_a' pi(a' | s') * Q_target(s', a')

``pi`` is the target policy's per-choice probabilities (:class:`~offline_graph.rllib.
ope_policy.Choices`, computed once); an ``s'`` without a legal choice contributes 0. ``end``
is ``terminated``, and also ``truncated`` when ``bootstrap_truncated`` is False; otherwise a
truncated step bootstraps from the stored final observation (as RLlib's value learners).
The target network is a copy of the online one refreshed after every epoch (``tau=None``:
the classic FQE iteration, one regression per epoch) or Polyak-averaged after every gradient
step with ``tau``.

The graphs are ``G = T + E`` columns: the ``T`` step observations then the ``E`` episodes'
final observations; ``next_index[t]`` is ``t + 1`` inside an episode and ``T + i`` at the end
of episode ``i``.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.utils.torch_utils import update_target_network

from offline_graph.data.columns import GraphColumns
from offline_graph.rllib.critic import legal, pick
from offline_graph.rllib.ope_policy import INFERENCE_BATCH, Choices, minibatches, q_network, torch_obs


@dataclass(frozen=True)
class FQESettings:
    """Training settings of :func:`fit_fqe`."""

    epochs: int = 30
    """Passes over the transitions (with ``tau=None``: FQE iterations)."""
    batch_size: int = 256
    """Transitions per gradient step."""
    lr: float = 1e-3
    """Adam learning rate."""
    tau: float | None = None
    """None: copy the target network after every epoch; else Polyak rate per step."""
    model: dict | None = None
    """The Q network's encoder keys (GNNModule's ``hidden``, ``layers``, ``conv``, ...)."""


@dataclass
class FQEValues:
    """The fitted model read at the data: ``q [T]`` = Q(s_t, a_t), ``v [G]`` =
    E_{a ~ pi} Q(s, a) of every graph (steps, then final observations)."""

    q: np.ndarray
    v: np.ndarray
    losses: list[float]


def next_graph_index(ptr: np.ndarray) -> np.ndarray:
    """``next_index`` of the module doc."""
    n = int(ptr[-1])
    out = np.arange(1, n + 1, dtype=np.int64)
    out[ptr[1:] - 1] = n + np.arange(len(ptr) - 1)
    return out


def _expected(q: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
    """``sum_a pi(a) Q(a)`` over the legal entries ``[B]`` (0 without one)."""
    return (torch.where(legal(q), q, torch.zeros_like(q)) * pi).sum(dim=-1)


def fit_fqe(
    graphs: GraphColumns,
    ptr: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    ends: np.ndarray,
    pi: Choices,
    gamma: float,
    observation_space: gym.Space,
    action_space: gym.Space,
    settings: FQESettings = FQESettings(),
    seed: int = 0,
) -> FQEValues:
    """Fit Q for ``pi`` (module doc); ``ends [T]``: steps not bootstrapped (termination, and
    truncation when not bootstrapping through it)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = q_network(observation_space, action_space, settings.model)
    target = net.frozen_copy()
    opt = torch.optim.Adam(net.parameters(), lr=settings.lr)
    nxt = next_graph_index(ptr)
    acts = torch.from_numpy(np.asarray(actions, np.int64))
    rews = torch.from_numpy(np.asarray(rewards, np.float32))
    alive = torch.from_numpy(1.0 - np.asarray(ends, np.float32))
    losses: list[float] = []
    for _ in range(int(settings.epochs)):
        total = 0.0
        for idx in minibatches(len(actions), settings.batch_size, rng):
            with torch.no_grad():
                _, (q_next,) = target(torch_obs(graphs.take(nxt[idx])))
                v_next = _expected(q_next, pi.dense(nxt[idx], q_next.shape[1]))
                y = rews[idx] + gamma * alive[idx] * v_next
            _, (q,) = net(torch_obs(graphs.take(idx)))
            loss = (pick(q, acts[idx]) - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
            if settings.tau is not None:
                update_target_network(main_net=net, target_net=target, tau=float(settings.tau))
        if settings.tau is None:
            target.load_state_dict(net.state_dict())
        losses.append(total / max(1, len(actions)))
    q_sa, v = [], []
    with torch.no_grad():
        for idx in minibatches(len(graphs), INFERENCE_BATCH):
            _, (q,) = net(torch_obs(graphs.take(idx)))
            v.append(_expected(q, pi.dense(idx, q.shape[1])).double().numpy())
            steps = idx[idx < len(actions)]
            q_sa.append(pick(q[: len(steps)], acts[steps]).double().numpy())
    return FQEValues(q=np.concatenate(q_sa), v=np.concatenate(v), losses=losses)
