"""One recording job (:class:`RecordJob`: an output file's worth of episodes of one env,
policy and seed) and the writing of its episode file with the recording facts in the
metadata; run by :mod:`offline_graph.jobs.recording` and :mod:`offline_graph.jobs.ma_recording`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from offline_graph.data.store.format import write_episode_file
from offline_graph.env.making import DEFAULT_MASK_KEY


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
