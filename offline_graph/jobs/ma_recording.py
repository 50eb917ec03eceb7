"""Record RLlib ``MultiAgentEnv`` episodes whose agents observe ``spaces.Graph``.

The multi-agent half of :mod:`offline_graph.jobs.recording` (which dispatches here when
``--env`` names a ``MultiAgentEnv``; PettingZoo parallel envs go through RLlib's
``ParallelPettingZooEnv`` in a ``module:function`` or ``module:Class``). Same seeding, file
naming and splitting: episode ``i`` of a run with seed ``S`` resets the env with
``episode_seeds(S, i)[0]`` and builds a named policy with that episode's RNG, so its bytes
depend only on ``(S, i)``.

Each episode is an RLlib ``MultiAgentEpisode`` (``id_ = "s<S>-e<i:07d>"``) built with
``add_env_reset`` / ``add_env_step`` until ``"__all__"`` is done; agents that finished are not
asked to act again. Observations are stored in the graph dict layout with each agent's own
edge dim; agents with a NodeAction / EdgeAction space get ``action_mask`` from their
``info[mask_key]``. Infos are stored empty (as single-agent recording does). When the env has
a ``module_of(agent_id)`` method, each agent's module id is recorded with it (read by
training without a ``policy_mapping_fn``). Rows: :mod:`offline_graph.data.multi_agent`.

Policies: a name built per episode by ``env.make_policy(name, epsilon, rng)``, or
``module:function`` called as ``function(agent_id, obs_dict, info) -> action``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from offline_graph.data.errors import ConfigError
from offline_graph.data.graph import GraphDict, space_sizes
from offline_graph.data.spaces import selection_level
from offline_graph.jobs.recording import episode_seeds, load_user_policy, observe, write_job_file
from offline_graph.rllib.episodes import encode_multi_agent_episode
from offline_graph.rllib.ma_evaluation import is_multi_agent, make_multi_agent_env
from offline_graph.rllib.write import _agent_space_texts

if TYPE_CHECKING:
    from offline_graph.jobs.recording import RecordJob

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


def _module_of(env: Any) -> Callable[..., str] | None:
    fn = getattr(env, "module_of", None)
    return (lambda aid, *_args, **_kw: str(fn(aid))) if callable(fn) else None


def _make_deterministic(episode: MultiAgentEpisode) -> None:
    """Replace what RLlib draws per run in the agents' episodes (uuid ids, wall-clock step
    times) so that an episode's bytes depend only on its seed: agent episode ids become
    ``<episode id>-<agent id>``, times None (as in an episode built from data)."""
    for aid, sa in episode.agent_episodes.items():
        sa.id_ = f"{episode.id_}-{aid}"
        sa._start_time = sa._last_step_time = None


def run_ma_episode(
    env: Any,
    policy: MultiAgentPolicy,
    env_seed: int,
    episode_id: str,
    edge_dims: dict[Any, int | None],
    mask_keys: dict[Any, str | None],
) -> tuple[MultiAgentEpisode, dict[Any, float], dict[Any, int]]:
    """One finished episode of ``policy`` in ``env`` reset with ``env_seed``: (episode, return
    per agent, actions per agent)."""
    mapping = _module_of(env)
    episode = MultiAgentEpisode(id_=episode_id, agent_to_module_mapping_fn=mapping)  # None: RLlib's

    def observed(obs: dict, infos: dict) -> dict[Any, GraphDict]:
        out = {}
        for aid, o in obs.items():
            if aid not in edge_dims:
                raise ConfigError(
                    f"record: episode {episode_id}: agent {aid!r} must be one of the env's "
                    f"possible_agents {list(edge_dims)} (found an observation for it). Add it to "
                    "possible_agents."
                )
            out[aid] = observe(o, (infos or {}).get(aid) or {}, edge_dims[aid], mask_keys[aid])
        return out

    obs, infos = env.reset(seed=env_seed)
    current = observed(obs, infos)
    episode.add_env_reset(observations=current, infos={a: {} for a in current})
    returns: dict[Any, float] = defaultdict(float)
    counts: dict[Any, int] = defaultdict(int)
    while True:
        if not current:
            raise ConfigError(
                f"record: episode {episode_id} step {episode.env_t}: the env must give an "
                "observation to at least one agent until __all__ is done (found none). Fix the "
                "env's step()."
            )
        infos = infos or {}
        actions = {a: int(policy(a, o, infos.get(a) or {})) for a, o in current.items()}
        obs, rewards, terms, truncs, infos = env.step(actions)
        nxt = observed(obs, infos)
        episode.add_env_step(
            observations=nxt,
            actions=actions,
            rewards={a: float(r) for a, r in rewards.items()},
            infos={a: {} for a in nxt},
            terminateds=terms,
            truncateds=truncs,
        )
        for aid, r in rewards.items():
            returns[aid] += float(r)
        for aid in actions:
            counts[aid] += 1
        if terms.get("__all__") or truncs.get("__all__"):
            _make_deterministic(episode)
            return episode, dict(returns), dict(counts)
        current = {a: o for a, o in nxt.items() if not (terms.get(a) or truncs.get(a))}


def record_ma_file(job: RecordJob, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Record episodes ``first..last-1`` of a multi-agent env into one Parquet file.

    Summary: ``file``, ``episodes``, ``transitions`` (agent steps), ``returns`` (per episode,
    summed over agents), ``agent_transitions`` / ``agent_returns`` (per agent id as str: its
    steps, and its return in each episode it took part in)."""
    env = make_ma_env(job.env, job.env_config)
    obs_spaces, act_spaces = agent_spaces(env)
    edge_dims = {a: space_sizes(s)[1] for a, s in obs_spaces.items()}
    mask_keys = {a: job.mask_key if selection_level(s) is not None else None for a, s in act_spaces.items()}
    items: list[bytes] = []
    returns: list[float] = []
    agent_steps: dict[str, int] = defaultdict(int)
    agent_returns: dict[str, list[float]] = defaultdict(list)
    try:
        for i in range(job.first, job.last):
            env_seed, rng = episode_seeds(job.seed, i)
            policy = ma_policy_for(env, job.policy, job.epsilon, rng)
            episode, rets, counts = run_ma_episode(
                env, policy, env_seed, f"s{job.seed}-e{i:07d}", edge_dims, mask_keys
            )
            items.append(encode_multi_agent_episode(episode))
            returns.append(sum(rets.values()))
            for aid in episode.agent_episodes:
                agent_returns[str(aid)].append(rets.get(aid, 0.0))
                agent_steps[str(aid)] += counts.get(aid, 0)
            if progress is not None:
                progress(1)
    finally:
        env.close()
    masked = any(k is not None for k in mask_keys.values())
    write_job_file(
        job,
        items,
        multi_agent=True,
        **({"agent_spaces": texts} if (texts := _agent_space_texts(obs_spaces, act_spaces)) else {}),
        **({"mask_key": job.mask_key} if masked else {}),
    )
    return {
        "file": job.output,
        "episodes": len(items),
        "transitions": sum(agent_steps.values()),
        "returns": returns,
        "agent_transitions": dict(sorted(agent_steps.items())),
        "agent_returns": dict(sorted(agent_returns.items())),
    }
