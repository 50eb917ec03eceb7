"""An RLlib offline config for Team-v0 (:mod:`offline_graph.env.team`) episode data: one
``GNNModule`` per module, the env's per-agent spaces and its policy mapping; shared by the
league benchmark and ``offline-graph ma-experiment``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from offline_graph.env.team import TeamEnv
from offline_graph.env.team_policies import team_policy_mapping_fn


def team_offline_config(
    config: Any, data: str, modules: Mapping[str, str], model_config: dict, trained: Sequence[str]
) -> Any:
    """``config`` (an RLlib BCConfig / MARWILConfig) set up for Team-v0 episode data: the env's
    per-agent spaces, one GNNModule per entry of ``modules`` (module id -> agent kind whose
    spaces it takes), agents mapped by :func:`team_policy_mapping_fn`, ``trained`` updated,
    episodes read by ``GraphOfflinePreLearner``. Not yet ``offline_graph.configure``d."""
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.rllib.gnn_module import GNNModule
    from offline_graph.rllib.prelearner import GraphOfflinePreLearner

    env = TeamEnv()
    osp: dict[Any, Any] = dict(env.observation_spaces or {})
    asp: dict[Any, Any] = dict(env.action_spaces or {})
    specs = {
        name: RLModuleSpec(
            module_class=GNNModule,
            observation_space=osp[f"{kind}_0"],
            action_space=asp[f"{kind}_0"],
            model_config=dict(model_config),
        )
        for name, kind in modules.items()
    }
    return (
        config.environment(observation_space=gym.spaces.Dict(osp), action_space=gym.spaces.Dict(asp))
        .multi_agent(
            policies=set(specs), policy_mapping_fn=team_policy_mapping_fn, policies_to_train=list(trained)
        )
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        .offline_data(input_=[data], input_read_episodes=True, prelearner_class=GraphOfflinePreLearner)
    )
