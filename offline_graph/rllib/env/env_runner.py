"""``GraphEnvRunner``: RLlib's ``SingleAgentEnvRunner`` for envs with ``spaces.Graph`` observations.

Set by :func:`offline_graph.configure` when the config has an env
(``config.env_runners(env_runner_cls=GraphEnvRunner)``; ``GraphOfflineEnvRunner`` when
``offline_data(output=...)`` records episodes). It is RLlib's runner with five changes, all
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
                       graphs; the episodes keep one graph dict per step); without user
                       pieces, runs the default pieces of each pipeline in one call, the same
                       batches and episodes at less cost per step
                       (:mod:`~offline_graph.rllib.env.env_to_module`,
                       :mod:`~offline_graph.rllib.env.module_to_env`)
``make_module``        RLlib's, the module then left in eval mode: ``forward_inference`` /
                       ``forward_exploration`` put a module in train mode into eval mode for
                       the call and back after it (a walk over its submodules each way); the
                       runner's module only acts, so the walk back is saved (a class with its
                       own ``forward_inference`` / ``forward_exploration`` is left as is)
episode callbacks      ``_make_on_episode_callback`` is RLlib's, but skips
                       ``on_episode_created`` / ``_start`` / ``_step`` when no callback object
                       overrides that (empty) method of ``RLlibCallback`` and no
                       ``callbacks_on_episode_*`` function is configured: nothing would run,
                       yet each call (one per sub-env and step) builds its arguments and walks
                       the callback lists
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
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.env.env_context import EnvContext
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.offline.offline_env_runner import OfflineSingleAgentEnvRunner
from ray.rllib.utils.annotations import override
from ray.tune.registry import ENV_CREATOR, _global_registry

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.globals import graph_part
from offline_graph.data.graphs.typed import TypedGraph
from offline_graph.rllib.core.gnn_module import GNNModule
from offline_graph.rllib.env.env_connectors import DEFAULT_MASK_KEY, graph_env_runner
from offline_graph.rllib.env.env_to_module import fuse_env_to_module
from offline_graph.rllib.env.module_to_env import fuse_module_to_env
from offline_graph.rllib.env.vector_env import GraphVectorEnv

logger = logging.getLogger(__name__)

EnvCreator = Callable[[EnvContext], gym.Env]

QUIET_WHEN_UNUSED = ("on_episode_created", "on_episode_start", "on_episode_step")
"""Episode callbacks the runner skips when nothing is registered for them (see
``GraphEnvRunner._make_on_episode_callback``; ``on_episode_end`` is always made)."""


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
        fuse_env_to_module(cast(Any, self._env_to_module))
        fuse_module_to_env(cast(Any, self._module_to_env))

    @override(SingleAgentEnvRunner)
    def make_module(self) -> None:
        """RLlib's, the module then left in eval mode (see the module docstring)."""
        super().make_module()
        module = self.module
        if isinstance(module, TorchRLModule) and _evaluates_itself(type(module)):
            module.eval()

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
        if not isinstance(graph_part(space), (gym.spaces.Graph, TypedGraph)):
            raise ConfigError(
                f"GraphEnvRunner: env {self.config.env!r} observation space must be a "
                f"gymnasium.spaces.Graph, an offline_graph.TypedGraph or a Dict with one (found "
                f"{space!r}). Use RLlib's "
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

    def _make_on_episode_callback(self, which: str, idx: int, episodes: list[Any]) -> None:
        """RLlib's, skipped for ``on_episode_created`` / ``_start`` / ``_step`` when no callback
        object overrides it and no callback function is configured (nothing would run); the
        step one is made for every sub-env at every step."""
        if which in QUIET_WHEN_UNUSED and not getattr(self.config, f"callbacks_{which}", None):
            if all(_no_op(callback, which) for callback in self._callbacks):
                return
        super()._make_on_episode_callback(which, idx, episodes)

    def _new_episode(self, env_index: int, episodes: list[Any] | None = None) -> None:
        """RLlib's, with no observation space on the episode (see the module docstring)."""
        episodes = episodes if episodes is not None else cast(list[Any], self._ongoing_episodes)
        episodes[env_index] = SingleAgentEpisode(
            observation_space=None,
            action_space=self.env.single_action_space,  # type: ignore[union-attr]
        )
        self._make_on_episode_callback("on_episode_created", env_index, episodes)


def _no_op(callback: Any, which: str) -> bool:
    """Whether ``callback.<which>`` is ``RLlibCallback``'s own (an empty method)."""
    return getattr(getattr(callback, which, None), "__func__", None) is getattr(RLlibCallback, which)


def _evaluates_itself(cls: type) -> bool:
    """Whether a module class acts through TorchRLModule's ``forward_inference`` /
    ``forward_exploration``, which switch to eval mode for the call (and back after it), or
    GNNModule's, which do the same unless the module is in eval mode already."""
    return all(
        getattr(cls, name) in (getattr(TorchRLModule, name), getattr(GNNModule, name))
        for name in ("forward_inference", "forward_exploration")
    )


class GraphOfflineEnvRunner(GraphEnvRunner, OfflineSingleAgentEnvRunner):
    """RLlib's recording runner (``offline_data(output=..., output_write_episodes=True)``)
    for graph envs: writes each sampled episode's ``get_state()`` (graph dicts per step) with
    msgpack, the rows ``offline-graph inspect`` / ``convert`` / ``train`` read."""
