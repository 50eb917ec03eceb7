"""``GraphMultiAgentEnvRunner``: RLlib's ``MultiAgentEnvRunner`` for ``MultiAgentEnv``s whose
agents observe ``spaces.Graph`` (e.g. ``offline_graph/Team-v0``).

Set by :func:`offline_graph.configure` for a multi-agent config with an env
(``config.env_runners(env_runner_cls=GraphMultiAgentEnvRunner)``), so that
``config.evaluation(evaluation_interval=...)`` evaluates every module during offline training
and RLlib's result carries the per-module returns
(``evaluation/env_runners/module_episode_returns_mean/<module_id>``). The multi-agent twin of
:class:`~offline_graph.rllib.env.env_runner.GraphEnvRunner`, by overriding only:

=====================  ========================================================================
override               why
=====================  ========================================================================
``__init__``           edits the connector pipelines RLlib built (the same pieces as the
                       single-agent runner: :func:`~offline_graph.rllib.env.env_connectors.
                       graph_env_to_module` turns each agent's newest ``GraphInstance`` into
                       our graph dict with its agent's edge size and, for node / edge
                       selection agents, ``info["action_mask"]``; after RLlib's
                       ``AgentToModuleMapping`` each module's observations become one graph
                       batch with that module's spaces, no stacking) and turns off
                       ``episodes_to_numpy`` (``to_numpy`` cannot stack ragged graphs)
``_new_episode``       episodes get no observation spaces (they hold graph dicts, and RLlib's
                       episode serialization has no case for ``spaces.Graph``)
=====================  ========================================================================

RLlib's own ``make_env`` builds the env (``gym.make(id, **env_config)``, a Tune-registered
name or a callable) into its ``SyncVectorMultiAgentEnv``, which keeps one observation dict per
sub-env: nothing is batched before the connectors.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.utils.annotations import override

import offline_graph.env  # noqa: F401  (registers offline_graph/Team-v0 and co. in every runner)
from offline_graph.rllib.env.env_connectors import DEFAULT_MASK_KEY, graph_env_runner


class GraphMultiAgentEnvRunner(MultiAgentEnvRunner):
    """RLlib's ``MultiAgentEnvRunner`` for graph-observing agents (see the module docstring)."""

    mask_key: str | None = DEFAULT_MASK_KEY
    """The ``info`` key action masks of node / edge selection agents are read from."""

    @override(MultiAgentEnvRunner)
    def __init__(self, *, config: Any, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        graph_env_runner(self)

    def _new_episode(self, env_index: int, episodes: list[Any] | None = None) -> None:
        """RLlib's, with no observation spaces on the episode (see the module docstring)."""
        target: Any = episodes if episodes is not None else self._ongoing_episodes
        env = self.env.envs[env_index].unwrapped  # type: ignore[union-attr,index]
        spaces: Any = {aid: env.get_action_space(aid) for aid in env.possible_agents}
        mapping: Any = self.config.policy_mapping_fn
        target[env_index] = MultiAgentEpisode(
            observation_space=None, action_space=spaces, agent_to_module_mapping_fn=mapping
        )
        self._make_on_episode_callback("on_episode_created", env_index, target)
