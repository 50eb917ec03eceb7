"""``estimate_value``: the expected return of a module's policy from logged episodes, without
a simulator (off-policy evaluation).

Methods (the estimator maths is :mod:`offline_graph.data.analysis.ope`):

- ``"wis"``: per-episode weighted importance sampling;
- ``"pdis"``: per-decision weighted importance sampling (running product of the ratios);
- ``"fqe"``: fitted Q evaluation (:mod:`offline_graph.rllib.ope.fqe`), the mean of
  ``V(s_0) = E_{a ~ pi} Q(s_0, a)`` over the episodes' first observations;
- ``"dr"``: weighted per-decision doubly robust with the FQE model.

The target policy ``pi`` is the module's inference distribution (``explore=True``) or its
greedy action (``explore=False``), read at the logged actions
(:mod:`offline_graph.rllib.ope.ope_policy`). The behaviour probabilities ``mu`` come from the
logged ``action_logp`` (``behaviour="logged"``, RLlib EnvRunner episodes) or, when the logs
carry none, from a policy cloned from the logged actions (``behaviour="bc"``).

``gamma`` (default :data:`DEFAULT_GAMMA`) discounts; ``gamma=1.0`` estimates the undiscounted
episode return. ``bootstrap_truncated`` (default: True when ``gamma < 1``, else False): FQE and
DR value a truncated episode's final observation with the model (RLlib's convention for
time limits that are not part of the task); False ends the return at the truncation, as the
logged episodes (and an env run with the same time limit) do. The IS estimators always sum
the logged rewards.

Multi-agent episode files: ``module_id=`` evaluates one module (the module itself, or a
MultiRLModule holding it): every agent mapped to it (``policy_mapping_fn(agent_id, episode)``
as in RLlib's config, else the module id recorded with the agent, else ``default_policy``)
is one logged episode of its own steps and rewards; the other agents stay as they were
logged (the value is the module's per-agent return with the others acting as logged).

The interval is a bootstrap over episodes (95%): ``n_boot`` resamples for the IS family and DR;
for FQE ``fqe_heads`` bootstrap Q heads fitted on Poisson-weighted episodes
(:mod:`offline_graph.rllib.ope.fqe`), the interval ``value -+ 1.96 sd`` of their values, so it
includes the fitting error (``fqe_heads=0``: resamples of one fitted model's ``V(s_0)``);
DR's resample interval is widened by the spread of the DR values made with each head's model
(:func:`offline_graph.data.analysis.ope.widen_interval`), so it includes the Q model's error too.
Where the logs carry the behaviour's ``action_logp``, FQE's interval is widened to hold that DR
interval as well: the gap between the two estimates is the importance-sampling estimate of
the Q model's bias, which the heads (sharing one encoder) do not see; a warning says when the
FQE value lies outside it.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import replace
from functools import partial
from typing import Any, Literal

import numpy as np

from offline_graph.data.analysis import ope
from offline_graph.data.errors import ConfigError
from offline_graph.data.episodes.logged import Logged, incomplete_warning, load_agents, load_logged
from offline_graph.data.episodes.reader import spec_from_spaces
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.rllib.ope.fqe import FQESettings
from offline_graph.rllib.ope.fqe_model import fitted_model
from offline_graph.rllib.offline.multi_agent import agent_module
from offline_graph.rllib.ope.ope_checks import by_step_warnings, check_settings
from offline_graph.rllib.ope.ope_policy import check_module, fit_behaviour, target_choices

DEFAULT_GAMMA = 0.99
"""``gamma`` when none is given (RLlib's default discount)."""
Method = Literal["wis", "pdis", "fqe", "dr"]
Behaviour = Literal["auto", "logged", "bc"]


def estimate_value(
    module: Any,
    data: Any,
    *,
    method: Method,
    gamma: float | None = None,
    explore: bool = False,
    n_boot: int = 200,
    clip: float | None = None,
    seed: int = 0,
    behaviour: Behaviour = "auto",
    bootstrap_truncated: bool | None = None,
    epochs: int | None = None,
    horizon: int | None = None,
    batch_size: int = 128,
    lr: float = 1e-3,
    tau: float | None = None,
    q_model: dict | None = None,
    bc_epochs: int = 5,
    torch_threads: int | None = 1,
    fqe_heads: int = 10,
    fqe_steps: int | None = None,
    fqe_by_step: bool = False,
    module_id: str | None = None,
    policy_mapping_fn: Any = None,
) -> dict[str, Any]:
    """The estimated expected return of ``module``'s policy from the episodes of ``data``.

    ``module``: an RLModule (module doc); ``data``: episode files / directories (local or
    URIs), converted transition rows (files or a ``pyarrow.Table``) or ``Transitions``, whole
    single-agent episodes. ``clip``: cap of each importance ratio (IS and DR). ``behaviour``:
    "auto" (logged ``action_logp`` where every episode has it, else BC), "logged" or "bc".
    FQE settings: ``horizon`` (the most steps an episode can last, e.g. the env's time limit:
    exactly that many FQE iterations; default: the longest truncated logged episode when
    some were truncated, else iterate until the estimate settles), ``epochs`` (N: N passes
    instead, one iteration each; :mod:`offline_graph.rllib.ope.fqe`), ``batch_size``, ``lr``,
    ``tau`` (None: target copied every iteration),
    ``q_model`` (the Q network's GNN keys), ``fqe_heads`` (bootstrap Q heads for the FQE
    interval, :mod:`offline_graph.rllib.ope.fqe`; 0: resample the fitted ``V(s_0)`` only),
    ``fqe_steps`` (gradient steps per iteration without ``epochs``; None: automatic),
    ``fqe_by_step`` (one Q per step ``t`` < horizon, which needs a horizon: for a task whose
    value depends on a step count the observation does not show, e.g. a time limit the logs
    reach; :mod:`offline_graph.rllib.ope.fqe`; DR, and FQE's DR check, stay on the one model,
    fitted too);
    ``bc_epochs`` for the cloned behaviour policy.
    ``torch_threads`` (1): torch's intra-op threads meanwhile (restored after; None leaves
    them): the graph batches are small, and more threads made the scatter ops slower.
    ``module_id`` / ``policy_mapping_fn``: one module of multi-agent episode files (module doc).

    ``n_boot``: 0 gives no interval (NaN bounds).

    Returns ``{"value", "ci_low", "ci_high", "method", "gamma", "episodes", "transitions",
    "episodes_left_out", "ess", "behaviour", "clipped", "warnings", "seconds", ...}``
    (``episodes_left_out``: episodes not whole in the data, without their end or first step,
    e.g. the chunk RLlib writes of an episode unfinished when recording stopped; a warning
    names one; ``ess`` / ``behaviour`` /
    ``clipped`` None for FQE; FQE and DR add ``fqe_loss``, the last iteration's TD loss,
    ``fqe_iterations`` and ``fqe_horizon``, the horizon used or None).
    """
    import torch

    threads = torch.get_num_threads()
    if torch_threads is not None:
        torch.set_num_threads(int(torch_threads))
    try:
        if module_id is not None:
            module, data = _module_data(module, data, str(module_id), policy_mapping_fn)
        return _estimate(
            module, data, method, gamma, explore, n_boot, clip, seed, behaviour, bootstrap_truncated,
            FQESettings(epochs, batch_size, lr, tau, q_model, fqe_heads, horizon, fqe_steps, fqe_by_step),
            bc_epochs,
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)


def module_route(spec: Any, mapping: Any) -> Any:
    """A ``read_agent_episodes`` route sending each agent, with ``spec``, to the module the
    multi-agent prelearner would (:func:`offline_graph.rllib.offline.multi_agent.agent_module`;
    ``mapping``: RLlib's ``policy_mapping_fn`` or None)."""

    def route(agent_id: Any, recorded: str | None, episode_id: str) -> tuple[str, Any]:
        return str(agent_module(mapping, agent_id, recorded, episode_id)), spec

    return route


def _module_data(module: Any, data: Any, module_id: str, mapping: Any) -> tuple[Any, Any]:
    """``(the module, its agents' logged episodes)`` for ``module_id`` (module doc)."""
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule

    if isinstance(module, MultiRLModule):
        if module_id not in module:
            raise ConfigError(
                f"estimate_value: module_id must be one of the MultiRLModule's modules "
                f"{sorted(module.keys())} (found {module_id!r})."
            )
        module = module[module_id]
    if isinstance(data, Logged):
        return module, data
    check_module(module, "estimate_value")
    spec = spec_from_spaces(module.observation_space, module.action_space)
    return module, load_agents(data, module_route(spec, mapping), module_id)


def _estimate(
    module: Any,
    data: Any,
    method: Method,
    gamma: float | None,
    explore: bool,
    n_boot: int,
    clip: float | None,
    seed: int,
    behaviour: Behaviour,
    bootstrap_truncated: bool | None,
    settings: FQESettings,
    bc_epochs: int,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    if method not in ope.METHODS:
        raise ConfigError(
            f"estimate_value: method must be one of {ope.METHODS} (found {method!r}). wis / pdis "
            "weight the logged returns, fqe fits a Q model, dr combines both."
        )
    if behaviour not in ("auto", "logged", "bc"):
        raise ConfigError(
            f"estimate_value: behaviour must be 'auto', 'logged' or 'bc' (found {behaviour!r})."
        )
    check_settings(n_boot, settings, bc_epochs)
    gamma = DEFAULT_GAMMA if gamma is None else float(gamma)
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(
            f"estimate_value: gamma must be in [0, 1] (found {gamma!r}). 1.0 estimates the "
            "undiscounted episode return."
        )
    check_module(module, "estimate_value")
    spec = spec_from_spaces(module.observation_space, module.action_space)
    logged = load_logged(data, spec, observation_space=module.observation_space)
    trans, ptr = logged.trans, logged.ptr
    bootstrap = gamma < 1.0 if bootstrap_truncated is None else bool(bootstrap_truncated)
    out: dict[str, Any] = {
        "method": method,
        "gamma": gamma,
        "explore": bool(explore),
        "bootstrap_truncated": bootstrap if method in ("fqe", "dr") else None,
        "episodes": logged.episodes,
        "transitions": len(trans),
        "episodes_left_out": logged.left_out,
        "ess": None,
        "behaviour": None,
        "clipped": None,
        "warnings": incomplete_warning(logged),
    }
    graphs = trans.obs
    model = None
    heads: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    fqe_estimate: dict[str, float] = {}
    if method in ("fqe", "dr"):
        if trans.final_obs is None:
            raise ConfigError(
                f"estimate_value: data for method {method!r} must hold each episode's final "
                "observation (found converted rows without final_* columns). Evaluate on the "
                "episode files, or convert them again (offline-graph convert writes final_*)."
            )
        graphs = GraphColumns.concat([trans.obs, trans.final_obs])
    pi = target_choices(module, graphs, explore)
    # FQE checked by DR where the logs carry the behaviour's probabilities (no clone for it)
    checked = method == "fqe" and _logged_logp(logged, behaviour) is not None
    if method in ("fqe", "dr"):
        if settings.horizon is None and settings.epochs is None and not bootstrap and trans.truncateds.any():
            # a time limit, seen in the data: the longest truncated episode
            lengths = np.diff(ptr)[trans.truncateds[ptr[1:] - 1]]
            settings = replace(settings, horizon=int(lengths.max()))
        ends = trans.terminateds | (trans.truncateds & (not bootstrap))
        if not bootstrap and settings.horizon is not None and settings.epochs is None:
            # H iterations end the return at the horizon already: an episode truncated there (the
            # time limit, which the observations need not show) must not also end the backup of
            # the states that look like its last one
            at_limit = np.repeat(np.diff(ptr) >= settings.horizon, np.diff(ptr))
            ends = ends & ~(trans.truncateds & at_limit)
        out["fqe_horizon"] = settings.horizon
        out["warnings"] += by_step_warnings(settings, ptr)
        ended = trans.truncateds[ptr[1:] - 1] & bootstrap  # final observations bootstrapped
        fit = partial(
            fitted_model, graphs, ptr, trans.actions, trans.rewards, ends, ended, pi, gamma,
            module.observation_space, module.action_space, seed=seed, n_boot=n_boot,
        )  # fmt: skip
        first = fit(settings)
        out["fqe_loss"], out["fqe_iterations"] = first.loss, first.iterations
        out["warnings"] += first.warnings
        fqe_estimate, model, heads = first.estimate, first.model, first.heads
        if settings.by_step and (method == "dr" or checked):  # DR (and FQE's check) on the one model
            one = fit(replace(settings, by_step=False))
            model, heads = one.model, one.heads
            out["warnings"] += one.warnings
    if method != "fqe" or checked:
        mu, used = _behaviour(logged, behaviour, module, bc_epochs, settings, seed)
        ratios, clipped = ope.step_ratios(pi.at(trans.actions), mu, clip)
        res = ope.is_estimate(
            "dr" if checked else method, trans.rewards, ratios, ptr, gamma, n_boot=n_boot, seed=seed,
            model=model,
        )  # fmt: skip
        if model is not None and len(heads):  # the Q model's error too: DR with each bootstrap head
            per_head = np.array([ope.dr(trans.rewards, ratios, ptr, gamma, *h) for h in heads])
            res["ci_low"], res["ci_high"] = ope.widen_interval(
                res["value"], res["ci_low"], res["ci_high"], per_head
            )
        if model is not None:
            out["warnings"] += _hold_dr(fqe_estimate, res, warn=checked)
        if method != "fqe":
            out["behaviour"], out["clipped"] = used, clipped
            if used == "bc":
                out["warnings"].append(_bc_warning(logged, behaviour))
            out.update(res)
            out["warnings"] += ope.ess_warnings(res["ess"], logged.episodes)
    if method == "fqe":
        out.update(fqe_estimate)
    elif method == "dr":
        out["fqe"] = fqe_estimate
    out["seconds"] = time.perf_counter() - t0
    return out


def check_options(options: dict, where: str) -> None:
    """ConfigError unless ``options`` are ``estimate_value`` keywords (but module, data,
    method and gamma) with values in range: what ``configure(offline_evaluation=...)`` passes
    on, checked when the config is made rather than at the first evaluation."""
    params = inspect.signature(estimate_value).parameters
    allowed = set(params) - {"module", "data", "method", "gamma"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: offline_evaluation keys must be estimate_value keywords (found {unknown}; "
            f"they are {sorted(allowed)})."
        )
    k = {name: p.default for name, p in params.items() if name in allowed} | dict(options)
    fqe = FQESettings(
        epochs=k["epochs"], batch_size=k["batch_size"], lr=k["lr"], tau=k["tau"],
        boot_heads=k["fqe_heads"], horizon=k["horizon"], steps=k["fqe_steps"], by_step=k["fqe_by_step"],
    )  # fmt: skip
    check_settings(k["n_boot"], fqe, k["bc_epochs"], where)


def _hold_dr(fqe: dict[str, float], dr: dict[str, float], warn: bool) -> list[str]:
    """Widen ``fqe``'s interval to hold ``dr``'s (their gap is the IS estimate of the Q model's
    bias, which the bootstrap heads do not see); with ``warn``, say so when FQE lies outside."""
    lo, hi = dr["ci_low"], dr["ci_high"]
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return []
    fqe["ci_low"], fqe["ci_high"] = min(fqe["ci_low"], lo), max(fqe["ci_high"], hi)
    if warn and not lo <= fqe["value"] <= hi:
        return [
            f"fqe: the estimate {fqe['value']:.4g} lies outside the doubly robust interval "
            f"[{lo:.4g}, {hi:.4g}] from the logged action_logp: the Q model is biased on these "
            "logs (the interval is widened to hold the DR one). Prefer method='dr' here."
        ]
    return []


def _bc_warning(logged: Logged, behaviour: Behaviour) -> str:
    """Why the behaviour was cloned (``behaviour="bc"``)."""
    clone = (
        "behaviour probabilities come from a policy cloned from the logged actions (bc); IS / DR "
        "are only as good as that clone."
    )
    if behaviour == "bc":
        return "behaviour='bc': " + clone
    if logged.without_logp:
        return (
            f"action_logp missing in {logged.without_logp} of {logged.episodes} logged episodes "
            f"(it is used only when every episode has it): {clone} Pass behaviour='logged' to "
            "make a missing one an error."
        )
    return "no logged action_logp: " + clone


def _logged_logp(logged: Logged, behaviour: Behaviour) -> np.ndarray | None:
    """The logged ``action_logp`` per step when ``mu`` comes from it (every episode has it, and
    ``behaviour`` is not "bc"), else None."""
    return None if behaviour == "bc" else logged.behaviour_logp


def _behaviour(
    logged: Logged,
    behaviour: Behaviour,
    module: Any,
    epochs: int,
    settings: FQESettings,
    seed: int,
) -> tuple[np.ndarray, str]:
    """``(mu(a | s) per step, "logged" | "bc")``."""
    logp = _logged_logp(logged, behaviour)
    if logp is not None:
        return np.exp(logp), "logged"
    if behaviour == "logged":
        raise ConfigError(
            "estimate_value: with behaviour='logged' every episode's extra_model_outputs must "
            f"hold action_logp (found {logged.without_logp or logged.episodes} of "
            f"{logged.episodes} episodes without it). Use behaviour='auto' or 'bc'."
        )
    mu = fit_behaviour(
        logged.trans.obs,
        logged.trans.actions,
        module.observation_space,
        module.action_space,
        model=settings.model,
        epochs=epochs,
        batch_size=settings.batch_size,
        lr=settings.lr,
        seed=seed,
    )
    return mu, "bc"
