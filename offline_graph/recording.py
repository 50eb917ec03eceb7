"""Record graph episodes from any gymnasium env with a ``spaces.Graph`` observation space.

Episode ``i`` of a run with seed ``S`` is recorded with ``env.reset(seed=[S, i])``-derived
seeds and a policy RNG seeded from ``(S, i)``, so the bytes of every episode depend only on
``(S, i)``: the same seed gives the same files whether recorded by one process or by many Ray
tasks. Files hold at most ``episodes_per_file`` episodes (bounded size) and are named
``episodes-<first>-<last>.parquet``.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from offline_graph.episode_codec import encode_episode
from offline_graph.errors import ConfigError
from offline_graph.format import make_metadata
from offline_graph.graph import GraphDict, graph_to_dict, space_sizes

DEFAULT_ENV = "offline_graph/Graph-v0"


def make_env(env: str = DEFAULT_ENV, env_config: dict | None = None) -> gym.Env:
    """A gymnasium env id (``gym.make``) or ``module:ClassName``; must observe ``spaces.Graph``."""
    import offline_graph.env  # noqa: F401  (registers offline_graph/Graph-v0)

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


def episode_seeds(seed: int, index: int) -> tuple[int, np.random.Generator]:
    """(env reset seed, policy RNG) of episode ``index`` of a run with ``seed``."""
    ss = np.random.SeedSequence([seed, index])
    env_seed, pol_seed = ss.spawn(2)
    return int(env_seed.generate_state(1)[0]), np.random.default_rng(pol_seed)


PolicyFactory = Callable[[gym.Env, np.random.Generator], Callable[[GraphDict, dict], int]]


def run_episode(
    env: gym.Env, policy: Callable[[GraphDict, dict], int], env_seed: int, edge_dim: int | None
) -> tuple[list[GraphDict], list[int], list[float], bool, bool]:
    """One episode: observations (T+1), actions, rewards, terminated, truncated."""
    obs, info = env.reset(seed=env_seed)
    observations = [graph_to_dict(obs, edge_dim)]
    actions: list[int] = []
    rewards: list[float] = []
    while True:
        action = int(policy(observations[-1], info))
        obs, reward, terminated, truncated, info = env.step(action)
        observations.append(graph_to_dict(obs, edge_dim))
        actions.append(action)
        rewards.append(float(reward))
        if terminated or truncated:
            return observations, actions, rewards, bool(terminated), bool(truncated)


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


def record_file(job: RecordJob, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Record episodes ``first..last-1`` into one Parquet file; returns a summary."""
    from offline_graph.env.policies import make_policy

    env = make_env(job.env, job.env_config)
    _, edge_dim = space_sizes(env.observation_space)
    num_actions = int(env.action_space.n)  # type: ignore[attr-defined]
    items, returns, steps = [], [], 0
    for i in range(job.first, job.last):
        env_seed, rng = episode_seeds(job.seed, i)
        policy = make_policy(job.policy, num_actions, job.epsilon, rng)
        obs, acts, rews, term, trunc = run_episode(env, policy, env_seed, edge_dim)
        items.append(
            encode_episode(obs, acts, rews, terminated=term, truncated=trunc,
                           episode_id=f"s{job.seed}-e{i:07d}")
        )
        returns.append(sum(rews))
        steps += len(acts)
        if progress is not None:
            progress(1)
    env.close()
    table = pa.table({"item": pa.array(items, pa.binary())})
    meta = make_metadata("episodes", env=job.env, policy=job.policy, epsilon=job.epsilon, seed=job.seed)
    table = table.replace_schema_metadata(meta)
    pq.write_table(table, job.output, compression="zstd")
    return {"file": job.output, "episodes": len(items), "transitions": steps, "returns": returns}


def plan_jobs(
    *, env: str, env_config: dict | None, policy: str, epsilon: float, seed: int,
    episodes: int, episodes_per_file: int, output: str,
) -> list[RecordJob]:
    """Split ``episodes`` into files of at most ``episodes_per_file``."""
    os.makedirs(output, exist_ok=True)
    jobs = []
    for first in range(0, episodes, episodes_per_file):
        last = min(first + episodes_per_file, episodes)
        name = f"episodes-{first:07d}-{last - 1:07d}.parquet"
        jobs.append(RecordJob(env, dict(env_config or {}), policy, epsilon, seed, first, last,
                              os.path.join(output, name)))
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
