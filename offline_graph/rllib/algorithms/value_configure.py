"""What ``offline_graph.configure`` sets for value-based configs (``IQLConfig`` / ``CQLConfig``):

- the module's ``model_config``: ``value_based`` ("iql" / "cql"), ``twin_q`` (IQL's
  ``config.twin_q``) and ``value_head=False`` (MARWIL's head; IQL has its own V network);
- the data path: value runs of ``value_run_length`` consecutive steps, each shipped with the
  graph after it (:mod:`offline_graph.data.learning.value_runs`); one learner batch is
  ``train_batch_size_per_learner`` runs, i.e. up to ``value_run_length`` times as many
  transitions;
- the reward scale (``configure(reward_scaling=...)``, ``"return_range"`` by default): one
  factor measured from the training episodes before training
  (:mod:`offline_graph.data.learning.reward_scale`), applied by the prelearner to every trained reward;
- IQL's actor advantage normalisation (``configure(advantage_norm=...)``, ``"shrink_std"`` by
  default: :func:`offline_graph.rllib.algorithms.value_learner.advantage_weights`);
- ``lr=None`` for CQL (RLlib's SAC validate demands it; the Q network uses ``critic_lr``);
- refusals, as ConfigErrors that say what works instead: multi-agent configs, memory modules,
  converted rows without final observations.
"""

from __future__ import annotations

from typing import Any

from offline_graph.data.errors import ConfigError
from offline_graph.data.store.files import FileScan
from offline_graph.data.learning.reward_scale import check_method, fit_scale, training_rewards
from offline_graph.rllib.algorithms.value_algorithms import GraphCQL, GraphIQL
from offline_graph.rllib.algorithms.value_learner import ADVANTAGE_NORMS

DEFAULT_RUN_LENGTH = 4
"""Steps per value run: ``(L + 1) / L`` graphs per trained transition (1.25 at 4)."""


def value_kind(algo_class: type) -> str | None:
    """ "iql" / "cql" for the value-based graph algorithms, else None."""
    if issubclass(algo_class, GraphIQL):
        return "iql"
    return "cql" if issubclass(algo_class, GraphCQL) else None


DEFAULT_REWARD_SCALING = "return_range"
"""IQL's and CQL's reward scaling when ``configure(reward_scaling=None)``."""


def check_advantage_norm(kind: str | None, norm: str | None, where: str) -> dict[str, Any]:
    """``{"advantage_norm": ...}`` for IQL (None: the default), ``{}`` for the others, or a
    ConfigError for a name not in ``ADVANTAGE_NORMS`` or a normalisation asked of another config."""
    if kind == "iql":
        norm = ADVANTAGE_NORMS[0] if norm is None else norm
        if norm not in ADVANTAGE_NORMS:
            raise ConfigError(
                f"{where}: advantage_norm must be one of {', '.join(map(repr, ADVANTAGE_NORMS))} "
                f"(found {norm!r}). 'shrink_std' divides IQL's advantages by their batch std "
                "where it is above 1, 'batch_std' always; 'none' uses them as they are (the paper's)."
            )
        return {"advantage_norm": norm}
    if norm is not None:
        raise ConfigError(
            f"{where}: advantage_norm must be None for this algorithm (found {norm!r}). It is "
            "IQL's actor option (IQLConfig); CQL acts greedily on Q, MARWIL normalises its own."
        )
    return {}


def no_reward_scaling(cfg: Any, reward_scaling: str | None) -> dict[str, Any]:
    """``{}``, or a ConfigError where ``reward_scaling`` asks a non-value-based config to scale."""
    if reward_scaling not in (None, "none"):
        name = type(cfg).__name__
        raise ConfigError(
            f"configure ({name}): reward_scaling must be None or 'none' for {name} (found "
            f"{reward_scaling!r}). Reward scaling is for IQLConfig / CQLConfig, whose critics "
            "learn values in the reward's units; BC ignores rewards and MARWIL's advantage "
            "is already normalised by its running average."
        )
    return {}


def measure_reward_scale(
    scan: FileScan | None, method: str, reading: tuple[str, float, int], where: str
) -> dict[str, Any]:
    """The reward scale of ``method`` measured over the training episodes of ``scan``
    (``reading`` = on_error, holdout, holdout_seed, as the prelearner reads them)."""
    if method == "none":
        return {"method": "none", "scale": 1.0}
    if scan is None or not scan.files:
        raise ConfigError(
            f"{where}: reward_scaling={method!r} must measure the input files (found none "
            "listed). Pass the data with offline_data(input_=...), or reward_scaling='none'."
        )
    on_error, holdout, seed = reading
    returns, rewards = training_rewards(list(scan.files), scan.kind, holdout, seed, on_error)
    return fit_scale(method, returns, rewards).as_dict()


def value_settings(
    cfg: Any,
    kind: str | None,
    scan: FileScan | None,
    run_length: int,
    reward_scaling: str | None = None,
    reading: tuple[str, float, int] = ("raise", 0.0, 0),
    advantage_norm: str | None = None,
) -> dict[str, Any]:
    """The :class:`~offline_graph.rllib.core.settings.GraphSettings` entries of a value-based config
    (checks first: see the module doc); ``{}`` for other configs (``kind`` None), which must not
    ask for reward scaling."""
    if not kind:
        check_advantage_norm(kind, advantage_norm, f"configure ({type(cfg).__name__})")
        return no_reward_scaling(cfg, reward_scaling)
    where = f"configure ({kind.upper()}Config)"
    norm = check_advantage_norm(kind, advantage_norm, where)
    method = check_method(DEFAULT_REWARD_SCALING if reward_scaling is None else reward_scaling, where)
    if cfg.is_multi_agent:
        raise ConfigError(
            f"{where}: config.multi_agent(...) must not be set for {kind.upper()} (found a "
            "multi-agent config). Value-based training is single-agent for now: train each "
            "module from its agents' data, or use BC / MARWIL for multi-agent configs."
        )
    if isinstance(run_length, bool) or not isinstance(run_length, int) or run_length < 1:
        raise ConfigError(f"{where}: value_run_length must be an int >= 1 (found {run_length!r}).")
    meta = scan.metadata if scan is not None else {}
    if scan is not None and scan.kind == "transitions" and not meta.get("final_obs"):
        raise ConfigError(
            f"{where}: converted rows must carry each episode's final observation (found rows "
            "without them: converted by an older offline-graph convert). Value-based updates "
            "bootstrap from it; train from the episode files, or convert them again."
        )
    if kind == "cql":
        cfg._is_online = False  # offline only, as MARWILConfig (SAC's True builds EnvRunners)
        if cfg.lr is not None:
            # CQLConfig's default lr (3e-4) fails its own (SAC's) validate on the new API
            # stack; the Q network learns with critic_lr.
            cfg.training(lr=None)
    scale = measure_reward_scale(scan, method, reading, where)
    return {"value_runs": run_length, "reward_scale": scale, **norm}


def set_value_model_options(cfg: Any, kind: str, set_option: Any) -> None:
    """``value_based``, ``twin_q`` and ``value_head=False`` in the module's model_config
    (``set_option(cfg, key, value, keep_user=...)`` writes where RLlib reads it)."""
    set_option(cfg, "value_based", kind, keep_user=False)
    set_option(cfg, "value_head", False, keep_user=False)
    set_option(cfg, "twin_q", bool(getattr(cfg, "twin_q", True)) if kind == "iql" else False, keep_user=True)
