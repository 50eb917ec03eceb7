"""What :func:`offline_graph.configure` sets when the config has an env (evaluation during
offline training, recording with RLlib's own EnvRunners).

===============================  ===========================================================
setting                          value and why
===============================  ===========================================================
``observation_space`` /          the env's, when not given (one env instance is built, as the
``action_space``                 EnvRunners build theirs); given ones must agree with the
                                 env's (compared by compact text, ``graph:F=16,D=2``)
``env_runner_cls``               :class:`~offline_graph.rllib.env.env_runner.GraphEnvRunner`
                                 (``GraphOfflineEnvRunner`` with ``offline_data(output=...)``;
                                 multi-agent configs: :class:`~offline_graph.rllib.
                                 ma_env_runner.GraphMultiAgentEnvRunner`, spaces untouched):
                                 RLlib's own runner cannot step a ``spaces.Graph`` env. A
                                 user class must derive from it
``num_cpus_per_env_runner``      0.25 when left at RLlib's 1: on a 2-CPU machine one
                                 evaluation EnvRunner at 1 CPU leaves Ray Data's read tasks
                                 no whole CPU (a stall)
``evaluation_config``            ``explore=False`` unless given: evaluation acts greedily,
                                 as :func:`offline_graph.evaluate_module` does
===============================  ===========================================================

The prelearner side: with EnvRunners, RLlib hands the prelearner the EnvRunners' vectorized
spaces (``Tuple(Graph, ...)``); :func:`single_env_spaces` gives it the single env's spaces.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.globals import graph_part
from offline_graph.data.graphs.typed import TypedGraph

RUNNER_CPUS = 0.25
"""``num_cpus_per_env_runner`` configure sets when it is left at RLlib's default (1)."""


def _text(space: Any) -> str:
    from offline_graph.data.graphs.space_text import space_text

    try:
        return space_text(space)
    except ConfigError:
        return repr(space)


def configure_env(cfg: Any) -> None:
    """Set what EnvRunners need for a config with an env (see the module docstring); a
    config without ``env`` is left as it is."""
    if not cfg.env:
        return
    from offline_graph.rllib.env.env_runner import GraphEnvRunner, GraphOfflineEnvRunner, make_single_env

    env = make_single_env(cfg)
    try:
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    if not isinstance(graph_part(obs_space), (gym.spaces.Graph, TypedGraph)):
        raise ConfigError(
            f"configure: env {cfg.env!r} observation space must be a gymnasium.spaces.Graph, an "
            f"offline_graph.TypedGraph or a Dict with one and flat parts (found {obs_space!r}). "
            "Wrap the env so it returns GraphInstance (or typed graph dict) observations."
        )
    given = {"observation": cfg.observation_space, "action": cfg.action_space}
    from_env = {"observation": obs_space, "action": act_space}
    for role, space in given.items():
        if space is not None and _text(space) != _text(from_env[role]):
            raise ConfigError(
                f"configure: config.{role}_space must match env {cfg.env!r}'s {role} space "
                f"{_text(from_env[role])} (found {_text(space)}). Leave it unset to use the env's."
            )
    cfg.environment(
        observation_space=given["observation"] or obs_space,
        action_space=given["action"] or act_space,
    )
    if isinstance(act_space, gym.spaces.Discrete):  # NodeAction / EdgeAction too: an index
        # RLlib's NormalizeAndClipActions leaves an index as it is, at a deepcopy and a call per
        # action (5% of a GraphEnvRunner step); with both off it passes the batch through.
        cfg.environment(normalize_actions=False, clip_actions=False)
    _set_runner(cfg, GraphOfflineEnvRunner if cfg.output else GraphEnvRunner, GraphEnvRunner)


def configure_multi_agent_env(cfg: Any) -> None:
    """:func:`configure_env` for a multi-agent config with an env: ``GraphMultiAgentEnvRunner``
    (its spaces are the env's per-agent spaces, each module keeps its own spec's), the runner
    CPUs and greedy evaluation. Recording multi-agent episodes with RLlib's runners is not
    supported (``offline-graph record`` writes them)."""
    if not cfg.env:
        return
    from offline_graph.rllib.env.ma_env_runner import GraphMultiAgentEnvRunner

    if cfg.output:
        raise ConfigError(
            "configure: offline_data(output=...) must be None for multi-agent configs (found "
            f"{cfg.output!r}). Record multi-agent episodes with offline-graph record."
        )
    _set_runner(cfg, GraphMultiAgentEnvRunner, GraphMultiAgentEnvRunner)


def _set_runner(cfg: Any, want: type, base: type) -> None:
    """``env_runner_cls`` ``want`` (a user class must derive from ``base``), 0.25 CPUs per
    runner when left at RLlib's 1, greedy evaluation unless ``explore`` is given."""
    from ray.rllib.offline.offline_env_runner import OfflineSingleAgentEnvRunner

    current = cfg.env_runner_cls
    if current is None:
        cfg.env_runners(env_runner_cls=want)
    elif not (isinstance(current, type) and issubclass(current, base)):
        raise ConfigError(
            "configure: config.env_runners(env_runner_cls=...) must be offline_graph's "
            f"{base.__name__} or a subclass (found {getattr(current, '__name__', current)}). "
            "RLlib's runners cannot step a spaces.Graph env; derive yours from "
            f"{base.__module__}.{base.__name__}."
        )
    elif cfg.output and not issubclass(current, OfflineSingleAgentEnvRunner):
        raise ConfigError(
            "configure: config.env_runners(env_runner_cls=...) must record episodes with "
            f"offline_data(output=...) set (found {current.__name__}, not a recording runner). "
            "Use offline_graph.rllib.env.env_runner.GraphOfflineEnvRunner or a subclass."
        )
    if cfg.num_cpus_per_env_runner == 1:
        cfg.env_runners(num_cpus_per_env_runner=RUNNER_CPUS)
    overrides = cfg.evaluation_config
    if overrides is None or (isinstance(overrides, dict) and "explore" not in overrides):
        cfg.evaluation(evaluation_config={**(overrides or {}), "explore": False})


def is_vectorized(space: Any) -> bool:
    """Whether ``space`` is a vector env's batched graph space: ``Tuple(Graph, ...)``, or a
    ``Dict`` (graph-level parts) whose entries include one (``batch_space`` of a ``Dict``)."""
    if isinstance(space, gym.spaces.Dict):
        return any(is_vectorized(s) for s in space.spaces.values())
    return (
        isinstance(space, gym.spaces.Tuple)
        and len(space.spaces) > 0
        and all(isinstance(s, (gym.spaces.Graph, TypedGraph)) for s in space.spaces)
    )


def single_env_spaces(spaces: Any, config: Any) -> tuple[gym.Space, gym.Space] | None:
    """The prelearner's ``(observation, action)`` spaces from what RLlib passes it.

    With EnvRunners (an env configured, e.g. for evaluation) RLlib passes their vectorized
    spaces (``Tuple(Graph, ...)``, ``MultiDiscrete``): the config's single-env spaces are
    used instead (``configure`` sets them; the batched action space cannot tell ``Discrete``
    from ``NodeAction``). None stays None.
    """
    if spaces is None:
        return None
    obs_space, act_space = spaces
    if not is_vectorized(obs_space):
        return obs_space, act_space
    if config.observation_space is None or config.action_space is None:
        raise ConfigError(
            "GraphOfflinePreLearner: config.environment(observation_space=..., action_space=...) "
            f"must be set when RLlib passes the EnvRunners' vectorized spaces (found "
            f"{obs_space!r}). Call offline_graph.configure(config), which sets them from the env."
        )
    return config.observation_space, config.action_space


def eval_runner_cpus(cfg: Any) -> tuple[float, int]:
    """(CPUs, actors) the remote evaluation EnvRunners of ``cfg`` will take."""
    if not cfg.env or not cfg.evaluation_interval:
        return 0.0, 0
    runners = int(cfg.evaluation_num_env_runners or 0)
    per = cfg.num_cpus_per_env_runner
    return runners * float(1.0 if per in ("auto", None) else per), runners


def offline_runners(cfg: Any) -> tuple[float, int]:
    """(CPUs, actors) the remote offline evaluation runners of ``cfg`` take: RLlib builds them,
    in the trial's placement group, whenever ``offline_evaluation_interval`` is set or
    ``num_offline_eval_runners`` > 0 (0 runners: a local one, no actor)."""
    runners = int(cfg.num_offline_eval_runners or 0)
    if cfg.offline_evaluation_interval is None and runners == 0:
        return 0.0, 0
    return runners * float(cfg.num_cpus_per_offline_eval_runner), runners


def remote_runner_cpus(cfg: Any) -> tuple[float, int]:
    """(CPUs, actors) of every remote runner of ``cfg``: evaluation EnvRunners and offline
    evaluation runners (what the CPU plan, its check and ``max_concurrent_trials`` count)."""
    env_cpus, env_actors = eval_runner_cpus(cfg)
    ope_cpus, ope_actors = offline_runners(cfg)
    return env_cpus + ope_cpus, env_actors + ope_actors
