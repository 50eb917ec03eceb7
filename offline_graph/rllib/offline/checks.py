"""The one-shot check of a graph-training config: every setting it lacks or contradicts.

Run by :class:`~offline_graph.rllib.algorithms.offline_algorithms.GraphBC` /
``GraphMARWIL`` when the algorithm is built (``config.build_algo()``), before RLlib sets up
its Ray Data pipeline and learners,
and by :class:`~offline_graph.rllib.offline.prelearner.GraphOfflinePreLearner` when it finds a config
that never went through :func:`offline_graph.configure`.
"""

from __future__ import annotations

from typing import Any

from offline_graph.data.errors import ConfigError
from offline_graph.rllib.offline.collate_fn import GraphCollateFn
from offline_graph.rllib.env.env_setup import remote_runner_cpus
from offline_graph.rllib.offline.resources import map_actor_limit
from offline_graph.rllib.core.settings import SETTINGS_KEY


def graph_config_problems(cfg: Any) -> list[str]:
    """Every setting graph training needs that ``cfg`` lacks or contradicts (empty: fine)."""
    problems = []
    if SETTINGS_KEY not in (cfg.learner_config_dict or {}):
        problems.append(
            "learner_config_dict['offline_graph'] must be set by offline_graph.configure(config) "
            "(found it missing)"
        )
    collate = (cfg.iter_batches_kwargs or {}).get("collate_fn")
    if not isinstance(collate, GraphCollateFn):
        problems.append(
            "offline_data(iter_batches_kwargs={'collate_fn': ...}) must be "
            f"offline_graph.GraphCollateFn() (found {type(collate).__name__ if collate else None}"
            "): the stock collate cannot batch ragged graph columns"
        )
    if cfg.dataset_num_iters_per_learner is None or (
        cfg.num_learners == 0 and cfg.dataset_num_iters_per_learner == 1
    ):
        problems.append(
            "offline_data(dataset_num_iters_per_learner=...) must be an int >= 2 with "
            "num_learners=0, or >= 1 with remote learners (found "
            f"{cfg.dataset_num_iters_per_learner!r})"
        )
    kind = getattr(cfg, "offline_evaluation_type", "eval_loss")
    if getattr(cfg, "offline_evaluation_interval", None) and kind in ("is", "pdis"):
        problems.append(
            f"evaluation(offline_evaluation_type={kind!r}) must run our estimators on graph "
            "configs (found RLlib's own, on a config offline_graph.configure never saw): configure "
            "maps 'is' / 'pdis' to them ('wis' / 'pdis', also 'fqe' and 'dr'); "
            "RLlib 2.60's own runners batch without the graph collate function (TypeError) and "
            "take the target probability at a freshly sampled action, not the logged one"
        )
    problems += _cpu_problems(cfg)
    return problems


def _cpu_problems(cfg: Any) -> list[str]:
    """CPU requests that leave Ray Data's read tasks no CPU on the running cluster (a hang)."""
    import ray

    if not ray.is_initialized():
        return []
    total = float(ray.cluster_resources().get("CPU", 0.0))
    map_kwargs = cfg.map_batches_kwargs or {}
    map_cpus = float(map_kwargs.get("num_cpus") or 1.0)
    concurrency = map_actor_limit(map_kwargs, cfg.num_learners)
    learner_cpus = 0.0
    if cfg.num_learners > 0 and cfg.num_gpus_per_learner == 0:
        per = cfg.num_cpus_per_learner
        learner_cpus = cfg.num_learners * (1.0 if per in ("auto", None) else float(per))
    runner_cpus, runners = remote_runner_cpus(cfg)  # evaluation EnvRunners, offline eval runners
    needed = map_cpus * float(concurrency) + learner_cpus + runner_cpus + 1.0  # + one read task
    requests = [map_cpus, learner_cpus / max(cfg.num_learners, 1), runner_cpus / max(runners, 1)]
    if needed <= total and all(float(r).is_integer() for r in requests):
        return []  # whole-CPU actors leave the read CPU whole on some node
    if needed <= total:
        # Ray Data's ListFiles/ReadFiles tasks take one whole CPU on one node: some node must
        # keep a whole CPU free however the fractional actors are placed (each on one node).
        nodes = [float(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"]]
        fractional = map_cpus * float(concurrency) + learner_cpus + runner_cpus
        actors = int(concurrency) + (cfg.num_learners if learner_cpus else 0) + runners
        if any(c >= 1.0 + fractional for c in nodes) or sum(c >= 1.0 for c in nodes) > actors:
            return []
        return [
            "CPU requests must leave one node a whole free CPU for Ray Data's read tasks "
            f"(ListFiles/ReadFiles take 1 CPU each): {actors} fractional actors ({fractional} "
            f"CPU) could take a share of each of the {len(nodes)} nodes with CPUs {nodes} "
            "(found no node that always keeps a whole CPU). Use nodes with more CPUs or "
            "fewer learners"
        ]
    return [
        f"CPU requests must leave one CPU for Ray Data's read tasks: prelearner actors "
        f"{concurrency} x {map_cpus} + learners {learner_cpus} + "
        + (f"evaluation runners {runner_cpus} + " if runners else "")
        + f"1 read = {needed} must be <= the cluster's {total} CPUs (found more). configure() "
        "sizes map_batches_kwargs (num_cpus, compute=ActorPoolStrategy) and num_cpus_per_learner "
        "to the cluster (0.25 CPU and one prelearner actor on a small machine) and sets "
        "num_cpus_per_env_runner=0.25"
    ]


def check_graph_config(cfg: Any) -> None:
    """Raise one ConfigError naming every problem of :func:`graph_config_problems`."""
    problems = graph_config_problems(cfg)
    if problems:
        raise ConfigError(
            "GraphOfflinePreLearner config: " + "; ".join(problems) + ". Call "
            "`config = offline_graph.configure(config)` after your other settings and before "
            "`config.build_algo()`."
        )
