"""Evaluate a trained GNN policy (or a named baseline policy) in a graph environment.

Episode ``i`` of an evaluation with seed ``S`` resets its env with
``recording.episode_seeds(S, i)``, exactly as recording does, so the trained module, the
expert and the random policy all see the same episodes (the same graphs, as long as they take
the same actions: every step draws a fresh graph from the env's RNG, independently of the
action; actions only decide when an episode ends).

NOTE: evaluating with the seed the training data was recorded with replays the *training*
graphs. Use a different seed (``DEFAULT_EVAL_SEED``) for a held-out score.

The module is run greedily (``argmax`` of ``forward_inference``'s logits; modules with memory
step by step with their state, :mod:`.stepwise`). Episodes run in lockstep (``num_envs`` env
copies, one batched forward pass per step, each episode in its own env instance), so the
result does not depend on ``num_envs``.

Also here: :func:`restore_module`, the RLModule alone from an ``algo.save_to_path``
checkpoint, without Ray or the training data. The trained module of a running algorithm is
``algo.get_module()`` and the whole algorithm comes back with ``Algorithm.from_checkpoint``
(both work for the ``GraphBC`` / ``GraphMARWIL`` that ``offline_graph.configure`` sets, see
:mod:`offline_graph.rllib.algorithms.offline_algorithms`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.globals import dict_layout
from offline_graph.data.graphs.graph import GraphDict, space_sizes
from offline_graph.env.making import (
    DEFAULT_ENV,
    DEFAULT_MASK_KEY,
    episode_seeds,
    episode_steps,
    make_env,
    mask_key_for,
    observe,
    policy_for,
)
from offline_graph.rllib.evaluation.acting import (  # noqa: F401  (re-exported: their old import path)
    DEFAULT_EVAL_SEED,
    greedy_actions,
    is_legal,
    module_device,
    normalized_score,
    obs_batch,
)
from offline_graph.rllib.evaluation.checkpoints import MODULE_SUBDIR, restore_module  # noqa: F401
from offline_graph.rllib.core.stepwise import StepStates, is_stateful

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.core.rl_module.rl_module import RLModule

EnvArg = str | gym.Env


class _Tally:
    """Per-episode returns/lengths/success and illegal-action counts of one evaluation."""

    def __init__(self, episodes: int, action_space: gym.Space):
        self.returns = [0.0] * episodes
        self.lengths = [0] * episodes
        self.success: list[bool | None] = [None] * episodes
        self.illegal = 0
        self.space = action_space

    def step(self, ep: int, obs: GraphDict, action: int, reward: float, done: bool, info: dict) -> None:
        self.illegal += 0 if is_legal(action, obs, self.space) else 1
        self.returns[ep] += float(reward)
        self.lengths[ep] += 1
        if done and isinstance(info, dict) and "is_success" in info:
            self.success[ep] = bool(info["is_success"])

    def summary(self, seed: int) -> dict[str, Any]:
        arr = np.asarray(self.returns, dtype=np.float64)
        steps = int(sum(self.lengths))
        known = [s for s in self.success if s is not None]
        return {
            "mean_return": float(arr.mean()) if arr.size else float("nan"),
            "std": float(arr.std()) if arr.size else float("nan"),
            "returns": [float(r) for r in arr],
            "episodes": int(arr.size),
            "mean_length": float(np.mean(self.lengths)) if self.lengths else float("nan"),
            "seed": int(seed),
            "actions": steps,
            "illegal_actions": int(self.illegal),
            "illegal_share": float(self.illegal / steps) if steps else 0.0,
            # share of episodes whose final info said is_success=True (None: env never says)
            "success_rate": float(np.mean(known)) if len(known) == len(self.success) and known else None,
        }


def _check_episodes(episodes: int) -> None:
    if int(episodes) < 1:
        raise ConfigError(f"evaluate: episodes must be >= 1 (found {episodes!r}).")


def _env_instance(env: EnvArg, env_config: dict | None = None) -> gym.Env:
    return make_env(env, env_config) if isinstance(env, str) else env


# --------------------------------------------------------------------------- baselines
def evaluate_policy(
    policy: str | Callable[[GraphDict, dict], int],
    env: EnvArg = DEFAULT_ENV,
    episodes: int = 50,
    seed: int = DEFAULT_EVAL_SEED,
    epsilon: float = 0.3,
    env_config: dict | None = None,
    mask_key: str | None = DEFAULT_MASK_KEY,
    policy_mapping_fn: Callable[..., Any] | None = None,
) -> dict[str, Any]:
    """Returns (mean/std/list), lengths, illegal-action share and success rate of a behaviour
    policy over ``episodes`` seeded episodes. For an RLlib ``MultiAgentEnv`` (with
    ``policy_mapping_fn``): :func:`~offline_graph.rllib.evaluation.ma_evaluation.evaluate_multi_agent_policy`.

    ``policy`` is a name (``"expert"``, ``"random"``, ``"mixed"``: built per episode with that
    episode's RNG, exactly as ``offline-graph record`` does, see
    :func:`offline_graph.jobs.recording.policy_for`), ``module:function``, or a callable
    ``policy(obs_dict, info) -> int`` used as is for every episode. For node/edge-selection
    envs the obs dict carries ``action_mask`` from ``info[mask_key]``. ``env`` is an env id /
    ``module:Class`` string (built with ``env_config``) or an env instance.
    """
    _check_episodes(episodes)
    from offline_graph.rllib.evaluation import ma_evaluation as ma

    if ma.is_multi_agent(env, env_config):
        pol: Any = policy  # a multi-agent policy takes (agent_id, obs_dict, info)
        return ma.evaluate_multi_agent_policy(
            pol, env, episodes, seed, epsilon, env_config, policy_mapping_fn, mask_key
        )
    instance = _env_instance(env, env_config)
    _, edge_dim = space_sizes(instance.observation_space)
    key = mask_key_for(instance, mask_key)
    tally = _Tally(int(episodes), instance.action_space)
    for i in range(int(episodes)):
        env_seed, rng = episode_seeds(int(seed), i)
        pol = policy_for(instance, policy, epsilon, rng) if isinstance(policy, str) else policy
        for st in episode_steps(instance, pol, env_seed, edge_dim, key):
            tally.step(i, st.obs, st.action, st.reward, st.terminated or st.truncated, st.info)
    if isinstance(env, str):
        instance.close()
    return tally.summary(seed)


def evaluate_module(
    module: Any,
    env: EnvArg = DEFAULT_ENV,
    episodes: int = 50,
    seed: int = DEFAULT_EVAL_SEED,
    num_envs: int = 16,
    env_config: dict | None = None,
    torch_threads: int | None = 1,
    mask_key: str | None = DEFAULT_MASK_KEY,
    policy_mapping_fn: Callable[..., Any] | None = None,
) -> dict[str, Any]:
    """Mean/std/list of returns of ``module`` acting greedily over ``episodes`` episodes,
    plus ``illegal_actions`` / ``illegal_share`` (actions outside this step's graph or its
    ``action_mask``) and ``success_rate`` (envs whose final ``info`` has ``is_success``).

    ``env`` is an env id / ``module:Class`` string (``num_envs`` instances built with
    ``env_config`` run in lockstep, one batched forward pass per step) or an env instance
    (episodes then run one after the other in it). Returns ``{"mean_return", "std", "returns",
    "episodes", "mean_length", "seed"}``; the numbers do not depend on ``num_envs``.

    ``torch_threads`` (1): torch's intra-op threads during the evaluation (restored after;
    None leaves them). The batches are small; on a busy 2-CPU machine two threads made the
    scatter ops up to 5x slower than one.

    An RLlib ``MultiAgentEnv`` goes to :func:`~offline_graph.rllib.evaluation.ma_evaluation.
    evaluate_multi_agent_module` (``module``: a MultiRLModule, ``{id: module}`` or one module;
    agents mapped by ``policy_mapping_fn``; no baselines there; its result layout).
    """
    import torch

    _check_episodes(episodes)
    threads = torch.get_num_threads()
    if torch_threads is not None:
        torch.set_num_threads(int(torch_threads))
    try:
        from offline_graph.rllib.evaluation import ma_evaluation as ma

        if ma.is_multi_agent(env, env_config):
            return ma.evaluate_multi_agent_module(
                module, env, episodes, seed, policy_mapping_fn, env_config, mask_key, baselines=False
            )
        return _evaluate_module(module, env, int(episodes), int(seed), num_envs, env_config, mask_key)
    finally:
        torch.set_num_threads(threads)


def _evaluate_module(
    module: Any,
    env: EnvArg,
    episodes: int,
    seed: int,
    num_envs: int,
    env_config: dict | None,
    mask_key: str | None,
) -> dict[str, Any]:
    if hasattr(module, "eval"):
        module.eval()
    if isinstance(env, str):
        width = max(1, min(int(num_envs), int(episodes)))
        envs = [make_env(env, env_config) for _ in range(width)]
    else:
        envs = [env]
    _, edge_dim = space_sizes(envs[0].observation_space)
    key = mask_key_for(envs[0], mask_key)
    tally = _Tally(int(episodes), envs[0].action_space)
    next_episode = 0
    # slot -> (episode index, current observation dict) of the episode running in envs[slot]
    running: dict[int, tuple[int, GraphDict]] = {}

    states = StepStates(module) if is_stateful(module) else None  # memory: one state per episode

    layout = dict_layout(envs[0].observation_space)

    def start(slot: int) -> None:
        nonlocal next_episode
        if next_episode >= int(episodes):
            return
        if states is not None:
            states.reset(slot)
        env_seed, _ = episode_seeds(int(seed), next_episode)
        obs, info = envs[slot].reset(seed=env_seed)
        running[slot] = (next_episode, observe(obs, info, edge_dim, key, layout))
        next_episode += 1

    for slot in range(len(envs)):
        start(slot)
    while running:
        slots = sorted(running)
        actions = greedy_actions(module, [running[s][1] for s in slots], edge_dim, states, slots)
        for slot, action in zip(slots, actions):
            ep, current = running.pop(slot)
            obs, reward, terminated, truncated, info = envs[slot].step(int(action))
            done = bool(terminated or truncated)
            tally.step(ep, current, int(action), float(reward), done, info)
            if done:
                start(slot)
            else:
                running[slot] = (ep, observe(obs, info, edge_dim, key, layout))
    if isinstance(env, str):
        for e in envs:
            e.close()
    return tally.summary(seed)


def baseline_scores(
    env: EnvArg = DEFAULT_ENV,
    episodes: int = 50,
    seed: int = DEFAULT_EVAL_SEED,
    env_config: dict | None = None,
    mask_key: str | None = DEFAULT_MASK_KEY,
) -> dict[str, dict[str, Any]]:
    """``{"expert": ..., "random": ...}`` evaluations over the same seeded episodes."""
    return {
        name: evaluate_policy(name, env, episodes, seed, env_config=env_config, mask_key=mask_key)
        for name in ("expert", "random")
    }


# --------------------------------------------------------------------------- old names
def learner_module(algo: Algorithm, module_id: str | None = None) -> RLModule | None:
    """Deprecated: ``algo.get_module(module_id)`` (works on ``GraphBC`` / ``GraphMARWIL``)."""
    import warnings

    from offline_graph.rllib.algorithms.offline_algorithms import learner_module_copy

    warnings.warn("learner_module(algo) is algo.get_module() now.", DeprecationWarning, stacklevel=2)
    return learner_module_copy(algo) if module_id is None else learner_module_copy(algo, module_id)


def restore_algorithm(checkpoint: str) -> Algorithm:
    """Deprecated: ``ray.rllib.algorithms.algorithm.Algorithm.from_checkpoint(checkpoint)``."""
    import warnings

    from ray.rllib.algorithms.algorithm import Algorithm

    warnings.warn(
        "restore_algorithm(path) is Algorithm.from_checkpoint(path) now.", DeprecationWarning, stacklevel=2
    )
    return Algorithm.from_checkpoint(checkpoint)
