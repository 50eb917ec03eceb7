"""Record graph episodes from any gymnasium env with a ``spaces.Graph`` observation space.

Episode ``i`` of a run with seed ``S`` is recorded with ``env.reset(seed=[S, i])``-derived
seeds and a policy RNG seeded from ``(S, i)``, so the bytes of every episode depend only on
``(S, i)``: the same seed gives the same files whether recorded by one process or by many Ray
tasks. Files hold at most ``episodes_per_file`` episodes (bounded size) and are named
``episodes-<first>-<last>.parquet``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NamedTuple

import gymnasium as gym
import numpy as np

from offline_graph.rllib.episodes import encode_episode
from offline_graph.data.errors import ConfigError
from offline_graph.data import storage
from offline_graph.data.format import episode_file_name, write_episode_file
from offline_graph.data.graph import GraphDict, graph_to_dict, space_sizes
from offline_graph.data.spaces import selection_level

DEFAULT_ENV = "offline_graph/Graph-v0"


def make_env(env: str = DEFAULT_ENV, env_config: dict | None = None) -> gym.Env:
    """A gymnasium env id (``gym.make``) or ``module:ClassName``; must observe ``spaces.Graph``.
    An RLlib ``MultiAgentEnv`` is built by :func:`~offline_graph.jobs.ma_recording.make_ma_env`
    (every agent must observe ``spaces.Graph``)."""
    import offline_graph.env  # noqa: F401  (registers offline_graph/Graph-v0)
    from offline_graph.jobs import ma_recording

    if ma_recording.names_multi_agent_env(env, env_config):
        return ma_recording.make_ma_env(env, env_config)  # type: ignore[no-any-return]
    env_config = env_config or {}
    if ":" in env and "/" not in env.split(":")[0]:
        module, _, name = env.partition(":")
        instance = getattr(importlib.import_module(module), name)(**env_config)
    else:
        instance = gym.make(env, **env_config)
    if not isinstance(instance.observation_space, gym.spaces.Graph):
        raise ConfigError(
            f"record: env {env!r} observation space must be gymnasium.spaces.Graph (found "
            f"{instance.observation_space!r}). Wrap the env so it returns GraphInstance "
            "observations."
        )
    return instance


def env_space_texts(env: gym.Env) -> dict[str, str]:
    """``{"observation_space": ..., "action_space": ...}`` compact texts of ``env``'s spaces
    (what recorded files store in their metadata); empty for spaces without a text form."""
    from offline_graph.data.space_text import space_text

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


def observe(obs: Any, info: dict, edge_dim: int | None, mask_key: str | None) -> GraphDict:
    """An env observation (``GraphInstance``) as an observation dict; with ``mask_key``, the
    mask ``info[mask_key]`` (when the env gave one) becomes the dict's bool ``action_mask``."""
    out = graph_to_dict(obs, edge_dim)
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
    obs, info = env.reset(seed=env_seed)
    current = observe(obs, info, edge_dim, mask_key)
    while True:
        action = int(policy(current, info))
        obs, reward, terminated, truncated, info = env.step(action)
        nxt = observe(obs, info, edge_dim, mask_key)
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


def load_user_policy(spec: str) -> Policy:
    """``module:function`` -> the function (called as ``function(obs_dict, info) -> action``)."""
    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(
            f"policy: {spec!r} must name an importable function module:function (found "
            f"{type(err).__name__}: {err}). It is called as function(obs_dict, info) -> action."
        ) from None
    if not callable(fn):
        raise ConfigError(
            f"policy: {spec!r} must be callable (found {type(fn).__name__}). It is called as "
            "function(obs_dict, info) -> action."
        )
    return fn


def policy_for(env: gym.Env, name: str, epsilon: float, rng: np.random.Generator) -> Policy:
    """A behaviour policy for ``env``: ``module:function`` (a user policy), or a name
    ("expert", "random", "mixed") resolved by ``env.unwrapped.make_policy(name, epsilon, rng)``
    when the env has that method, else by :func:`offline_graph.env.policies.make_policy` for
    ``Discrete(k)`` envs of the toy task. For a ``MultiAgentEnv``:
    :func:`~offline_graph.jobs.ma_recording.ma_policy_for` (``policy(agent_id, obs, info)``)."""
    from offline_graph.rllib.ma_evaluation import is_multi_agent

    if is_multi_agent(env):
        from offline_graph.jobs.ma_recording import ma_policy_for

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


@dataclass(frozen=True)
class RecordJob:
    """One output file's worth of episodes."""

    env: str
    env_config: dict
    policy: str
    epsilon: float
    seed: int
    first: int
    last: int  # exclusive
    output: str
    mask_key: str | None = DEFAULT_MASK_KEY


def record_file(job: RecordJob, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Record episodes ``first..last-1`` into one Parquet file; returns a summary (a
    ``MultiAgentEnv``: :func:`~offline_graph.jobs.ma_recording.record_ma_file`)."""
    from offline_graph.jobs import ma_recording

    if ma_recording.names_multi_agent_env(job.env, job.env_config):
        return ma_recording.record_ma_file(job, progress)
    env = make_env(job.env, job.env_config)
    _, edge_dim = space_sizes(env.observation_space)
    mask_key = mask_key_for(env, job.mask_key)
    items, returns, steps = [], [], 0
    for i in range(job.first, job.last):
        env_seed, rng = episode_seeds(job.seed, i)
        policy = policy_for(env, job.policy, job.epsilon, rng)
        obs, acts, rews, term, trunc = run_episode(env, policy, env_seed, edge_dim, mask_key)
        items.append(
            encode_episode(
                obs, acts, rews, terminated=term, truncated=trunc, episode_id=f"s{job.seed}-e{i:07d}"
            )
        )
        returns.append(sum(rews))
        steps += len(acts)
        if progress is not None:
            progress(1)
    env.close()
    write_job_file(job, items, **({"mask_key": mask_key} if mask_key else {}), **env_space_texts(env))
    return {"file": job.output, "episodes": len(items), "transitions": steps, "returns": returns}


def write_job_file(job: RecordJob, items: list[bytes], **metadata: Any) -> None:
    """The episode file of ``job``: ``items`` with the job's recording facts (env, its
    non-empty config, policy, epsilon, seed) and ``metadata`` in the file metadata."""
    write_episode_file(
        job.output,
        items,
        env=job.env,
        policy=job.policy,
        epsilon=job.epsilon,
        seed=job.seed,
        **({"env_config": job.env_config} if job.env_config else {}),
        **metadata,
    )


def plan_jobs(
    *,
    env: str,
    env_config: dict | None,
    policy: str,
    epsilon: float,
    seed: int,
    episodes: int,
    episodes_per_file: int,
    output: str,
    mask_key: str | None = DEFAULT_MASK_KEY,
) -> list[RecordJob]:
    """Split ``episodes`` into files of at most ``episodes_per_file``."""
    storage.makedirs(output)  # a local directory or a URI (offline_graph.data.storage)
    jobs = []
    for first in range(0, episodes, episodes_per_file):
        last = min(first + episodes_per_file, episodes)
        name = episode_file_name(first, last - 1)
        jobs.append(
            RecordJob(
                env,
                dict(env_config or {}),
                policy,
                epsilon,
                seed,
                first,
                last,
                storage.join(output, name),
                mask_key,
            )
        )
    return jobs


def record(jobs: list[RecordJob], workers: int = 1, show_progress: bool = True) -> Iterator[dict]:
    """Run ``jobs`` locally (``workers=1``) or as Ray tasks; yields per-file summaries."""
    from tqdm import tqdm

    total = sum(j.last - j.first for j in jobs)
    bar = tqdm(total=total, unit="ep", desc="record", disable=not show_progress)
    if workers <= 1:
        for job in jobs:
            yield record_file(job, progress=bar.update)
        bar.close()
        return
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1)(record_file)
    pending = [remote.remote(job) for job in jobs]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        summary = ray.get(done[0])
        bar.update(summary["episodes"])
        yield summary
    bar.close()
