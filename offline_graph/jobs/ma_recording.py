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
training without a ``policy_mapping_fn``). Rows: :mod:`offline_graph.data.episodes.multi_agent`.

Policies: a name built per episode by ``env.make_policy(name, epsilon, rng)``, or
``module:function`` called as ``function(agent_id, obs_dict, info) -> action``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict, space_sizes
from offline_graph.data.graphs.spaces import selection_level
from offline_graph.env.ma_making import (  # noqa: F401  (re-exported: their old import path)
    MultiAgentPolicy,
    agent_spaces,
    ma_policy_for,
    make_ma_env,
    names_multi_agent_env,
)
from offline_graph.env.making import episode_seeds, observe
from offline_graph.jobs.record_job import RecordJob, write_job_file
from offline_graph.rllib.offline.episodes import encode_multi_agent_episode
from offline_graph.rllib.offline.write import _agent_space_texts


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
