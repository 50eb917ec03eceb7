"""Making envs and acting in them, shared by recording, evaluation and the EnvRunners.

An env is a gymnasium id (``gym.make``) or ``module:ClassName`` observing ``spaces.Graph``
(:func:`make_env`; RLlib ``MultiAgentEnv`` s: :mod:`offline_graph.env.ma_making`). Episode
``i`` of a run with seed ``S`` is reset with :func:`episode_seeds` ``(S, i)`` and its policy
draws from that episode's RNG, so an episode depends only on ``(S, i)``. Observations become
our graph dicts with the env's action mask (``info[DEFAULT_MASK_KEY]``, :func:`observe`);
behaviour policies are named (``env.make_policy``) or ``module:function`` (:func:`policy_for`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, NamedTuple

import gymnasium as gym
import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.globals import GlobalsLayout, dict_layout, graph_part
from offline_graph.data.graphs.graph import GraphDict, graph_to_dict
from offline_graph.data.graphs.typed import TypedGraph, text_keys
from offline_graph.data.graphs.spaces import selection_level
from offline_graph.env.user_code import load_named, load_user_policy

DEFAULT_ENV = "offline_graph/Graph-v0"


def make_env(env: str = DEFAULT_ENV, env_config: dict | None = None) -> gym.Env:
    """A gymnasium env id (``gym.make``) or ``module:ClassName``; must observe ``spaces.Graph``.
    An RLlib ``MultiAgentEnv`` is built by :func:`~offline_graph.env.ma_making.make_ma_env`
    (every agent must observe ``spaces.Graph``)."""
    import offline_graph.env  # noqa: F401  (registers offline_graph/Graph-v0)
    from offline_graph.env import ma_making

    if ma_making.names_multi_agent_env(env, env_config):
        return ma_making.make_ma_env(env, env_config)  # type: ignore[no-any-return]
    env_config = env_config or {}
    if ":" in env and "/" not in env.split(":")[0]:
        hint = (
            "Check the module path (importable from the current directory or PYTHONPATH) and the class name."
        )
        factory = load_named(env, "make_env", "module:Class", hint)
        instance = factory(**env_config)
    else:
        try:
            instance = gym.make(env, **env_config)
        except (gym.error.UnregisteredEnv, gym.error.DeprecatedEnv) as err:
            ours = sorted(k for k in gym.registry if k.startswith("offline_graph/"))
            raise ConfigError(
                f"make_env: env must be a registered gymnasium id or module:Class (found {env!r}: "
                f"{err}). Register it with gymnasium.register (imported before the command runs) "
                f"or pass module:Class; this package's envs: {', '.join(ours)}."
            ) from err
    if not isinstance(graph_part(instance.observation_space), (gym.spaces.Graph, TypedGraph)):
        raise ConfigError(
            f"record: env {env!r} observation space must be gymnasium.spaces.Graph, "
            f"offline_graph.TypedGraph or a Dict with one (found {instance.observation_space!r}). "
            "Wrap the env so it returns GraphInstance (or typed graph dict) observations."
        )
    return instance


def env_space_texts(env: gym.Env) -> dict[str, str]:
    """``{"observation_space": ..., "action_space": ...}`` compact texts of ``env``'s spaces
    (what recorded files store in their metadata); empty for spaces without a text form."""
    from offline_graph.data.graphs.space_text import space_text

    try:
        return {
            "observation_space": space_text(env.observation_space),
            "action_space": space_text(env.action_space),
        }
    except ConfigError:  # e.g. a Box action space: the file then names only its env
        return {}


def episode_seeds(seed: int, index: int) -> tuple[int, np.random.Generator]:
    """(env reset seed, policy RNG) of episode ``index`` of a run with ``seed``."""
    ss = np.random.SeedSequence([seed, index])
    env_seed, pol_seed = ss.spawn(2)
    return int(env_seed.generate_state(1)[0]), np.random.default_rng(pol_seed)


Policy = Callable[[GraphDict, dict], int]

DEFAULT_MASK_KEY = "action_mask"
"""The ``info`` key the recorder reads action masks from (public graph env packages' choice)."""


def observe(
    obs: Any, info: dict, edge_dim: int | None, mask_key: str | None, layout: GlobalsLayout | None = None
) -> GraphDict:
    """An env observation (``GraphInstance``) as an observation dict; with ``mask_key``, the
    mask ``info[mask_key]`` (when the env gave one) becomes the dict's bool ``action_mask``. A
    ``Dict`` space's observation (``layout``): its graph as a dict with the flat parts beside
    ``x``, as they were (what episode files store; batching turns them into ``globals``)."""
    parts: dict[str, Any] = {}
    if layout is not None:
        parts = {key: obs[key] for key, _ in layout.parts}
        obs = obs[layout.graph_key]
    out = graph_to_dict(obs, edge_dim) if isinstance(obs, gym.spaces.GraphInstance) else text_keys(dict(obs))
    out.update(parts)
    if mask_key is not None and info is not None and info.get(mask_key) is not None:
        out["action_mask"] = np.asarray(info[mask_key]).astype(bool).reshape(-1)
    return out


def mask_key_for(env: gym.Env, mask_key: str | None = DEFAULT_MASK_KEY) -> str | None:
    """``mask_key`` for node/edge-selection action spaces, None for graph-level ones (their
    masks are not recorded: graph-level masked actions are not supported)."""
    return mask_key if selection_level(env.action_space) is not None else None


class Step(NamedTuple):
    """One env step of :func:`episode_steps`."""

    obs: GraphDict
    """The observation the action was chosen on (dict layout, with ``action_mask``)."""
    action: int
    reward: float
    terminated: bool
    truncated: bool
    info: dict
    """The env's info after the step."""
    next_obs: GraphDict


def episode_steps(
    env: gym.Env,
    policy: Policy,
    env_seed: int,
    edge_dim: int | None,
    mask_key: str | None = None,
) -> Iterator[Step]:
    """The steps of one episode of ``policy`` in ``env`` reset with ``env_seed``.

    ``mask_key``: read ``info[mask_key]`` into each observation's ``action_mask`` (see
    :func:`observe`); the policy is called with that observation dict and the env's ``info``.
    """
    layout = dict_layout(env.observation_space)
    obs, info = env.reset(seed=env_seed)
    current = observe(obs, info, edge_dim, mask_key, layout)
    while True:
        action = int(policy(current, info))
        obs, reward, terminated, truncated, info = env.step(action)
        nxt = observe(obs, info, edge_dim, mask_key, layout)
        yield Step(current, action, float(reward), bool(terminated), bool(truncated), info, nxt)
        if terminated or truncated:
            return
        current = nxt


def run_episode(
    env: gym.Env,
    policy: Policy,
    env_seed: int,
    edge_dim: int | None,
    mask_key: str | None = None,
) -> tuple[list[GraphDict], list[int], list[float], bool, bool]:
    """One episode (see :func:`episode_steps`): observations (T+1), actions, rewards,
    terminated, truncated."""
    steps = list(episode_steps(env, policy, env_seed, edge_dim, mask_key))
    last = steps[-1]
    return (
        [s.obs for s in steps] + [last.next_obs],
        [s.action for s in steps],
        [s.reward for s in steps],
        last.terminated,
        last.truncated,
    )


def policy_for(env: gym.Env, name: str, epsilon: float, rng: np.random.Generator) -> Policy:
    """A behaviour policy for ``env``: ``module:function`` (a user policy), or a name
    ("expert", "random", "mixed") resolved by ``env.unwrapped.make_policy(name, epsilon, rng)``
    when the env has that method, else by :func:`offline_graph.env.policies.make_policy` for
    ``Discrete(k)`` envs of the toy task. For a ``MultiAgentEnv``:
    :func:`~offline_graph.env.ma_making.ma_policy_for` (``policy(agent_id, obs, info)``)."""
    from offline_graph.env.ma_making import is_multi_agent, ma_policy_for

    if is_multi_agent(env):
        return ma_policy_for(env, name, epsilon, rng)  # type: ignore[return-value]
    if ":" in name:
        return load_user_policy(name)
    maker = getattr(env.unwrapped, "make_policy", None)
    if callable(maker):
        return maker(name, epsilon, rng)
    from offline_graph.env.policies import make_policy

    if selection_level(env.action_space) is not None:
        raise ConfigError(
            f"policy: named policy {name!r} must come from the env's make_policy(name, "
            f"epsilon, rng) method for a {env.action_space!r} action space (found an env "
            "without one). Pass --policy module:function instead."
        )
    return make_policy(name, int(env.action_space.n), epsilon, rng)  # type: ignore[attr-defined]
