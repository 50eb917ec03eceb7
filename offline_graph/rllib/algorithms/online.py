"""``offline_graph.configure_online(config)``: PPO on a graph env through RLlib's own path.

Given an RLlib ``PPOConfig`` with an env whose observation space is a ``spaces.Graph``
(``offline_graph/Graph-v0``, an env class, a Tune-registered name), it sets:

===============================  ===========================================================
setting                          value and why
===============================  ===========================================================
spaces, ``env_runner_cls``,      as for evaluation during offline training
``num_cpus_per_env_runner``      (:func:`offline_graph.rllib.env.env_setup.configure_env`): the
                                 env's spaces, ``GraphEnvRunner`` (RLlib's runner cannot step
                                 a Graph env), 0.25 CPU per EnvRunner when left at 1
``rl_module_spec``               ``GNNModule`` when the spec names no module class (PPO's
                                 default module cannot read graphs)
``model_config["value_head"]``   True: GAE and PPO's value loss call ``compute_values``
``learner_class``                :class:`~offline_graph.rllib.algorithms.ppo_learner.GraphPPOTorchLearner`
                                 (graph-aware learner connector and minibatches); a user
                                 class must derive from it
===============================  ===========================================================

Fine-tuning: :func:`load_module_weights` copies a trained module's weights (a BC
checkpoint: ``restore_module(DIR)``) into the built algorithm's learners and EnvRunners; a
BC module has no value head, which then starts from its initial weights.
"""

from __future__ import annotations

from typing import Any, TypeVar

from offline_graph.data.errors import ConfigError
from offline_graph.rllib.core.model_options import set_model_option
from offline_graph.rllib.env.env_setup import configure_env

C = TypeVar("C")


def configure_online(config: C) -> C:
    """Set what PPO needs to train ``GNNModule`` on a graph env (see the module docstring);
    returns the same config."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.rllib.core.gnn_module import GNNModule
    from offline_graph.rllib.algorithms.ppo_learner import GraphPPOTorchLearner

    cfg: Any = config
    if not isinstance(cfg, PPOConfig) or type(cfg).__name__ == "APPOConfig":
        raise ConfigError(
            f"configure_online: config must be a ray.rllib PPOConfig (found {type(cfg).__name__}). "
            "offline_graph.configure(config) takes BC, MARWIL, IQL, CQL and PPO configs and "
            "dispatches; APPO is not supported yet."
        )
    if not cfg.env:
        raise ConfigError(
            "configure_online: config.env must be set (found None). Set "
            "config.environment('offline_graph/Graph-v0') or an env with a spaces.Graph "
            "observation space."
        )
    configure_env(cfg)
    spec = cfg._rl_module_spec
    if spec is None:
        cfg.rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule))
    elif getattr(spec, "module_class", None) is None:
        spec.module_class = GNNModule
    set_model_option(cfg, "value_head", True, keep_user=False)  # PPO's GAE reads the value head
    current = cfg._learner_class
    if current is None:
        cfg.learners(learner_class=GraphPPOTorchLearner)
    elif not (isinstance(current, type) and issubclass(current, GraphPPOTorchLearner)):
        raise ConfigError(
            "configure_online: config.learners(learner_class=...) must be offline_graph's "
            f"GraphPPOTorchLearner or a subclass (found {getattr(current, '__name__', current)}). "
            "RLlib's learner batches and minibatches graph observations as if they were rows."
        )
    return config


def load_module_weights(algo: Any, module: Any, strict_heads: bool = False) -> list[str]:
    """Copy ``module``'s weights (e.g. ``restore_module(BC_CHECKPOINT)``) into ``algo``'s
    default module on the learners and the EnvRunners. Parameters only ``algo``'s module has
    (PPO's value head after BC) keep their initial values; returns their names.
    ``strict_heads=True`` raises instead."""
    from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_RL_MODULE
    from ray.rllib.policy.sample_batch import DEFAULT_POLICY_ID

    target = algo.learner_group.get_state(
        components=f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}/{DEFAULT_POLICY_ID}"
    )[COMPONENT_LEARNER][COMPONENT_RL_MODULE][DEFAULT_POLICY_ID]
    source = {k: v.detach().cpu().numpy() for k, v in module.state_dict().items()}
    missing = sorted(set(target) - set(source))
    unexpected = sorted(set(source) - set(target))
    if unexpected or (missing and strict_heads):
        raise ConfigError(
            "load_module_weights: the module's parameters must match the algorithm's module "
            f"(found only in the module: {unexpected}; only in the algorithm's: {missing}). "
            "Build the algorithm with the same model_config (hidden, layers, conv, pool)."
        )
    for key, value in source.items():
        if tuple(target[key].shape) != tuple(value.shape):
            raise ConfigError(
                f"load_module_weights: parameter {key!r} must have shape {tuple(target[key].shape)} "
                f"(found {tuple(value.shape)}). Build the algorithm with the same model_config."
            )
        target[key] = value
    algo.learner_group.set_state({COMPONENT_LEARNER: {COMPONENT_RL_MODULE: {DEFAULT_POLICY_ID: target}}})
    algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group, inference_only=True)
    return missing
