"""Making RLlib ``MultiAgentEnv`` s whose agents observe ``spaces.Graph``, and their
behaviour policies (``policy(agent_id, obs_dict, info) -> action``); the single-agent side is
:mod:`offline_graph.env.making`."""

from __future__ import annotations

import importlib
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict
from offline_graph.env.user_code import load_user_policy


def _env_factory(env: str) -> tuple[Callable[..., Any], dict]:
    import offline_graph.env  # noqa: F401  (registers the package's env ids)

    if ":" in env and "/" not in env.split(":")[0]:
        module, _, name = env.partition(":")
        return getattr(importlib.import_module(module), name), {}
    spec = gym.spec(env)
    entry = spec.entry_point
    factory = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    return factory, dict(spec.kwargs or {})  # type: ignore[return-value]


def is_multi_agent(env: str | gym.Env, env_config: dict | None = None) -> bool:
    """Whether ``env`` (an instance, an env id or ``module:Class``) is an RLlib MultiAgentEnv."""
    from ray.rllib.env.multi_agent_env import MultiAgentEnv

    if not isinstance(env, str):
        return isinstance(env, MultiAgentEnv)
    try:
        factory, _ = _env_factory(env)
    except (ImportError, AttributeError, gym.error.Error):
        return False  # make_env reports it
    if isinstance(factory, type):
        return issubclass(factory, MultiAgentEnv)
    instance = make_multi_agent_env(env, env_config)  # a factory function: build to see
    instance.close()
    return isinstance(instance, MultiAgentEnv)


def make_multi_agent_env(env: str, env_config: dict | None = None) -> Any:
    """The env of an id (its registered entry point, unwrapped: gymnasium's wrappers are not
    MultiAgentEnvs) or ``module:Class``, built with ``env_config`` as keyword arguments."""
    factory, kwargs = _env_factory(env)
    return factory(**{**kwargs, **(env_config or {})})


MultiAgentPolicy = Callable[[Any, GraphDict, dict], int]
"""``policy(agent_id, obs_dict, info) -> action``."""


def names_multi_agent_env(env: str, env_config: dict | None = None) -> bool:
    """Whether ``env`` (an id or ``module:Class`` / ``module:function``) builds an RLlib
    ``MultiAgentEnv``; False when it cannot be built (single-agent ``make_env`` reports why)."""
    try:
        return is_multi_agent(env, env_config)
    except Exception:  # noqa: BLE001  (e.g. a single-agent factory needing other arguments)
        return False


def agent_ids(env: Any) -> list[Any]:
    """The env's ``possible_agents`` (else its ``agents``, else its space dicts' keys)."""
    ids = list(getattr(env, "possible_agents", None) or getattr(env, "agents", None) or [])
    if not ids:
        spaces = getattr(env, "observation_spaces", None) or getattr(env, "observation_space", None)
        ids = list(spaces.keys()) if isinstance(spaces, (dict, gym.spaces.Dict)) else []
    return ids


def agent_spaces(env: Any) -> tuple[dict[Any, gym.Space], dict[Any, gym.Space]]:
    """``({agent_id: observation space}, {agent_id: action space})`` of every possible agent."""
    ids = agent_ids(env)
    return (
        {a: env.get_observation_space(a) for a in ids},
        {a: env.get_action_space(a) for a in ids},
    )


def make_ma_env(env: str, env_config: dict | None = None) -> Any:
    """The ``MultiAgentEnv`` of ``env`` (see :func:`make_multi_agent_env`); every agent must
    observe ``gymnasium.spaces.Graph``."""
    instance = make_multi_agent_env(env, env_config)
    obs_spaces, _ = agent_spaces(instance)
    if not obs_spaces:
        instance.close()
        raise ConfigError(
            f"record: multi-agent env {env!r} must list its agents in possible_agents (found "
            "none). Set self.possible_agents in the env's __init__."
        )
    bad = {a: s for a, s in obs_spaces.items() if not isinstance(s, gym.spaces.Graph)}
    if bad:
        aid, space = next(iter(bad.items()))
        instance.close()
        raise ConfigError(
            f"record: every agent of multi-agent env {env!r} must observe gymnasium.spaces.Graph "
            f"(found {space!r} for agent {aid!r}). Wrap the env so it returns GraphInstance "
            "observations."
        )
    return instance


def ma_policy_for(env: Any, name: str, epsilon: float, rng: np.random.Generator) -> MultiAgentPolicy:
    """``module:function`` (a user policy) or a name resolved by ``env.make_policy(name,
    epsilon, rng)`` (the env or its ``unwrapped`` / PettingZoo ``par_env``)."""
    if ":" in name:
        return load_user_policy(name)  # type: ignore[return-value]  # (agent_id, obs, info)
    for holder in (env, getattr(env, "unwrapped", None), getattr(env, "par_env", None)):
        maker = getattr(holder, "make_policy", None)
        if callable(maker):
            return maker(name, epsilon, rng)  # type: ignore[no-any-return]
    raise ConfigError(
        f"policy: named policy {name!r} must come from the env's make_policy(name, epsilon, "
        f"rng) method (found {type(env).__name__} without one). Pass --policy module:function, "
        "a function(agent_id, obs_dict, info) -> action, instead."
    )
