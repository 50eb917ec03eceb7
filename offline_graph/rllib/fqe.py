"""Fitted Q evaluation (Le et al. 2019) of a fixed target policy over graph observations.

A GNN Q network (:class:`~offline_graph.rllib.critic.QNetwork`: ``Discrete`` / node / edge
heads, masked choices ``finfo.min``) is regressed on the logged transitions
``(s, a, r, s', terminated)``::

    y = r + gamma * (1 - end) * sum_a' pi(a' | s') * Q_target(s', a')

``pi`` is the target policy's per-choice probabilities (:class:`~offline_graph.rllib.
ope_policy.Choices`, computed once); an ``s'`` without a legal choice contributes 0. ``end``
is ``terminated``, and also ``truncated`` when ``bootstrap_truncated`` is False; otherwise a
truncated step bootstraps from the stored final observation (as RLlib's value learners).
The target network is a copy of the online one refreshed every ``P`` gradient steps
(``tau=None``: the classic FQE iteration, one regression per refresh) or Polyak-averaged after
every gradient step with ``tau``. FQE iteration ``k`` fits the ``k``-step value, so the
number of refreshes must reach the horizon the value depends on (:func:`horizon`): with
``S`` steps per epoch the fit runs ``max(epochs * S, K)`` steps and refreshes every
``P = max(1, min(S, steps // K))`` steps (once per epoch when ``epochs >= K``), ``K`` =
``iterations``.

Bootstrap heads (``settings.boot_heads = H > 0``, Osband et al. 2016's bootstrapped heads on
a shared encoder): the network has ``1 + H`` Q heads; head 0 fits the data as above (the
estimate), head ``h`` fits the same targets with each episode's steps weighted by a
Poisson(1) draw ``w[h, i]`` (a resample of the episodes) and its own target head. Its value
``sum_i w[h, i] V_h(s_0^i) / sum_i w[h, i]`` is one bootstrap replicate of the whole fit, so
the spread of the ``H`` replicates includes the fitting error, not only the initial states'.

The graphs are ``G = T + E`` columns: the ``T`` step observations then the ``E`` episodes'
final observations; ``next_index[t]`` is ``t + 1`` inside an episode and ``T + i`` at the end
of episode ``i``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.utils.torch_utils import update_target_network

from offline_graph.data.columns import GraphColumns
from offline_graph.rllib.critic import legal, pick
from offline_graph.rllib.ope_policy import INFERENCE_BATCH, Choices, minibatches, q_network, torch_obs


HORIZON_TAIL = 0.01
"""With ``gamma < 1`` the iterations reach the step where ``gamma^k`` falls below this."""
MAX_ITERATIONS = 1000
"""Cap of :func:`horizon` (a very long horizon is fitted with at most this many refreshes)."""


def horizon(lengths: np.ndarray, gamma: float, bootstrapped: bool) -> int:
    """FQE iterations the value needs: the longest logged episode when nothing is bootstrapped
    past its end (``gamma == 1``: exactly), else until ``gamma^k <`` :data:`HORIZON_TAIL`;
    at most :data:`MAX_ITERATIONS`."""
    longest = int(np.max(lengths)) if len(lengths) else 1
    if gamma >= 1.0:
        return min(max(1, longest), MAX_ITERATIONS)
    k = int(math.ceil(math.log(HORIZON_TAIL) / math.log(gamma))) if gamma > 0 else 1
    return max(1, min(k if bootstrapped else min(k, longest), MAX_ITERATIONS))


def schedule(transitions: int, settings: "FQESettings", iterations: int) -> tuple[int, int]:
    """``(gradient steps, steps between target refreshes)`` (module doc)."""
    per_epoch = max(1, math.ceil(transitions / int(settings.batch_size)))
    steps = max(int(settings.epochs) * per_epoch, iterations)
    return steps, max(1, min(per_epoch, steps // max(1, iterations)))


@dataclass(frozen=True)
class FQESettings:
    """Training settings of :func:`fit_fqe`."""

    epochs: int = 30
    """Passes over the transitions (at least; more when the horizon needs more steps)."""
    batch_size: int = 256
    """Transitions per gradient step."""
    lr: float = 1e-3
    """Adam learning rate."""
    tau: float | None = None
    """None: copy the target network after every epoch; else Polyak rate per step."""
    model: dict | None = None
    """The Q network's encoder keys (GNNModule's ``hidden``, ``layers``, ``conv``, ...)."""
    iterations: int | None = None
    """Target refreshes ``K`` to reach (None: one per epoch); :func:`horizon` gives it."""
    boot_heads: int = 0
    """Bootstrap heads ``H`` (module doc); 0: none."""


@dataclass
class FQEValues:
    """The fitted model read at the data: ``q [T]`` = Q(s_t, a_t), ``v [G]`` =
    E_{a ~ pi} Q(s, a) of every graph (steps, then final observations), head 0; ``boot
    [H]``: the bootstrap heads' values of the initial states (module doc)."""

    q: np.ndarray
    v: np.ndarray
    losses: list[float]
    boot: np.ndarray


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
    heads = int(settings.boot_heads)
    net = q_network(observation_space, action_space, settings.model, num_q=1 + heads)
    target = net.frozen_copy()
    opt = torch.optim.Adam(net.parameters(), lr=settings.lr)
    nxt = next_graph_index(ptr)
    acts = torch.from_numpy(np.asarray(actions, np.int64))
    rews = torch.from_numpy(np.asarray(rewards, np.float32))
    alive = torch.from_numpy(1.0 - np.asarray(ends, np.float32))
    episode_w = np.concatenate([np.ones((1, len(ptr) - 1)), rng.poisson(1.0, (heads, len(ptr) - 1))])
    step_w = torch.from_numpy(np.repeat(episode_w, np.diff(ptr), axis=1).astype(np.float32))  # [1+H, T]
    steps, period = schedule(len(actions), settings, settings.iterations or int(settings.epochs))
    losses: list[float] = []
    step = 0
    while step < steps:
        total, seen = 0.0, 0
        for idx in minibatches(len(actions), settings.batch_size, rng):
            with torch.no_grad():
                _, q_next = target(torch_obs(graphs.take(nxt[idx])))
                probs = pi.dense(nxt[idx], q_next[0].shape[1])
                v_next = torch.stack([_expected(qn, probs) for qn in q_next])  # [1+H, B]
                y = rews[idx] + gamma * alive[idx] * v_next
            _, q = net(torch_obs(graphs.take(idx)))
            err = (torch.stack([pick(qh, acts[idx]) for qh in q]) - y).pow(2) * step_w[:, idx]
            loss = err.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, seen, step = total + float(err[0].detach().sum()), seen + len(idx), step + 1
            if settings.tau is not None:
                update_target_network(main_net=net, target_net=target, tau=float(settings.tau))
            elif step % period == 0:
                target.load_state_dict(net.state_dict())
            if step == steps:
                break
        losses.append(total / max(1, seen))
    q_sa, v = [], []
    with torch.no_grad():
        for idx in minibatches(len(graphs), INFERENCE_BATCH):
            _, q = net(torch_obs(graphs.take(idx)))
            probs = pi.dense(idx, q[0].shape[1])
            v.append(torch.stack([_expected(qh, probs) for qh in q]).double().numpy())
            rows = idx[idx < len(actions)]
            q_sa.append(pick(q[0][: len(rows)], acts[rows]).double().numpy())
    v_all = np.concatenate(v, axis=1)
    starts = v_all[1:, ptr[:-1]]
    weights = episode_w[1:]
    boot = (weights * starts).sum(1) / np.maximum(weights.sum(1), 1e-12)
    return FQEValues(q=np.concatenate(q_sa), v=v_all[0], losses=losses, boot=boot)
