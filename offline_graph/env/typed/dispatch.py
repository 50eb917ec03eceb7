"""Dispatch (``"offline_graph/Dispatch-v0"``): a typed graph of jobs and machines; which job is
ready is on the machines.

The observation is a typed graph (:class:`~offline_graph.data.graphs.typed.TypedGraph`)::

    TypedGraph(node_types={"job": Box(0, 1, (2,)),       # [value, size]
                           "machine": Box(0, 1, (2,))},  # [idle (0/1), speed]
               edge_types={("job", "fits", "machine"): Box(0, 1, (1,)),  # [setup time]
                           ("machine", "serves", "job"): None})          # the same pairs reversed

one observation ``{"x": {"job": [J, 2], "machine": [M, 2]}, "edge_index": {"job__fits__machine":
[2, E], "machine__serves__job": [2, E]}, "edge_attr": {"job__fits__machine": [E, 1]},
"action_mask": bool [J]}`` (every job allowed: the policy must find the ready ones itself).
Every step shows a fresh state of ``min_jobs..max_jobs`` jobs and ``min_machines..max_machines``
machines: each machine is idle with probability ``idle_probability`` (at least one is), each job
fits each machine with probability ``fit_probability`` (at least one machine), and at least one
job fits an idle machine (a *ready* job). Size, speed and setup time are noise. The action is a
job (``NodeAction(max_jobs, node_type="job")``); it pays 1 when it is the ready job of the
largest value, else 0; an episode is ``length`` steps. The expert (:func:`dispatch_expert`)
takes that job.

With the defaults the job of the largest value is ready in about 42% of the states, so a
policy that reads only the job nodes (no machines, no edges: it can only rank by value, and the
largest value is its best guess) gets about 3.3 per episode of 8 steps, a uniformly random job
about 1.6, the expert 8 (measured on 20,000 seeded episodes each: value-only 3.34, random
1.62; the value-only policy's normalized score is about 27).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.data.graphs.typed import TypedGraph
from offline_graph.env.policies import RANDOM_ACTION_HINT, Policy, check_epsilon, check_name

FITS = "job__fits__machine"
"""The edge type from a job to the machines it fits (feature: the setup time)."""
SERVES = "machine__serves__job"
"""The same pairs reversed, without features (information flows from machines to jobs)."""
VALUE, SIZE = 0, 1
"""A job's features."""
IDLE, SPEED = 0, 1
"""A machine's features."""


@dataclasses.dataclass(frozen=True)
class DispatchConfig:
    """Settings of :class:`DispatchEnv`."""

    min_jobs: int = 3
    max_jobs: int = 8
    """Job counts are drawn uniformly in ``[min_jobs, max_jobs]``; the action space is
    ``NodeAction(max_jobs, node_type="job")``."""
    min_machines: int = 2
    max_machines: int = 4
    """Machine counts are drawn uniformly in ``[min_machines, max_machines]``."""
    idle_probability: float = 0.1
    """Each machine is idle with this probability (one at random when none is)."""
    fit_probability: float = 0.15
    """Each job fits each machine with this probability (one at random when it fits none)."""
    length: int = 8
    """Steps per episode (the last one terminates it)."""

    def __post_init__(self) -> None:
        def bad(name: str, expected: str, hint: str) -> ConfigError:
            return ConfigError(
                f"DispatchConfig: {name} must be {expected} (found {getattr(self, name)!r}). {hint}"
            )

        if int(self.min_jobs) < 1:
            raise bad("min_jobs", ">= 1", "A job is the action.")
        if int(self.max_jobs) < int(self.min_jobs):
            raise bad("max_jobs", f">= min_jobs={self.min_jobs}", "Job counts are drawn between them.")
        if int(self.min_machines) < 1:
            raise bad("min_machines", ">= 1", "A ready job fits an idle machine.")
        if int(self.max_machines) < int(self.min_machines):
            raise bad(
                "max_machines",
                f">= min_machines={self.min_machines}",
                "Machine counts are drawn between them.",
            )
        for name in ("idle_probability", "fit_probability"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise bad(name, "in [0, 1]", "It is a probability.")
        if int(self.length) < 1:
            raise bad("length", ">= 1", "It counts the steps of an episode.")


def _typed(part: Any, key: str) -> np.ndarray:
    """``part[key]``, the key as text or as its ``(src, relation, dst)`` tuple."""
    if key in part:
        return np.asarray(part[key])
    return np.asarray(part[tuple(key.split("__"))])


def ready_jobs(obs: Mapping[str, Any]) -> np.ndarray:
    """bool ``[J]``: the jobs that fit at least one idle machine."""
    jobs = len(np.asarray(obs["x"]["job"]))
    idle = np.asarray(obs["x"]["machine"])[:, IDLE] > 0.5
    src, dst = _typed(obs["edge_index"], FITS).astype(np.int64).reshape(2, -1)
    ready = np.zeros(jobs, bool)
    ready[src[idle[dst]]] = True
    return ready


def best_job(obs: Mapping[str, Any]) -> int:
    """The ready job (:func:`ready_jobs`) with the largest value: the rewarded action."""
    value = np.asarray(obs["x"]["job"])[:, VALUE]
    return int(np.argmax(np.where(ready_jobs(obs), value, -1.0)))


def dispatch_expert(epsilon: float = 0.0, rng: np.random.Generator | None = None) -> Policy:
    """The expert (:func:`best_job`); with probability ``epsilon`` a random job."""
    rng = rng or np.random.default_rng(0)

    def policy(obs: Any, info: dict[str, Any] | None = None) -> int:
        if epsilon and rng.random() < epsilon:
            return int(rng.integers(len(np.asarray(obs["x"]["job"]))))
        return best_job(obs)

    return policy


def dispatch_space(max_jobs: int) -> tuple[TypedGraph, NodeAction]:
    """(observation space, action space) of the env."""

    def box(width: int) -> gym.spaces.Box:
        return gym.spaces.Box(0.0, 1.0, (width,), np.float32)

    space = TypedGraph(
        node_types={"job": box(2), "machine": box(2)},
        edge_types={("job", "fits", "machine"): box(1), ("machine", "serves", "job"): None},
    )
    return space, NodeAction(max_jobs, node_type="job")


class DispatchEnv(gym.Env):
    """The task of the module docstring. ``DispatchEnv(config=None, **overrides)``."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (as gymnasium.Env)

    def __init__(self, config: DispatchConfig | Mapping[str, Any] | None = None, **overrides: Any) -> None:
        fields = dataclasses.asdict(config) if isinstance(config, DispatchConfig) else dict(config or {})
        self.config = DispatchConfig(**{**fields, **overrides})
        self.observation_space, self.action_space = dispatch_space(self.config.max_jobs)
        self._t = 0
        self._best = 0
        self._jobs = 0

    def draw_state(self) -> dict[str, Any]:
        """A fresh random state, as the observation dict."""
        cfg, rng = self.config, self.np_random
        jobs = int(rng.integers(cfg.min_jobs, cfg.max_jobs + 1))
        machines = int(rng.integers(cfg.min_machines, cfg.max_machines + 1))
        idle = rng.random(machines) < cfg.idle_probability
        if not idle.any():
            idle[rng.integers(machines)] = True
        fits = rng.random((jobs, machines)) < cfg.fit_probability
        for j in np.flatnonzero(~fits.any(axis=1)):
            fits[j, rng.integers(machines)] = True
        if not (fits & idle).any():
            fits[rng.integers(jobs), rng.choice(np.flatnonzero(idle))] = True
        job_x = rng.random((jobs, 2)).astype(np.float32)
        machine_x = np.stack([idle, rng.random(machines)], axis=1).astype(np.float32)
        src, dst = np.nonzero(fits)
        return self.state_observation(job_x, machine_x, np.stack([src, dst]), rng.random((len(src), 1)))

    @staticmethod
    def state_observation(
        job_x: np.ndarray, machine_x: np.ndarray, fits: np.ndarray, setup: np.ndarray
    ) -> dict[str, Any]:
        """The observation of a state: job and machine features, the ``[2, E]`` (job, machine)
        pairs that fit and their ``[E, 1]`` setup times (every job allowed)."""
        fits = np.asarray(fits, np.int64).reshape(2, -1)
        return {
            "x": {"job": np.asarray(job_x, np.float32), "machine": np.asarray(machine_x, np.float32)},
            "edge_index": {FITS: fits, SERVES: fits[::-1].copy()},
            "edge_attr": {FITS: np.asarray(setup, np.float32).reshape(-1, 1)},
            "action_mask": np.ones(len(job_x), bool),
        }

    def show(self, obs: dict[str, Any]) -> dict[str, Any]:
        """Make ``obs`` (a state's observation) the one the next action is scored on."""
        self._jobs = len(obs["x"]["job"])
        self._best = best_job(obs)
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self.show(self.draw_state()), {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        a = int(action)
        legal = 0 <= a < self._jobs
        reward = float(legal and a == self._best)
        self._t += 1
        done = self._t >= self.config.length
        return self.show(self.draw_state()), reward, done, False, {"illegal": not legal}

    def make_policy(self, name: str, epsilon: float, rng: np.random.Generator) -> Policy:
        """``expert`` (:func:`best_job`, ``epsilon`` of the steps random) or ``random``, as
        ``offline-graph record --policy`` names them."""
        check_name("Dispatch-v0 policy", name, ("expert", "random"), "Or pass --policy module:function.")
        epsilon = check_epsilon("Dispatch-v0 policy", epsilon, RANDOM_ACTION_HINT)
        return dispatch_expert(1.0 if name == "random" else epsilon, rng)
