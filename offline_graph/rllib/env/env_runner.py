"""``GraphEnvRunner``: RLlib's ``SingleAgentEnvRunner`` for envs with ``spaces.Graph`` observations.

Set by :func:`offline_graph.configure` when the config has an env
(``config.env_runners(env_runner_cls=GraphEnvRunner)``; ``GraphOfflineEnvRunner`` when
``offline_data(output=...)`` records episodes). It is RLlib's runner with three changes, all
by overriding, nothing of RLlib is modified:

=====================  ========================================================================
override               why
=====================  ========================================================================
``make_env``           RLlib builds a gymnasium vector env, which stacks observations and
                       takes ``GraphInstance`` tuples apart in ``unbatch``: builds a
                       :class:`~offline_graph.rllib.env.vector_env.GraphVectorEnv` of
                       ``num_envs_per_env_runner`` sub-envs instead, created as RLlib creates
                       them (a Tune-registered name or a callable gets an ``EnvContext``, a
                       gymnasium id ``gym.make(id, **env_config)``)
``__init__``           edits the connector pipelines RLlib built
                       (:func:`~offline_graph.rllib.env.env_connectors.graph_env_to_module`,
                       :func:`~offline_graph.rllib.env.env_connectors.graph_module_to_env`) and
                       turns off ``episodes_to_numpy`` (``to_numpy`` cannot stack ragged
                       graphs; the episodes keep one graph dict per step)
``_new_episode``       episodes get no observation space: their observations are graph dicts,
                       and RLlib's episode serialization (``get_state``, used by the
                       recorder) has no case for ``spaces.Graph``
=====================  ========================================================================

Episodes returned by ``sample()`` hold graph dicts (``x``, ``edge_index``, [``edge_attr``],
[``action_mask`` from ``info["action_mask"]`` for NodeAction / EdgeAction envs]), the layout
of recorded episode files. To read masks from another info key, subclass and set
``mask_key``. ``sample(random_actions=True)`` draws from the batched action space (legal
for ``Discrete``; a node / edge index may not exist in a smaller graph).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, cast

import gymnasium as gym
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.env.env_context import EnvContext
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.offline.offline_env_runner import OfflineSingleAgentEnvRunner
from ray.rllib.utils.annotations import override
from ray.tune.registry import ENV_CREATOR, _global_registry

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.globals import graph_part
from offline_graph.rllib.env.env_connectors import DEFAULT_MASK_KEY, graph_env_runner
from offline_graph.rllib.env.vector_env import GraphVectorEnv

logger = logging.getLogger(__name__)

EnvCreator = Callable[[EnvContext], gym.Env]


def env_creator(env: Any) -> EnvCreator:
    """``env_context -> gym.Env`` for a config's ``env``, as RLlib's runner creates it.

    A Tune-registered name or a callable (an env class) is called with the ``EnvContext``;
    any other string is a gymnasium id, built with ``gym.make(id, **env_config)``
    (``offline_graph.env`` is imported first, so ``offline_graph/*`` ids resolve).
    """
    if isinstance(env, str):
        import offline_graph.env  # noqa: F401  (registers offline_graph/Graph-v0 and co.)

        if _global_registry.contains(ENV_CREATOR, env):
            return _global_registry.get(ENV_CREATOR, env)  # type: ignore[no-any-return]
        return functools.partial(_make_gym, env)
    if callable(env):
        return env  # type: ignore[no-any-return]
    raise ConfigError(
        f"GraphEnvRunner: config.env must be a gymnasium id, a Tune-registered name or an env "
        f"class / creator (found {env!r}). Set config.environment(env=...)."
    )


def _make_gym(env_id: str, env_context: EnvContext) -> gym.Env:
    return gym.make(env_id, **dict(env_context))


def make_single_env(config: Any, worker_index: int = 0, vector_index: int = 0) -> gym.Env:
    """One instance of ``config.env`` (built like the runner's sub-envs)."""
    ctx = EnvContext(
        dict(config.env_config or {}),
        worker_index=worker_index,
        vector_index=vector_index,
        num_workers=int(config.num_env_runners or 0),
    )
    return env_creator(config.env)(ctx)


class GraphEnvRunner(SingleAgentEnvRunner):
    """RLlib's ``SingleAgentEnvRunner`` for ``spaces.Graph`` envs (see the module docstring)."""

    mask_key: str | None = DEFAULT_MASK_KEY
    """The ``info`` key action masks of node / edge selection envs are read from."""

    @override(SingleAgentEnvRunner)
    def __init__(self, *, config: Any, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        graph_env_runner(self)

    @override(SingleAgentEnvRunner)
    def make_env(self) -> None:
        """Build :class:`GraphVectorEnv` with ``num_envs_per_env_runner`` sub-envs."""
        if self.env is not None:
            try:
                self.env.close()
            except Exception as err:  # as RLlib: a failing close does not stop a rebuild
                logger.warning("GraphEnvRunner: closing the old env failed: %s", err)
        if not self.config.env:
            raise ConfigError(
                "GraphEnvRunner: config.env must be set (found None). Set "
                "config.environment('offline_graph/Graph-v0') or an env class."
            )
        mode = self.config.gym_env_vectorize_mode
        mode = getattr(mode, "value", mode)
        if str(mode).lower() != "sync":
            raise ConfigError(
                f"GraphEnvRunner: config.gym_env_vectorize_mode must be 'sync' (found {mode!r}). "
                "Graph sub-envs are stepped in the runner's process; use more EnvRunners "
                "(num_env_runners / evaluation_num_env_runners) for parallelism."
            )
        env_config = self.config.env_config
        if isinstance(env_config, EnvContext):
            env_ctx = env_config
        else:
            env_ctx = EnvContext(
                dict(env_config or {}),
                worker_index=self.worker_index or 0,
                num_workers=self.num_workers,
                remote=self.config.remote_worker_envs,
            )
        create = env_creator(self.config.env)
        count = int(self.config.num_envs_per_env_runner)
        self.env = GraphVectorEnv(
            [functools.partial(create, env_ctx.copy_with_overrides(vector_index=i)) for i in range(count)]
        )
        space = self.env.single_observation_space
        if not isinstance(graph_part(space), gym.spaces.Graph):
            raise ConfigError(
                f"GraphEnvRunner: env {self.config.env!r} observation space must be a "
                f"gymnasium.spaces.Graph or a Dict with one (found {space!r}). Use RLlib's "
                "SingleAgentEnvRunner for other envs, or wrap the env so it returns GraphInstance "
                "observations."
            )
        self.num_envs = self.env.num_envs
        self._needs_initial_reset = True
        make_callback(
            "on_environment_created",
            callbacks_objects=self._callbacks,
            callbacks_functions=self.config.callbacks_on_environment_created,
            kwargs=dict(
                env_runner=self,
                metrics_logger=self.metrics,
                env=self.env.unwrapped,
                env_context=env_ctx,
            ),
        )

    def _new_episode(self, env_index: int, episodes: list[Any] | None = None) -> None:
        """RLlib's, with no observation space on the episode (see the module docstring)."""
        episodes = episodes if episodes is not None else cast(list[Any], self._ongoing_episodes)
        episodes[env_index] = SingleAgentEpisode(
            observation_space=None,
            action_space=self.env.single_action_space,  # type: ignore[union-attr]
        )
        self._make_on_episode_callback("on_episode_created", env_index, episodes)


class GraphOfflineEnvRunner(GraphEnvRunner, OfflineSingleAgentEnvRunner):
    """RLlib's recording runner (``offline_data(output=..., output_write_episodes=True)``)
    for graph envs: writes each sampled episode's ``get_state()`` (graph dicts per step) with
    msgpack, the rows ``offline-graph inspect`` / ``convert`` / ``train`` read."""
