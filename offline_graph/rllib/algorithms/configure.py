"""``offline_graph.configure(config)``: everything else graph training needs, in one place.

Given an RLlib ``BCConfig`` / ``MARWILConfig`` with a ``gymnasium.spaces.Graph`` observation
space, a ``Discrete`` (or ``NodeAction`` / ``EdgeAction``) action space,
``offline_data(input_=..., prelearner_class=GraphOfflinePreLearner)`` and optionally an
RLModule spec, it sets:

===============================  ===========================================================
setting                          value and why
===============================  ===========================================================
``iter_batches_kwargs``          ``collate_fn=GraphCollateFn()``: builds the PyG batch on
                                 each learner (the stock collate cannot batch ragged lists);
                                 ``drop_last=True``: every batch has exactly B transitions
``map_batches_kwargs``           ``batch_format="pyarrow"``; ``num_cpus`` and
                                 ``compute=ActorPoolStrategy(min, max)`` sized to the cluster
                                 (:mod:`offline_graph.rllib.offline.resources`): on a 2-CPU machine
                                 the stock 2 x 1 CPU map actors starve Ray Data's read tasks
``num_cpus_per_learner``         0.25 on a small machine (same reason; with a local learner
                                 too: RLlib's Tune trial bundle is max(it, main process)),
                                 else RLlib's 1
``input_``                       local paths made absolute: a Tune trial runs in its own
                                 working directory
``input_read_method_kwargs``     ``include_paths=True`` (episode input): errors name the file
``materialize_mapped_data``      True: map once instead of cold-starting actors each epoch
``dataset_num_iters_per_learner``  10 when unset (updates per ``train()``): RLlib's learners
                                 need it on the iterator path; 1 with ``num_learners=0`` is
                                 refused (RLlib's single-batch path takes no collate function)
``learner_config_dict``          ``{"offline_graph": {on_error, seed, ...}}``
                                 (:class:`~offline_graph.rllib.core.settings.GraphSettings`)
``algo_class``                   ``GraphBC`` for ``BC``, ``GraphMARWIL`` for ``MARWIL``
                                 (:mod:`offline_graph.rllib.algorithms.offline_algorithms`): the config check
                                 at ``build_algo()``, ``get_module()`` and restoring from a
                                 checkpoint without EnvRunners
``rl_module_spec``               ``GNNModule`` when no module class is set (RLlib's default
                                 modules cannot read graphs); a class of yours is kept
spaces, ``env_runner_cls``, ...  with an env (e.g. for ``evaluation(...)``): the env's spaces,
                                 ``GraphEnvRunner``, see :mod:`offline_graph.rllib.env.env_setup`
===============================  ===========================================================

Settings the user already set to a conflicting value raise :class:`ConfigError` naming the
setting and the value it needs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import uuid

import gymnasium as gym
from typing import Any, Literal, TypeVar

from offline_graph.data.errors import ConfigError
from offline_graph.data.store.files import FileScan, scan_input
from offline_graph.data.episodes.holdout import check_fraction
from offline_graph.data.store.storage import filesystem as storage_filesystem, is_uri
from offline_graph.data.episodes.reader import spec_from_spaces
from offline_graph.rllib.offline.multi_agent import module_spaces
from offline_graph.rllib.offline.offline_data import GraphOfflineData
from offline_graph.rllib.algorithms.learners import set_graph_learner
from offline_graph.rllib.algorithms.algo_classes import graph_algo_class
from offline_graph.rllib.core.model_options import default_graph_module, set_model_option
from offline_graph.rllib.algorithms.value_configure import DEFAULT_RUN_LENGTH, value_kind, value_settings
from offline_graph.rllib.algorithms.value_configure import set_value_model_options
from offline_graph.rllib.offline.collate_fn import GraphCollateFn
from offline_graph.rllib.env.env_setup import configure_env, configure_multi_agent_env, remote_runner_cpus
from offline_graph.rllib.offline.resources import SMALL_SHARE, apply_plan, cluster_size, plan_resources
from offline_graph.rllib.offline.prelearner import GraphOfflinePreLearner
from offline_graph.rllib.ope.ope_runner import offline_evaluation_settings, share_small_machine
from offline_graph.rllib.core.settings import SETTINGS_KEY, GraphSettings, read_settings

C = TypeVar("C")
logger = logging.getLogger(__name__)


def configure(
    config: C,
    *,
    on_error: Literal["raise", "skip"] = "raise",
    seed: int | None = None,
    holdout: float = 0.0,
    holdout_seed: int = 0,
    value_run_length: int = DEFAULT_RUN_LENGTH,
    offline_evaluation: dict | None = None,
    reward_scaling: str | None = None,
    advantage_norm: str | None = None,
    data: Any = None,
) -> C:
    """Fill in what graph training needs (see the module docstring); returns ``config``.

    The one entry point: BC / MARWIL / IQL / CQL configs (offline, ``GraphBC`` ...
    ``GraphCQL``) and PPO configs (online in a graph env: :func:`offline_graph.configure_online`,
    kept as an alias); any other algorithm is a ConfigError listing these.

    ``holdout``: the fraction of episodes kept out of training (:mod:`offline_graph.data.episodes.holdout`,
    split by ``holdout_seed``), e.g. for offline metrics when there is no env.
    ``value_run_length``: IQL / CQL only, steps per value run
    (:mod:`offline_graph.rllib.algorithms.value_configure`).
    ``reward_scaling``: IQL / CQL, ``"return_range"`` (default), ``"standard"``, ``"none"``
    (:mod:`offline_graph.data.learning.reward_scale`). ``advantage_norm``: IQL's actor,
    ``"shrink_std"`` (default), ``"batch_std"``, ``"none"`` (:mod:`...algorithms.value_learner`).
    ``offline_evaluation``: ``estimate_value`` keywords for ``evaluation(offline_evaluation_type=
    "fqe" | "wis" | "pdis" | "dr")`` (:mod:`offline_graph.rllib.ope.ope_runner`).
    ``data``: ``input_`` listed and checked already with ``on_error`` (a ``FileScan``, or
    :func:`offline_graph.env.data_input.open_input`'s ``DataInput``): not listed again.
    """
    cfg: Any = config
    if _is_ppo(cfg.algo_class):  # online fine-tuning / training in a graph env
        from offline_graph.rllib.algorithms.online import configure_online

        return configure_online(config)
    algo_class = graph_algo_class(cfg.algo_class)
    kind = value_kind(algo_class)
    default_graph_module(cfg)
    # With an env: its spaces, GraphEnvRunner / GraphMultiAgentEnvRunner, eval settings (env_setup.py)
    (configure_multi_agent_env if cfg.is_multi_agent else configure_env)(cfg)
    problems: list[str] = []
    check_fraction(holdout, "configure")
    given = cfg.input_ if data is None else data  # an input resolved already is not listed again
    scan = scan_input(given, on_error) if on_error in ("raise", "skip") else None
    if cfg.is_multi_agent:
        # Per-module spaces come from the MultiRLModuleSpec (checked here, not inferred).
        _policy_spaces_from_modules(cfg)
        module_spaces(cfg.get_multi_rl_module_spec(), "configure")
    else:
        _resolve_spaces(cfg, scan)
    if cfg.prelearner_class is None:
        cfg.offline_data(prelearner_class=GraphOfflinePreLearner)
    if cfg.offline_data_class is None:
        cfg.offline_data(offline_data_class=GraphOfflineData)
    if not (
        isinstance(cfg.prelearner_class, type) and issubclass(cfg.prelearner_class, GraphOfflinePreLearner)
    ):
        problems.append(
            f"offline_data(prelearner_class=...) must be GraphOfflinePreLearner or a subclass "
            f"(found {getattr(cfg.prelearner_class, '__name__', cfg.prelearner_class)!r}). RLlib's "
            "OfflinePreLearner cannot decode graph episodes; leave prelearner_class unset"
        )
    if on_error not in ("raise", "skip"):
        problems.append(f"on_error must be 'raise' or 'skip' (found {on_error!r})")
    input_kind = scan.kind if scan is not None else None
    if input_kind == "transitions" and cfg.input_read_episodes:
        problems.append(
            "offline_data(input_read_episodes=...) must be False for converted transition rows (found True)"
        )
    if input_kind == "episodes" and not cfg.input_read_episodes:
        problems.append("offline_data(input_read_episodes=...) must be True for episode files (found False)")
    if input_kind == "transitions" and not kind and float(getattr(cfg, "beta", 0.0) or 0.0) > 0.0:
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
        logger.warning(
            "configure: skipped %d unusable input file(s): %s",
            sum(scan.rejected.values()),
            dict(scan.rejected),
        )
        cfg.offline_data(input_=scan.files)
    elif scan is not None and any(is_uri(str(f)) for f in scan.files):
        # RLlib's OfflineData takes a string input_ through Path(), which turns s3://b into
        # s3:/b; a list of file URIs reaches ray.data.read_parquet as given.
        cfg.offline_data(input_=scan.files)
    first = str(scan.files[0]) if scan is not None and scan.files else ""
    if cfg.input_filesystem is None and first.startswith("s3://"):
        # Ray Data would make its own S3 file system (pyarrow's default retries): ours
        # carries the retry policy of offline_graph.data.store.storage into the read tasks.
        cfg.offline_data(input_filesystem=storage_filesystem(first))
    # Absolute local paths: a Tune trial runs in its own working directory.
    cfg.offline_data(input_=_absolute_inputs(cfg.input_))
    ope = offline_evaluation_settings(cfg, offline_evaluation)
    reading = (on_error, holdout, holdout_seed)
    settings = GraphSettings(
        offline_evaluation=ope,
        on_error=on_error,
        seed=int(seed if seed is not None else (cfg.seed if cfg.seed is not None else 0)),
        stats_name=f"offline_graph_stats_{uuid.uuid4().hex[:12]}",
        files_rejected=dict(scan.rejected) if scan is not None else {},
        file_errors=dict(scan.examples) if scan is not None else {},
        holdout=float(holdout),
        holdout_seed=int(holdout_seed),
        **(
            value_settings(cfg, kind, scan, value_run_length, reward_scaling, reading, advantage_norm)
            or sequence_settings(cfg)
        ),
    )
    iter_kwargs = dict(cfg.iter_batches_kwargs)
    iter_kwargs["collate_fn"] = GraphCollateFn()
    # Every learner batch holds exactly train_batch_size_per_learner transitions.
    iter_kwargs.setdefault("drop_last", True)
    runner_cpus = remote_runner_cpus(cfg)[0]
    cpus, nodes = cluster_size()
    plan = plan_resources(cpus, cfg.num_learners, cfg.num_gpus_per_learner > 0, runner_cpus, nodes)
    logger.info(plan.line())
    map_kwargs = apply_plan(cfg, plan)  # the user's own values win
    if plan.small:
        share_small_machine(cfg, SMALL_SHARE)
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
    if kind:
        set_value_model_options(cfg, kind, set_model_option)
    else:
        _set_value_head(cfg)
        set_graph_learner(cfg)
    cfg.learner_config_dict[SETTINGS_KEY] = settings.as_dict()
    cfg.algo_class = algo_class
    return config


def _absolute_inputs(input_: Any) -> Any:
    """``input_`` with each local path made absolute (URIs kept): Tune runs each trial in its
    own working directory, where a relative ``sample_data/expert`` names nothing."""
    if isinstance(input_, (str, os.PathLike)):
        return str(input_) if "://" in str(input_) else os.path.abspath(input_)  # file:// too
    if isinstance(input_, (list, tuple)):
        return [_absolute_inputs(p) for p in input_]
    return input_


def _is_ppo(algo_class: Any) -> bool:
    from ray.rllib.algorithms.ppo import PPO

    return isinstance(algo_class, type) and issubclass(algo_class, PPO)


def _policy_spaces_from_modules(cfg: Any) -> None:
    """Multi-agent data without an env or config spaces: RLlib's multi-agent set-up takes each
    policy's spaces from its ``PolicySpec`` and refuses a config without spaces; fill both from
    the modules' ``RLModuleSpec``s (where the user gave them; checked after)."""
    subs = _sub_specs(cfg)
    if subs is None or cfg.observation_space is not None:
        return
    from ray.rllib.policy.policy import PolicySpec

    policies = {}
    for pid, pspec in cfg.policies.items():
        sub = subs.get(pid)
        if sub is not None and isinstance(pspec, PolicySpec):
            pspec = PolicySpec(
                pspec.policy_class,
                pspec.observation_space or sub.observation_space,
                pspec.action_space or sub.action_space,
                pspec.config,
            )
        policies[pid] = pspec
    cfg.multi_agent(policies=policies)
    if cfg.env or any(sub.observation_space is None or sub.action_space is None for sub in subs.values()):
        return  # an env has its own spaces; module_spaces() names a module that lacks them
    # RLlib refuses a config without spaces (and without an env); ours reads each module's
    # spaces from its spec, so the config's are the modules' (keyed by module id).
    cfg.environment(
        observation_space=gym.spaces.Dict({m: sub.observation_space for m, sub in subs.items()}),
        action_space=gym.spaces.Dict({m: sub.action_space for m, sub in subs.items()}),
    )


def _resolve_spaces(cfg: Any, scan: FileScan | None) -> None:
    """Spaces the config lacks come from the input (``offline_graph.env.data_spaces``: the file
    metadata, else inferred from the data, with a warning); given ones must agree with the
    spaces the metadata records."""
    from offline_graph.env.data_spaces import resolve_spaces

    given = (cfg.observation_space, cfg.action_space)
    resolved = resolve_spaces(
        cfg.input_,
        scan=scan,
        observation_space=given[0],
        action_space=given[1],
        who="configure",
        explicit_labels={"observation": "config.observation_space", "action": "config.action_space"},
        pin="code",
    )
    if given[0] is None or given[1] is None:
        logger.info("configure: spaces %s", resolved.describe())
        cfg.environment(observation_space=resolved.observation_space, action_space=resolved.action_space)
    spec_from_spaces(cfg.observation_space, cfg.action_space)


def _set_value_head(cfg: Any) -> None:
    """MARWIL (beta > 0) needs the module's value head; BC must not build one (DDP).

    RLlib 2.60 does not pass ``beta`` into ``model_config``, so it is written here unless the
    user set ``value_head`` explicitly.
    """
    needs = float(getattr(cfg, "beta", 0.0) or 0.0) > 0.0
    subs = _sub_specs(cfg)
    if cfg.is_multi_agent and subs is not None:
        for sub in subs.values():  # each module's own model_config
            sub.model_config = _as_dict(sub.model_config)
            sub.model_config.setdefault("value_head", needs)
        return
    set_model_option(cfg, "value_head", needs, keep_user=True)


def _sub_specs(cfg: Any) -> dict[str, Any] | None:
    """The per-module ``RLModuleSpec``s of a ``MultiRLModuleSpec`` the user gave, else None."""
    subs = getattr(getattr(cfg, "_rl_module_spec", None), "rl_module_specs", None)
    return subs if isinstance(subs, dict) else None


def _as_dict(model_config: Any) -> dict:
    """A ``model_config`` (dict, RLlib's DefaultModelConfig dataclass or None) as a new dict."""
    if dataclasses.is_dataclass(model_config) and not isinstance(model_config, type):
        return dataclasses.asdict(model_config)
    return dict(model_config or {})


def _model_configs(cfg: Any) -> list[dict]:
    """Every module's ``model_config`` dict (the spec's, else the config's)."""
    subs = _sub_specs(cfg)
    specs = list(subs.values()) if subs is not None else [getattr(cfg, "_rl_module_spec", None)]
    out = []
    for sub in specs:
        mc = getattr(sub, "model_config", None)
        out.append(_as_dict(mc) if mc is not None else _as_dict(getattr(cfg, "_model_config", None)))
    return out


def sequence_settings(cfg: Any) -> dict[str, int]:
    """``seq_length`` / ``seq_context`` of :class:`GraphSettings` from the module's
    ``frame_stack`` / ``memory`` / ``max_seq_len`` (RLlib's key, default 20) / ``burn_in``
    (default ``max_seq_len``); zeros for memoryless modules."""
    configs = [mc for mc in _model_configs(cfg) if int(mc.get("frame_stack") or 1) > 1 or mc.get("memory")]
    if not configs:
        return {}
    if cfg.is_multi_agent:
        raise ConfigError(
            "configure: model_config 'frame_stack' / 'memory' must be unset in multi-agent configs "
            "(found them set). Memory modules train from single-agent data for now."
        )
    mc = configs[0]
    length = int(mc.get("max_seq_len") or 20)
    if length < 1:
        raise ConfigError(f"configure: model_config 'max_seq_len' must be >= 1 (found {length}).")
    k = int(mc.get("frame_stack") or 1)
    context = k - 1 if k > 1 else int(mc.get("burn_in", length))
    return {"seq_length": length, "seq_context": max(0, context)}


def data_report(config: Any) -> dict[str, Any]:
    """Episodes/transitions read = used + rejected (per reason), over all prelearner actors.

    Call on the driver after training (Ray must still be running). Includes input files
    rejected before reading (skip mode).
    """
    from offline_graph.rllib.offline import accounting

    settings = read_settings(config, where="data_report")
    out = accounting.collect(settings.stats_name).as_dict()
    out["files_rejected_by_reason"] = dict(settings.files_rejected)
    out["first_file_error_by_reason"] = dict(settings.file_errors)
    if settings.reward_scale:
        out["reward_scale"] = dict(settings.reward_scale)
    return out


def data_report_or_error(config: Any) -> dict[str, Any]:
    """:func:`data_report`, or ``{"error": "<type>: <message>"}`` where it fails: the
    accounting a run's summary shows is informative only."""
    try:
        return data_report(config)
    except Exception as err:  # noqa: BLE001 (the accounting is informative only)
        return {"error": f"{type(err).__name__}: {err}"}
