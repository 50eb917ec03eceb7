"""Record graph episodes from any gymnasium env with a ``spaces.Graph`` observation space.

Episode ``i`` of a run with seed ``S`` is recorded with ``env.reset(seed=[S, i])``-derived
seeds and a policy RNG seeded from ``(S, i)``, so the bytes of every episode depend only on
``(S, i)``: the same seed gives the same files whether recorded by one process or by many Ray
tasks. Files hold at most ``episodes_per_file`` episodes (bounded size) and are named
``episodes-<first>-<last>.parquet``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator


from offline_graph.rllib.offline.episodes import encode_episode
from offline_graph.data.store import storage
from offline_graph.data.store.format import episode_file_name
from offline_graph.data.graphs.graph import space_sizes
from offline_graph.jobs.record_job import RecordJob, write_job_file
from offline_graph.env.making import (  # noqa: F401  (re-exported: their old import path)
    DEFAULT_ENV,
    DEFAULT_MASK_KEY,
    Policy,
    Step,
    env_space_texts,
    episode_seeds,
    episode_steps,
    load_user_policy,
    make_env,
    mask_key_for,
    observe,
    policy_for,
    run_episode,
)


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
    storage.makedirs(output)  # a local directory or a URI (offline_graph.data.store.storage)
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

    from offline_graph.rllib.core.ray_session import start_ray

    start_ray(workers)
    remote = ray.remote(num_cpus=1)(record_file)
    pending = [remote.remote(job) for job in jobs]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        summary = ray.get(done[0])
        bar.update(summary["episodes"])
        yield summary
    bar.close()
