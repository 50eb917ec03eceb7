"""RLlib offline configs for multi-agent episode data: one ``GNNModule`` per module with its
own spaces (:func:`multi_agent_offline_config`, used by ``offline-graph train --multi-agent``),
and the Team-v0 (:mod:`offline_graph.env.team`) case of it (:func:`team_offline_config`, shared
by the league benchmark and ``offline-graph ma-experiment``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from offline_graph.env.team import TeamEnv
from offline_graph.env.team_policies import team_policy_mapping_fn


def multi_agent_offline_config(
    config: Any,
    data: Any,
    module_spaces: Mapping[str, tuple[gym.Space, gym.Space]],
    model_config: dict,
    trained: Sequence[str],
    *,
    agent_spaces: tuple[Mapping[Any, gym.Space], Mapping[Any, gym.Space]] | None = None,
    policy_mapping_fn: Callable[..., str] | None = None,
) -> Any:
    """``config`` (an RLlib BCConfig / MARWILConfig) set up for multi-agent episode data: one
    GNNModule per entry of ``module_spaces`` (module id -> (observation, action) space),
    ``trained`` updated, episodes read by ``GraphOfflinePreLearner``. ``agent_spaces``
    (observation / action space per agent id) become the config's ``Dict`` spaces (None:
    ``offline_graph.configure`` sets them from the modules'); ``policy_mapping_fn`` None keeps
    RLlib's default (the prelearner then uses the module ids recorded with the agents). Not
    yet ``offline_graph.configure``d."""
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.rllib.core.gnn_module import GNNModule
    from offline_graph.rllib.offline.prelearner import GraphOfflinePreLearner

    specs = {
        name: RLModuleSpec(
            module_class=GNNModule, observation_space=obs, action_space=act, model_config=dict(model_config)
        )
        for name, (obs, act) in module_spaces.items()
    }
    if agent_spaces is not None:
        config.environment(
            observation_space=gym.spaces.Dict(dict(agent_spaces[0])),
            action_space=gym.spaces.Dict(dict(agent_spaces[1])),
        )
    mapping = {} if policy_mapping_fn is None else {"policy_mapping_fn": policy_mapping_fn}
    return (
        config.multi_agent(policies=set(specs), policies_to_train=list(trained), **mapping)
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        .offline_data(input_=data, input_read_episodes=True, prelearner_class=GraphOfflinePreLearner)
    )


def team_offline_config(
    config: Any, data: str, modules: Mapping[str, str], model_config: dict, trained: Sequence[str]
) -> Any:
    """``config`` (an RLlib BCConfig / MARWILConfig) set up for Team-v0 episode data: the env's
    per-agent spaces, one GNNModule per entry of ``modules`` (module id -> agent kind whose
    spaces it takes), agents mapped by :func:`team_policy_mapping_fn`, ``trained`` updated,
    episodes read by ``GraphOfflinePreLearner``. Not yet ``offline_graph.configure``d."""
    env = TeamEnv()
    osp: dict[Any, Any] = dict(env.observation_spaces or {})
    asp: dict[Any, Any] = dict(env.action_spaces or {})
    return multi_agent_offline_config(
        config,
        [data],
        {name: (osp[f"{kind}_0"], asp[f"{kind}_0"]) for name, kind in modules.items()},
        model_config,
        trained,
        agent_spaces=(osp, asp),
        policy_mapping_fn=team_policy_mapping_fn,
    )
