"""``offline_graph.configure(config)``: everything else graph training needs, in one place.

Given an RLlib ``BCConfig`` / ``MARWILConfig`` with a ``gymnasium.spaces.Graph`` observation
space, a ``Discrete`` (or ``NodeAction`` / ``EdgeAction``) action space,
``offline_data(input_=..., prelearner_class=GraphOfflinePreLearner)`` and an RLModule spec,
it sets:

===============================  ===========================================================
setting                          value and why
===============================  ===========================================================
``iter_batches_kwargs``          ``collate_fn=GraphCollateFn()``: builds the PyG batch on
                                 each learner (the stock collate cannot batch ragged lists);
                                 ``drop_last=True``: every batch has exactly B transitions
``map_batches_kwargs``           ``batch_format="pyarrow"``, ``num_cpus=0.25``,
                                 ``concurrency=1``: on a 2-CPU machine the stock 2 x 1 CPU
                                 map actors starve Ray Data's read tasks (a stall)
``num_cpus_per_learner``         0.25 for CPU learners when ``num_learners > 0`` (same reason)
``input_read_method_kwargs``     ``include_paths=True`` (episode input): errors name the file
``materialize_mapped_data``      True: map once instead of cold-starting actors each epoch
``dataset_num_iters_per_learner``  10 when unset (updates per ``train()``): RLlib's learners
                                 need it on the iterator path; 1 with ``num_learners=0`` is
                                 refused (RLlib's single-batch path takes no collate function)
``learner_config_dict``          ``{"offline_graph": {on_error, seed, module_id}}``
===============================  ===========================================================

Settings the user already set to a conflicting value raise :class:`ConfigError` naming the
setting and the value it needs.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Literal, TypeVar

from offline_graph.data.errors import ConfigError
from offline_graph.data.files import scan_files
from offline_graph.data.reader import spec_from_spaces
from offline_graph.rllib.collate_fn import GraphCollateFn
from offline_graph.rllib.settings import SETTINGS_KEY, GraphSettings, read_settings

C = TypeVar("C")
logger = logging.getLogger(__name__)


def detect_kind(input_: Any) -> str | None:
    """'episodes' or 'transitions' from the local input files' metadata (None: unknown)."""
    return scan_files(input_, "raise").kind


def configure(
    config: C,
    *,
    on_error: Literal["raise", "skip"] = "raise",
    seed: int | None = None,
) -> C:
    """Fill in what graph training needs (see the module docstring); returns ``config``."""
    from offline_graph.rllib.prelearner import GraphOfflinePreLearner

    cfg: Any = config
    problems: list[str] = []
    if cfg.observation_space is None or cfg.action_space is None:
        raise ConfigError(
            "configure: config.environment(observation_space=..., action_space=...) must be "
            "set (found observation_space="
            f"{cfg.observation_space!r}, action_space={cfg.action_space!r}). Pass a "
            "gymnasium.spaces.Graph and a Discrete(k), NodeAction(max_nodes) or EdgeAction(max_edges)."
        )
    spec_from_spaces(cfg.observation_space, cfg.action_space)
    if cfg.prelearner_class is None:
        cfg.offline_data(prelearner_class=GraphOfflinePreLearner)
    elif not issubclass(cfg.prelearner_class, GraphOfflinePreLearner):
        problems.append(
            f"offline_data(prelearner_class=...) must be GraphOfflinePreLearner or a subclass "
            f"(found {cfg.prelearner_class.__name__})"
        )
    if on_error not in ("raise", "skip"):
        problems.append(f"on_error must be 'raise' or 'skip' (found {on_error!r})")
    scan = scan_files(cfg.input_, on_error) if on_error in ("raise", "skip") else None
    kind = scan.kind if scan is not None else None
    if kind == "transitions" and cfg.input_read_episodes:
        problems.append(
            "offline_data(input_read_episodes=...) must be False for converted transition "
            "rows (found True)"
        )
    if kind == "episodes" and not cfg.input_read_episodes:
        problems.append(
            "offline_data(input_read_episodes=...) must be True for episode files (found False)"
        )
    if kind == "transitions" and float(getattr(cfg, "beta", 0.0) or 0.0) > 0.0:
        rows_gamma = scan.metadata.get("gamma") if scan is not None else None
        if rows_gamma is not None and abs(float(rows_gamma) - float(cfg.gamma)) > 1e-12:
            problems.append(
                f"training(gamma=...) must equal the gamma the rows were converted with, "
                f"{rows_gamma} (found {cfg.gamma}): value_targets in converted rows are "
                "returns-to-go with that gamma; re-convert with --gamma or set gamma"
            )
    user_collate = cfg.iter_batches_kwargs.get("collate_fn")
    if user_collate is not None and not isinstance(user_collate, GraphCollateFn):
        problems.append(
            "offline_data(iter_batches_kwargs={'collate_fn': ...}) must be a GraphCollateFn "
            f"(found {type(user_collate).__name__})"
        )
    if cfg.num_learners == 0 and cfg.dataset_num_iters_per_learner == 1:
        problems.append(
            "offline_data(dataset_num_iters_per_learner=...) must be None or >= 2 with "
            "num_learners=0 (found 1): RLlib's single-batch path cannot apply the graph collate"
        )
    if problems:
        raise ConfigError(
            "configure: " + "; ".join(problems) + ". Fix these settings and call "
            "offline_graph.configure(config) again."
        )

    if scan is not None and scan.rejected:
        if not scan.files:
            raise ConfigError(
                f"configure: input must hold at least one readable file (found none; rejected "
                f"by reason: {dict(scan.rejected)}). First error: "
                f"{next(iter(scan.examples.values()))}"
            )
        logger.warning("configure: skipped %d unusable input file(s): %s",
                       sum(scan.rejected.values()), dict(scan.rejected))
        cfg.offline_data(input_=scan.files)
    settings = GraphSettings(
        on_error=on_error,
        seed=int(seed if seed is not None else (cfg.seed if cfg.seed is not None else 0)),
        stats_name=f"offline_graph_stats_{uuid.uuid4().hex[:12]}",
        files_rejected=dict(scan.rejected) if scan is not None else {},
        file_errors=dict(scan.examples) if scan is not None else {},
    )
    iter_kwargs = dict(cfg.iter_batches_kwargs)
    iter_kwargs["collate_fn"] = GraphCollateFn(settings.module_id)
    # Every learner batch holds exactly train_batch_size_per_learner transitions.
    iter_kwargs.setdefault("drop_last", True)
    map_kwargs = {"batch_format": "pyarrow", "num_cpus": 0.25, "concurrency": 1}
    map_kwargs.update(cfg.map_batches_kwargs)
    read_kwargs = dict(cfg.input_read_method_kwargs)
    if cfg.input_read_episodes:
        read_kwargs.setdefault("include_paths", True)
    cfg.offline_data(
        iter_batches_kwargs=iter_kwargs,
        map_batches_kwargs=map_kwargs,
        input_read_method_kwargs=read_kwargs,
        materialize_mapped_data=True,
    )
    if cfg.dataset_num_iters_per_learner is None:
        # RLlib's learners need num_iters on the iterator path; None fails there.
        cfg.offline_data(dataset_num_iters_per_learner=10)
    if cfg.num_learners > 0 and cfg.num_gpus_per_learner == 0 and cfg.num_cpus_per_learner == "auto":
        cfg.learners(num_cpus_per_learner=0.25)
    _set_value_head(cfg)
    cfg.learner_config_dict[SETTINGS_KEY] = settings.as_dict()
    return config


def _set_value_head(cfg: Any) -> None:
    """MARWIL (beta > 0) needs the module's value head; BC must not build one (DDP).

    RLlib 2.60 does not pass ``beta`` into ``model_config``, so it is written here unless the
    user set ``value_head`` explicitly.
    """
    needs = float(getattr(cfg, "beta", 0.0) or 0.0) > 0.0
    spec = getattr(cfg, "_rl_module_spec", None)
    if spec is not None and getattr(spec, "model_config", None) is not None:
        if isinstance(spec.model_config, dict):
            spec.model_config.setdefault("value_head", needs)
            return
    model_config = dict(getattr(cfg, "_model_config", {}) or {})
    model_config.setdefault("value_head", needs)
    cfg.rl_module(model_config=model_config)


def data_report(config: Any) -> dict[str, Any]:
    """Episodes/transitions read = used + rejected (per reason), over all prelearner actors.

    Call on the driver after training (Ray must still be running). Includes input files
    rejected before reading (skip mode).
    """
    from offline_graph.jobs import accounting

    settings = read_settings(config, where="data_report")
    out = accounting.collect(settings.stats_name).as_dict()
    out["files_rejected_by_reason"] = dict(settings.files_rejected)
    out["first_file_error_by_reason"] = dict(settings.file_errors)
    return out


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
    concurrency = map_kwargs.get("concurrency") or max(2, cfg.num_learners)
    concurrency = concurrency[-1] if isinstance(concurrency, (tuple, list)) else concurrency
    learner_cpus = 0.0
    if cfg.num_learners > 0 and cfg.num_gpus_per_learner == 0:
        per = cfg.num_cpus_per_learner
        learner_cpus = cfg.num_learners * (1.0 if per in ("auto", None) else float(per))
    needed = map_cpus * float(concurrency) + learner_cpus + 1.0  # + one read task
    if needed <= total:
        # Ray Data's ListFiles/ReadFiles tasks take one whole CPU on one node: some node must
        # keep a whole CPU free however the fractional actors are placed (each on one node).
        nodes = [float(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"]]
        fractional = map_cpus * float(concurrency) + learner_cpus
        actors = int(concurrency) + (cfg.num_learners if learner_cpus else 0)
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
        f"{concurrency} x {map_cpus} + learners {learner_cpus} + 1 read = {needed} must be <= "
        f"the cluster's {total} CPUs (found more). configure() sets map_batches_kwargs "
        "num_cpus=0.25, concurrency=1 and num_cpus_per_learner=0.25 for CPU learners"
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


class _NoEnvRunners:
    """Stands in for the missing EnvRunner group of an offline algorithm during set_state."""

    def sync_weights(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to sync: offline algorithms without an env have no EnvRunners."""

    def sync_env_runner_states(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to sync (see :meth:`sync_weights`)."""

    def num_remote_env_runners(self) -> int:
        return 0


def _uses_graph_prelearner(config: Any) -> bool:
    from offline_graph.rllib.prelearner import GraphOfflinePreLearner

    pre = getattr(config, "prelearner_class", None)
    return isinstance(pre, type) and issubclass(pre, GraphOfflinePreLearner)


def install_restore_fix() -> None:
    """Make RLlib's own ``Algorithm.from_checkpoint`` work for our offline algorithms.

    RLlib 2.60's ``Algorithm.restore_from_path`` / ``set_state`` sync the restored weights to
    ``self.env_runner_group``, which is None for an offline algorithm without an env
    (``AttributeError: 'NoneType' object has no attribute 'sync_weights'``). For configs
    using ``GraphOfflinePreLearner`` only, a no-op group stands in during those two calls.
    """
    from ray.rllib.algorithms.algorithm import Algorithm

    for name in ("restore_from_path", "set_state"):
        original = getattr(Algorithm, name)
        if getattr(original, "_offline_graph_fix", False):
            continue
        setattr(Algorithm, name, _with_stand_in_env_runners(original))


def _with_stand_in_env_runners(original: Any) -> Any:
    import functools

    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.env_runner_group is not None or not _uses_graph_prelearner(self.config):
            return original(self, *args, **kwargs)
        self.env_runner_group = _NoEnvRunners()
        try:
            return original(self, *args, **kwargs)
        finally:
            self.env_runner_group = None

    method._offline_graph_fix = True  # type: ignore[attr-defined]
    return method


def install_build_check() -> None:
    """Make ``AlgorithmConfig.validate`` (run by ``build_algo()``) check graph configs first.

    Without this, a config that skips :func:`configure` either fails deep inside RLlib or
    hangs in Ray Data before any offline_graph code runs. Configs whose prelearner class is not
    a ``GraphOfflinePreLearner`` are not touched.
    """
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    original = AlgorithmConfig.validate
    if getattr(original, "_offline_graph_check", False):
        return

    def validate(self: Any) -> None:
        if _uses_graph_prelearner(self):
            check_graph_config(self)
        original(self)

    validate._offline_graph_check = True  # type: ignore[attr-defined]
    validate.__doc__ = original.__doc__
    AlgorithmConfig.validate = validate  # type: ignore[method-assign]
