"""CPU requests of the prelearner actors and learners, sized to the cluster (``configure``).

Ray Data's read tasks (ListFiles / ReadFiles) each need one whole CPU, and RLlib's defaults
(``concurrency=max(2, num_learners)`` map actors of 1 CPU, 1 CPU per learner) can take every
CPU of a small machine: the read never runs and the job stalls. :func:`plan_resources` keeps
one CPU for reading and gives the rest to the learners and the prelearner actors:

* **small** (fewer than 2 whole CPUs left for prelearner actors once 1 read CPU, 1 per CPU
  learner, the evaluation EnvRunners and 1 for the algorithm's process in a Tune trial are
  counted): one prelearner actor of 0.25 CPU,
  0.25 CPU per CPU learner and 0.25 CPU for the algorithm's own process (what a Tune trial
  reserves; RLlib's 1 let two trials of a 2-point grid take both CPUs of a laptop and starve
  the reads) (what suits a 2-CPU laptop; never a stall);
* **otherwise**: learners keep RLlib's 1 CPU each and the prelearner actors take 1 CPU each in
  an autoscaling pool of (one per node, at most the CPUs left but the trial's 1) .. (the CPUs
  left; in a Tune trial the pool grows only into free CPUs), through Ray
  Data's ``compute=ActorPoolStrategy`` (not the deprecated ``concurrency=``).

The user's own ``map_batches_kwargs`` (``num_cpus``, ``compute``, ``concurrency``) and
``num_cpus_per_learner`` win over the plan.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

READ_CPUS = 1.0
"""Kept free for Ray Data's read tasks."""
SMALL_SHARE = 0.25
"""CPU request of a prelearner actor / CPU learner / the algorithm's process (what a Tune
trial holds) on a small machine."""
MAIN_PROCESS_DEFAULT = 1
"""RLlib's ``num_cpus_for_main_process`` default (a user's other value is kept)."""


@dataclass(frozen=True)
class ResourcePlan:
    """What :func:`plan_resources` chose (see the module docstring)."""

    cluster_cpus: float
    num_learners: int
    small: bool
    map_num_cpus: float
    map_actors: tuple[int, int]
    """(min, max) prelearner actors of the autoscaling pool."""
    learner_cpus: float | None
    """CPUs per remote CPU learner (None: RLlib's setting is kept, e.g. GPU learners)."""

    def line(self) -> str:
        """The one log line of the choice."""
        lo, hi = self.map_actors
        learners = "local learner" if self.num_learners == 0 else f"{self.num_learners} learners"
        per = "" if self.learner_cpus is None or self.num_learners == 0 else f" x {self.learner_cpus:g} CPU"
        return (
            f"configure: {self.cluster_cpus:g} CPUs, {learners}{per}; prelearner actors "
            f"{lo}..{hi} x {self.map_num_cpus:g} CPU; {READ_CPUS:g} CPU kept for Ray Data's reads"
            + (
                " (small machine: fractional requests, 0.25 CPU per algorithm / Tune trial)"
                if self.small
                else ""
            )
        )


def plan_resources(
    cluster_cpus: float,
    num_learners: int,
    gpu_learners: bool = False,
    runner_cpus: float = 0.0,
    nodes: int = 1,
) -> ResourcePlan:
    """The plan for a cluster of ``cluster_cpus`` CPUs on ``nodes`` nodes (module docstring).
    ``runner_cpus``: the CPUs of remote evaluation EnvRunners and offline evaluation runners."""
    cpu_learners = num_learners if not gpu_learners else 0
    spare = cluster_cpus - READ_CPUS - cpu_learners * 1.0 - runner_cpus
    # A Tune trial also holds RLlib's 1 CPU for the algorithm's process (a driver holds none):
    # the small plan unless whole actors still fit beside it, and the pool's first actors too.
    if spare - MAIN_PROCESS_DEFAULT < 2.0:
        return ResourcePlan(
            cluster_cpus, num_learners, True, SMALL_SHARE, (1, 1), SMALL_SHARE if cpu_learners else None
        )
    most = int(math.floor(spare))
    return ResourcePlan(
        cluster_cpus,
        num_learners,
        False,
        1.0,
        (min(max(nodes, 1), most - MAIN_PROCESS_DEFAULT), most),
        1.0 if cpu_learners else None,
    )


def cluster_size() -> tuple[float, int]:
    """(CPUs, nodes with CPUs) of the running Ray cluster, else of this machine (what
    ``ray.init()`` would start)."""
    import ray

    if ray.is_initialized():
        nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0]
        return float(ray.cluster_resources().get("CPU", 0.0)), max(len(nodes), 1)
    return float(os.cpu_count() or 1), 1


def apply_plan(cfg: Any, plan: ResourcePlan) -> dict[str, Any]:
    """Set ``plan`` on ``cfg`` where the user did not choose; returns the map_batches_kwargs."""
    from ray.data import ActorPoolStrategy

    user = dict(cfg.map_batches_kwargs)
    map_kwargs: dict[str, Any] = {"batch_format": "pyarrow", "num_cpus": plan.map_num_cpus}
    if "compute" not in user and "concurrency" not in user:
        lo, hi = plan.map_actors
        # compute wins over RLlib's default concurrency=max(2, num_learners), without its warning
        map_kwargs["compute"] = ActorPoolStrategy(min_size=lo, max_size=hi)
    map_kwargs.update(user)
    remote_cpu = cfg.num_learners > 0 and cfg.num_gpus_per_learner == 0
    if remote_cpu and cfg.num_cpus_per_learner == "auto" and plan.learner_cpus is not None:
        cfg.learners(num_cpus_per_learner=plan.learner_cpus)
    if plan.small and cfg.num_cpus_for_main_process == MAIN_PROCESS_DEFAULT:
        # A Tune trial holds this much for the algorithm's own process: RLlib's 1 CPU per trial
        # left no CPU for Ray Data's reads on a small machine (the trial waited forever).
        cfg.resources(num_cpus_for_main_process=SMALL_SHARE)
    local_cpu = cfg.num_learners == 0 and cfg.num_gpus_per_learner == 0
    if plan.small and local_cpu and cfg.num_cpus_per_learner == "auto":
        # With a local learner RLlib's trial bundle is max(num_cpus_per_learner ("auto": 1),
        # num_cpus_for_main_process): the learner runs in that process, so it shares the 0.25.
        cfg.learners(num_cpus_per_learner=SMALL_SHARE)
    return map_kwargs


def map_actor_limit(map_kwargs: dict[str, Any], num_learners: int) -> int:
    """The most prelearner actors ``map_batches_kwargs`` allow (RLlib's default: max(2, L))."""
    compute = map_kwargs.get("compute")
    if compute is not None and getattr(compute, "max_size", None) is not None:
        return int(compute.max_size)
    concurrency = map_kwargs.get("concurrency") or max(2, num_learners)
    return int(concurrency[-1] if isinstance(concurrency, (tuple, list)) else concurrency)


def trial_cpus(cfg: Any) -> tuple[float, int]:
    """(CPUs, actors) one algorithm of a configured ``cfg`` holds while it trains, reads aside:
    its process (RLlib's trial bundle: ``max(num_cpus_per_learner, num_cpus_for_main_process)``
    with a local learner), remote CPU learners, evaluation EnvRunners and offline evaluation
    runners, and the prelearner pool's first actors (Ray Data starts them outside the trial's
    placement group)."""
    from offline_graph.rllib.env.env_setup import remote_runner_cpus

    def cpus(value: Any) -> float:
        return 1.0 if value in ("auto", None) else float(value)

    gpu = cfg.num_gpus_per_learner > 0
    main = float(cfg.num_cpus_for_main_process)
    if cfg.num_learners == 0:
        main = max(main, 0.0 if gpu else cpus(cfg.num_cpus_per_learner))
    remote = 0 if gpu else cfg.num_learners
    learners = remote * cpus(cfg.num_cpus_per_learner)
    kwargs = cfg.map_batches_kwargs or {}
    compute = kwargs.get("compute")
    first = int(getattr(compute, "min_size", None) or map_actor_limit(kwargs, cfg.num_learners))
    runner_cpus, runners = remote_runner_cpus(cfg)
    total = main + learners + runner_cpus + float(kwargs.get("num_cpus") or 1.0) * first
    return total, 1 + remote + runners + first


def node_cpus() -> list[float]:
    """The CPUs of each live node of the running Ray cluster, else of this machine."""
    import ray

    if ray.is_initialized():
        return [float(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"]]
    return [float(os.cpu_count() or 1)]


def max_concurrent_trials(config: Any, nodes: list[float] | None = None) -> int:
    """How many Tune trials of a configured ``config`` can run at once on a cluster whose
    nodes have ``nodes`` CPUs (default: the running cluster's) and still leave the whole CPU
    that Ray Data's read tasks (``ListFiles`` / ``ReadFiles``, outside every trial's placement
    group, 1 CPU each) need on some node, however the trials' actors are placed: at most
    ``CPUs - 1`` in all, and either the biggest node holds every fractional request plus one
    CPU or there are more nodes with a whole CPU than fractional actors. At least 1.

    Pass it as ``tune.TuneConfig(max_concurrent_trials=...)``: Tune starts a trial whenever its
    placement group fits, and trials whose actors take the last whole CPU wait forever."""
    sizes = node_cpus() if nodes is None else [float(c) for c in nodes]
    per, actors = trial_cpus(config)
    total, biggest, whole = sum(sizes), max(sizes, default=0.0), sum(c >= 1.0 for c in sizes)
    fractional = not float(per).is_integer()
    n = max(1, int(math.floor((total - READ_CPUS) / per + 1e-9)))
    while n > 1 and fractional and biggest < READ_CPUS + n * per and whole <= n * actors:
        n -= 1
    return n
