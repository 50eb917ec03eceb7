"""Off-policy evaluation in RLlib's offline evaluation API:
``config.evaluation(offline_evaluation_interval=k, offline_evaluation_type="fqe" | "wis" |
"pdis" | "dr")`` on a graph config.

:func:`offline_graph.configure` (through :func:`offline_evaluation_settings`) stores the method
in the config's offline_graph settings, sets ``offline_eval_runner_class`` to
:class:`GraphOPERunner` and ``offline_evaluation_type`` to RLlib's ``"eval_loss"`` (the only
value its validation knows besides ``"is"`` / ``"pdis"``; its runner group then builds our
runner). RLlib's own ``"is"`` maps to ``"wis"`` and ``"pdis"`` to our weighted ``"pdis"``;
``"eval_loss"`` stays RLlib's held-out loss. Set after ``configure``, the type is mapped when
the algorithm is built (:func:`late_offline_evaluation`), so either order works.

Every ``k`` training iterations the runner estimates the value of each module's current
policy with :func:`offline_graph.estimate_value` on the held-out episodes
(``configure(holdout=...)``; all input episodes when ``holdout`` is 0, with a warning), gamma
the config's, and reports ``ope_value``, ``ope_ci_low``, ``ope_ci_high``, ``ope_ess``,
``ope_episodes`` (and ``ope_fqe_loss`` for FQE / DR) per module under RLlib's
``evaluation/offline_eval_runners/<module_id>/...`` result keys. ``configure(offline_evaluation=
{...})`` passes other ``estimate_value`` keywords (``epochs``, ``n_boot``, ``clip``, ...).
With ``num_offline_eval_runners`` 0 the runner is local; remote runners each estimate on
all held-out episodes (the streaming split RLlib gives them is not read), once per
iteration: a run reports the whole ``offline_evaluation_duration`` as done under
``__all_modules__/dataset_num_iters_evaluated`` (RLlib's remote loop waits for that count;
without it RLlib 2.60 raised ``KeyError: '__all_modules__'``). Multi-agent configs: each
module on the agents mapped to it (``config.policy_mapping_fn``, else the recorded module),
as :func:`offline_graph.estimate_value`'s ``module_id``.
"""

from __future__ import annotations

import logging
from typing import Any

from ray.rllib.core import ALL_MODULES
from ray.rllib.offline.offline_evaluation_runner import OfflineEvaluationRunner
from ray.rllib.utils.metrics import DATASET_NUM_ITERS_EVALUATED

from offline_graph.data.errors import ConfigError
from offline_graph.data.store.files import list_files
from offline_graph.data.episodes.logged import Logged, held_out_episodes, load_agents, load_logged
from offline_graph.data.analysis.ope import METHODS
from offline_graph.data.episodes.reader import spec_from_spaces
from offline_graph.rllib.env.env_setup import offline_runners
from offline_graph.rllib.offline.resources import SMALL_SHARE
from offline_graph.rllib.offline.multi_agent import user_mapping
from offline_graph.rllib.ope.estimate import check_options, estimate_value, module_route
from offline_graph.rllib.core.settings import SETTINGS_KEY, read_settings

logger = logging.getLogger(__name__)

OPE_TYPES = {**{m: m for m in METHODS}, "is": "wis"}
"""``offline_evaluation_type`` -> our method (RLlib's "is" is per-episode: our "wis")."""
REPORTED = ("value", "ci_low", "ci_high", "ess", "clipped", "fqe_loss", "episodes", "transitions")


def offline_evaluation_settings(cfg: Any, options: dict | None) -> dict:
    """The ``offline_evaluation`` settings of ``cfg`` (module doc; without a ``"method"``: none
    of ours yet, the options kept for a type set later), and ``cfg`` set up to run
    :class:`GraphOPERunner` when it asks for one of our types."""
    bad = set(options or {}) & {"method", "gamma", "data", "module", "module_id", "policy_mapping_fn"}
    if bad:
        raise ConfigError(
            f"configure: offline_evaluation must not set {sorted(bad)} (found them). The method "
            "is evaluation(offline_evaluation_type=...), gamma the config's; every module is "
            "evaluated on its agents by the config's policy_mapping_fn."
        )
    check_options(options or {}, "configure")
    previous = dict((cfg.learner_config_dict or {}).get(SETTINGS_KEY, {}).get("offline_evaluation") or {})
    kind = cfg.offline_evaluation_type
    if cfg.offline_evaluation_interval and kind in OPE_TYPES:
        cfg.evaluation(**graph_runner_settings(cfg.evaluation_config))
        return {**_ours(kind, previous), **(options or {})}
    if cfg.offline_eval_runner_class is not GraphOPERunner:
        previous.pop("method", None)  # RLlib's own evaluation now (or none): no method of ours
    return {**previous, **(options or {})}


def graph_runner_settings(overrides: Any) -> dict:
    """The evaluation settings that run one of our types in :class:`GraphOPERunner` (RLlib's
    validate knows only its own types: ``"eval_loss"`` stands for ours), given the config's
    ``evaluation_config`` overrides (:func:`lazy_evaluation_data`)."""
    return {
        "offline_evaluation_type": "eval_loss",
        "offline_eval_runner_class": GraphOPERunner,
        "evaluation_config": lazy_evaluation_data(overrides),
    }


def lazy_evaluation_data(overrides: Any) -> Any:
    """The evaluation config's overrides with ``materialize_mapped_data=False`` (unless the
    user set it): :class:`GraphOPERunner` reads its episodes itself, but RLlib's runner group
    still builds an ``OfflineData`` for it, which with configure's ``materialize_mapped_data=
    True`` mapped the whole input through a prelearner actor at every build (a process that
    imports RLlib, and one more pass over the data) that nothing reads. Left lazy, that
    mapping never runs. An ``AlgorithmConfig`` given as the overrides is left as it is."""
    if overrides is not None and not isinstance(overrides, dict):
        return overrides
    return {"materialize_mapped_data": False, **(overrides or {})}


def _ours(kind: str, stored: dict) -> dict:
    """Our method for ``offline_evaluation_type`` ``kind``, with the other stored options."""
    return {"method": OPE_TYPES[kind], **{k: v for k, v in stored.items() if k != "method"}}


def late_offline_evaluation(config: Any) -> None:
    """Our ``offline_evaluation_type`` set on a config after :func:`offline_graph.configure`
    (an ``AlgorithmConfig`` or its dict, as Tune passes it), mapped as configure maps it
    (module doc), with the ``offline_evaluation`` options configure stored (and, on a machine
    configure found small, remote runners at its CPU share). Run by our
    algorithms before RLlib validates the config, which knows only its own types. A config
    that was never configured is left as it is (its check names configure)."""
    as_dict = isinstance(config, dict)
    get = config.get if as_dict else lambda key: getattr(config, key, None)
    kind = get("offline_evaluation_type")
    stored = (get("learner_config_dict") or {}).get(SETTINGS_KEY)
    if not get("offline_evaluation_interval") or kind not in OPE_TYPES or not isinstance(stored, dict):
        return
    if as_dict:
        stored["offline_evaluation"] = _ours(kind, stored.get("offline_evaluation") or {})
        config.update(graph_runner_settings(config.get("evaluation_config")))
        return
    frozen, config._is_frozen = config._is_frozen, False
    stored["offline_evaluation"] = offline_evaluation_settings(config, None)
    if (config.map_batches_kwargs or {}).get("num_cpus") == SMALL_SHARE:  # configure's small plan
        share_small_machine(config, SMALL_SHARE)
    config._is_frozen = frozen


def share_small_machine(cfg: Any, share: float) -> None:
    """On a small machine (the CPU plan's fractional case) remote offline evaluation runners
    request ``share`` CPU instead of RLlib's 1 (a user's other value is kept): on 2 CPUs the
    runner's whole CPU left none for Ray Data's read tasks and the first ``train()`` waited
    forever. An estimate runs torch on one thread whatever the request."""
    if offline_runners(cfg)[1] and cfg.num_cpus_per_offline_eval_runner == 1:
        cfg.evaluation(num_cpus_per_offline_eval_runner=share)


def evaluation_episodes(
    data: Any,
    observation_space: Any,
    action_space: Any,
    holdout: float,
    holdout_seed: int,
    agents: tuple[Any, str] | None = None,
) -> tuple[Logged, bool]:
    """The episodes of ``data`` (checked against a module's spaces) to estimate a policy's
    value on, and whether they are the training episodes: the ones training holds out
    (``holdout`` > 0, split by episode id and ``holdout_seed`` as the prelearner splits them),
    else all of them (in-sample: True). ``agents = (policy_mapping_fn or None, module_id)``:
    multi-agent episode files, the module's agents (:func:`offline_graph.estimate_value`)."""
    spec = spec_from_spaces(observation_space, action_space)
    if agents is not None:
        route = module_route(spec, agents[0])
        logged = load_agents(data, route, agents[1], "offline evaluation")
    else:
        logged = load_logged(data, spec, "offline evaluation")
    if holdout > 0:
        return held_out_episodes(logged, holdout, holdout_seed), False
    return logged, True


class GraphOPERunner(OfflineEvaluationRunner):
    """RLlib's offline evaluation runner, estimating each module's value (module doc)."""

    _logged: dict[str, Logged] | None = None

    def _data(self, module_id: str, module: Any) -> Logged:
        if self._logged is None:
            self._logged = {}
        if module_id not in self._logged:
            settings = read_settings(self.config, "GraphOPERunner")
            agents = (user_mapping(self.config), module_id) if self.config.is_multi_agent else None
            logged, in_sample = evaluation_episodes(
                list_files(self.config.input_),
                module.observation_space,
                module.action_space,
                settings.holdout,
                settings.holdout_seed,
                agents,
            )
            if in_sample:
                logger.warning(
                    "offline evaluation: no held-out episodes (configure(holdout=0)); estimating "
                    "on the training episodes (%d).",
                    logged.episodes,
                )
            self._logged[module_id] = logged
        return self._logged[module_id]

    def run(self, explore: bool = False, train: bool = True, **kwargs: Any) -> Any:
        options = dict(read_settings(self.config, "GraphOPERunner").offline_evaluation)
        method = options.pop("method")
        for mid in list(self.module.keys()):
            module = self.module[mid].unwrapped()
            res = estimate_value(
                module, self._data(mid, module), method=method, gamma=float(self.config.gamma), **options
            )
            for key in REPORTED:
                if res.get(key) is not None:
                    self.metrics.log_value((mid, f"ope_{key}"), float(res[key]), window=1)
            for warning in res["warnings"]:
                logger.warning("offline evaluation of module %s: %s", mid, warning)
        # One estimate covers all held-out episodes: it counts as the whole duration RLlib's
        # remote-runner loop waits for (which reads this key and loops until it is reached).
        duration = max(1, int(self.config.offline_evaluation_duration or 1))
        self.metrics.log_value((ALL_MODULES, DATASET_NUM_ITERS_EVALUATED), duration, reduce="sum")
        return self.metrics.reduce()
