"""Evaluate trained GNN modules (or named baseline policies) in an RLlib ``MultiAgentEnv``.

Same seeding as the single-agent :mod:`offline_graph.rllib.evaluation.evaluate`: episode ``i`` of an
evaluation with seed ``S`` resets the env with ``recording.episode_seeds(S, i)[0]`` (and a
named policy is built per episode with that episode's RNG). Episodes run one after the other
in one env instance. At every step each agent with an observation acts; the acting agents of
one module go through one batched greedy forward pass
(:func:`offline_graph.rllib.evaluation.evaluate.greedy_actions`).

Agent -> module: ``policy_mapping_fn(agent_id, episode)`` (RLlib's signature, called once per
agent and episode). ``episode`` is an :class:`EpisodeRef` stand-in (``id_``, ``index``,
``env_seed``), not an RLlib ``MultiAgentEpisode``. Without a mapping: the only module if there
is one, else the agent id itself when it is a module id, else a ConfigError.

Both :func:`evaluate_multi_agent_policy` and :func:`evaluate_multi_agent_module` return::

    {"episodes", "seed",
     "mean_return",          # sum over agents per episode, mean over episodes
     "per_agent":  {agent_id:  {"mean_return", "episodes"}},
     "per_module": {module_id: {"mean_return",   # mean over that module's agent-episodes
                                "agent_episodes", "actions", "illegal_actions",
                                "illegal_share"}}}

An action is illegal when it is outside the agent's graph / action mask
(:func:`~offline_graph.rllib.evaluation.evaluate.is_legal`) or the env's info for that agent after the
step says ``illegal_action: True``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict, space_sizes
from offline_graph.data.graphs.spaces import selection_level
from offline_graph.env.ma_making import MultiAgentPolicy, is_multi_agent, make_multi_agent_env  # noqa: F401
from offline_graph.env.making import DEFAULT_MASK_KEY, episode_seeds, load_user_policy, observe
from offline_graph.rllib.evaluation.checkpoints import MODULE_SUBDIR, restore_module, restore_modules  # noqa: F401
from offline_graph.rllib.evaluation.acting import (
    DEFAULT_EVAL_SEED,
    greedy_actions,
    is_legal,
    normalized_score,
)

MappingFn = Callable[..., Any]
"""``policy_mapping_fn(agent_id, episode, **kw) -> module_id`` (RLlib's signature)."""


@dataclass(frozen=True)
class EpisodeRef:
    """What ``policy_mapping_fn`` gets as ``episode`` (a stand-in, not a MultiAgentEpisode)."""

    index: int
    env_seed: int
    id_: str


# --------------------------------------------------------------------------- mapping
def module_dict(modules: Any) -> dict[str, Any]:
    """``{module_id: RLModule}`` of a MultiRLModule, a Mapping or a single RLModule."""
    if isinstance(modules, Mapping) or hasattr(modules, "_rl_modules"):
        return {mid: modules[mid] for mid in modules.keys()}
    from ray.rllib.core import DEFAULT_MODULE_ID

    return {DEFAULT_MODULE_ID: modules}


def _mapper(
    policy_mapping_fn: MappingFn | None, module_ids: list[str] | None
) -> Callable[[Any, EpisodeRef], str]:
    """``(agent_id, episode) -> module id``, checked against ``module_ids`` (None: any id)."""

    def mapped(agent_id: Any, episode: EpisodeRef) -> str:
        if policy_mapping_fn is not None:
            mid = policy_mapping_fn(agent_id, episode)
        elif module_ids is None:
            mid = agent_id
        elif len(module_ids) == 1:
            mid = module_ids[0]
        elif agent_id in module_ids:
            mid = agent_id
        else:
            raise ConfigError(
                f"evaluate: agent {agent_id!r} must map to one of the modules {module_ids} "
                f"(found no policy_mapping_fn and no module named {agent_id!r}). Pass "
                "policy_mapping_fn (--policy-mapping module:function)."
            )
        if module_ids is not None and mid not in module_ids:
            raise ConfigError(
                f"evaluate: policy_mapping_fn({agent_id!r}) must return one of the modules "
                f"{module_ids} (found {mid!r}). Map every agent to a trained module."
            )
        return str(mid)

    return mapped


def env_mapping(env: Any) -> MappingFn | None:
    """The mapping the recording used when no ``policy_mapping_fn`` is given: the env's
    ``module_of(agent_id)`` (the module id recorded with each agent, see
    :mod:`offline_graph.jobs.ma_recording`), else None."""
    fn = getattr(getattr(env, "unwrapped", env), "module_of", None)
    if not callable(fn):
        return None
    return lambda agent_id, *_args, **_kw: str(fn(agent_id))


# --------------------------------------------------------------------------- tally
class _MATally:
    def __init__(self, episodes: int):
        self.episodes = episodes
        self.totals = [0.0] * episodes
        self.agent_returns: dict[Any, dict[int, float]] = {}
        self.agent_module: dict[tuple[int, Any], str] = {}
        self.actions: dict[str, int] = {}
        self.illegal: dict[str, int] = {}

    def reward(self, ep: int, agent: Any, reward: float) -> None:
        self.totals[ep] += float(reward)
        per = self.agent_returns.setdefault(agent, {})
        per[ep] = per.get(ep, 0.0) + float(reward)

    def act(self, ep: int, agent: Any, mid: str, legal: bool) -> None:
        self.agent_returns.setdefault(agent, {}).setdefault(ep, 0.0)
        self.agent_module[(ep, agent)] = mid
        self.actions[mid] = self.actions.get(mid, 0) + 1
        self.illegal[mid] = self.illegal.get(mid, 0) + (0 if legal else 1)

    def summary(self, seed: int) -> dict[str, Any]:
        per_module: dict[str, list[float]] = {mid: [] for mid in self.actions}
        for (ep, agent), mid in sorted(self.agent_module.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
            per_module[mid].append(self.agent_returns[agent][ep])
        return {
            "episodes": self.episodes,
            "seed": int(seed),
            "mean_return": float(np.mean(self.totals)),
            "per_agent": {
                a: {"mean_return": float(np.mean(list(r.values()))), "episodes": len(r)}
                for a, r in sorted(self.agent_returns.items(), key=lambda kv: str(kv[0]))
            },
            "per_module": {
                mid: {
                    "mean_return": float(np.mean(rets)),
                    "agent_episodes": len(rets),
                    "actions": self.actions[mid],
                    "illegal_actions": self.illegal[mid],
                    "illegal_share": self.illegal[mid] / self.actions[mid] if self.actions[mid] else 0.0,
                }
                for mid, rets in sorted(per_module.items())
            },
        }


# --------------------------------------------------------------------------- loop
Chooser = Callable[[int, np.random.Generator, dict[Any, GraphDict], dict, dict[Any, str]], dict[Any, int]]


def _run(
    env: Any,
    episodes: int,
    seed: int,
    mapper: Callable[[Any, EpisodeRef], str],
    edge_dim_of: Callable[[Any, str], int | None],
    mask_key: str | None,
    choose: Chooser,
) -> dict[str, Any]:
    """Play ``episodes`` seeded episodes; ``choose(ep, rng, obs_dicts, infos, modules)`` gives
    the acting agents' actions."""
    if int(episodes) < 1:
        raise ConfigError(f"evaluate: episodes must be >= 1 (found {episodes!r}).")
    tally = _MATally(int(episodes))
    for ep in range(int(episodes)):
        env_seed, rng = episode_seeds(int(seed), ep)
        ref = EpisodeRef(ep, env_seed, f"s{seed}-e{ep:07d}")
        modules: dict[Any, str] = {}
        obs, infos = env.reset(seed=env_seed)
        for t in itertools.count():
            if not obs:
                raise ConfigError(
                    f"evaluate: episode {ep} step {t}: the env must give an observation to at "
                    "least one agent until __all__ is done (found none). Fix the env's step()."
                )
            current = {}
            for agent in obs:
                if agent not in modules:
                    modules[agent] = mapper(agent, ref)
                space = env.get_action_space(agent)
                key = mask_key if selection_level(space) is not None else None
                info = (infos or {}).get(agent) or {}
                current[agent] = observe(obs[agent], info, edge_dim_of(agent, modules[agent]), key)
            actions = choose(ep, rng, current, infos or {}, modules)
            obs, rewards, terms, truncs, infos = env.step(actions)
            for agent, reward in rewards.items():
                tally.reward(ep, agent, reward)
            for agent, action in actions.items():
                flagged = bool(((infos or {}).get(agent) or {}).get("illegal_action", False))
                legal = is_legal(action, current[agent], env.get_action_space(agent)) and not flagged
                tally.act(ep, agent, modules[agent], legal)
            if terms.get("__all__") or truncs.get("__all__"):
                break
            obs = {a: o for a, o in obs.items() if not (terms.get(a) or truncs.get(a))}
    return tally.summary(seed)


def _own_env(env: Any, env_config: dict | None) -> tuple[Any, bool]:  # (instance, built here)
    return (make_multi_agent_env(env, env_config), True) if isinstance(env, str) else (env, False)


def _agent_edge_dim(env: Any) -> Callable[[Any, str], int | None]:
    return lambda agent, _mid: space_sizes(env.get_observation_space(agent))[1]


# --------------------------------------------------------------------------- public
def evaluate_multi_agent_policy(
    policy: str | MultiAgentPolicy,
    env: Any,
    episodes: int = 50,
    seed: int = DEFAULT_EVAL_SEED,
    epsilon: float = 0.3,
    env_config: dict | None = None,
    policy_mapping_fn: MappingFn | None = None,
    mask_key: str | None = DEFAULT_MASK_KEY,
) -> dict[str, Any]:
    """Returns (layout in the module docstring) of a behaviour policy in a MultiAgentEnv.

    ``policy``: a name (``"expert"``, ``"random"``, ``"mixed"``) built per episode with
    ``env.make_policy(name, epsilon, rng)`` and that episode's RNG, ``module:function``, or a
    callable ``policy(agent_id, obs_dict, info) -> action``. ``per_module`` groups agents by
    ``policy_mapping_fn``; without one by the env's ``policy_mapping_fn`` attribute if it has
    one, else by agent id. ``env``: an instance, or an id / ``module:Class`` (built with
    ``env_config``, closed after).
    """
    instance, owned = _own_env(env, env_config)
    if isinstance(policy, str) and ":" in policy:
        policy = load_user_policy(policy)  # type: ignore[assignment]
    maker = getattr(getattr(instance, "unwrapped", instance), "make_policy", None)
    if isinstance(policy, str) and not callable(maker):
        raise ConfigError(
            f"evaluate: named policy {policy!r} must come from the env's make_policy(name, "
            f"epsilon, rng) method (found {type(instance).__name__} without one). Pass a "
            "module:function policy(agent_id, obs_dict, info) instead."
        )
    built: dict[int, MultiAgentPolicy] = {}

    def choose(ep: int, rng: np.random.Generator, current: dict, infos: dict, _m: dict) -> dict:
        if isinstance(policy, str):
            if ep not in built:
                built.clear()
                built[ep] = maker(policy, epsilon, rng)  # type: ignore[misc]
            pol = built[ep]
        else:
            pol = policy
        return {a: int(pol(a, o, (infos.get(a) or {}))) for a, o in current.items()}

    own = getattr(getattr(instance, "unwrapped", instance), "policy_mapping_fn", None)
    mapping = policy_mapping_fn or (own if callable(own) else None)
    try:
        return _run(
            instance, episodes, seed, _mapper(mapping, None), _agent_edge_dim(instance), mask_key, choose
        )
    finally:
        if owned:
            instance.close()


def evaluate_multi_agent_module(
    modules: Any,
    env: Any,
    episodes: int = 50,
    seed: int = DEFAULT_EVAL_SEED,
    policy_mapping_fn: MappingFn | None = None,
    env_config: dict | None = None,
    mask_key: str | None = DEFAULT_MASK_KEY,
    baselines: bool = True,
) -> dict[str, Any]:
    """Returns (layout in the module docstring) of RLModules acting greedily in a MultiAgentEnv.

    ``modules``: a MultiRLModule, a ``{module_id: RLModule}`` Mapping, or one RLModule (then
    every agent uses it). Agent -> module as in the module docstring. Each module reads its
    agents' observations with its own ``observation_space``'s edge size.

    ``baselines=True`` and an env with ``make_policy``: the env's ``"expert"`` and
    ``"random"`` policies play the same seeded episodes with the same mapping; each
    ``per_module`` entry then also has ``expert_return``, ``random_return`` and ``normalized``
    (``100 * (module - random) / (expert - random)``; None when expert and random tie), and
    the result has ``"baselines": {"expert": ..., "random": ...}``. Otherwise these keys are
    absent.
    """
    mods = module_dict(modules)
    for m in mods.values():
        if hasattr(m, "eval"):
            m.eval()
    instance, owned = _own_env(env, env_config)
    agent_dim = _agent_edge_dim(instance)

    def edge_dim_of(agent: Any, mid: str) -> int | None:
        space = getattr(mods[mid], "observation_space", None)
        return agent_dim(agent, mid) if space is None else space_sizes(space)[1]

    def choose(_ep: int, _rng: Any, current: dict, _infos: dict, modules_of: dict) -> dict:
        actions: dict[Any, int] = {}
        for mid in sorted({modules_of[a] for a in current}):
            agents = [a for a in current if modules_of[a] == mid]
            found = greedy_actions(mods[mid], [current[a] for a in agents], edge_dim_of(agents[0], mid))
            actions.update({a: int(x) for a, x in zip(agents, found)})
        return actions

    mapper = _mapper(policy_mapping_fn, sorted(mods))
    try:
        res = _run(instance, episodes, seed, mapper, edge_dim_of, mask_key, choose)
        if baselines:
            add_baselines(res, instance, episodes, seed, policy_mapping_fn or mapper, mask_key)
        return res
    finally:
        if owned:
            instance.close()


def add_baselines(
    res: dict[str, Any],
    env: Any,
    episodes: int,
    seed: int,
    policy_mapping_fn: MappingFn | None = None,
    mask_key: str | None = DEFAULT_MASK_KEY,
) -> dict[str, Any]:
    """Adds the env's expert / random runs (same seeds, same mapping) to result ``res``:
    ``res["baselines"]`` and per module ``expert_return``, ``random_return``, ``normalized``
    (None when they tie). Does nothing when env instance ``env`` has no ``make_policy``."""
    if not callable(getattr(getattr(env, "unwrapped", env), "make_policy", None)):
        return res
    runs = {
        name: evaluate_multi_agent_policy(
            name, env, episodes, seed, policy_mapping_fn=policy_mapping_fn, mask_key=mask_key
        )
        for name in ("expert", "random")
    }
    res["baselines"] = runs
    for mid, entry in res["per_module"].items():
        e = runs["expert"]["per_module"].get(mid, {}).get("mean_return")
        r = runs["random"]["per_module"].get(mid, {}).get("mean_return")
        entry.update(expert_return=e, random_return=r, normalized=None)
        if e is not None and r is not None and e != r:
            entry["normalized"] = normalized_score(entry["mean_return"], r, e)
    return res
