"""The toy graph environment (:class:`GraphEnv`) and behaviour policies.

Importing this package registers the env with gymnasium as ``"offline_graph/Graph-v0"``.
"""

from __future__ import annotations

import gymnasium as gym

from offline_graph.env.graph_env import EnvConfig, GraphEnv, correct_action
from offline_graph.env.policies import (
    POLICY_NAMES,
    Policy,
    epsilon_policy,
    expert_policy,
    make_policy,
    random_policy,
)

ENV_ID = "offline_graph/Graph-v0"

if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="offline_graph.env.graph_env:GraphEnv")

__all__ = [
    "ENV_ID",
    "POLICY_NAMES",
    "EnvConfig",
    "GraphEnv",
    "Policy",
    "correct_action",
    "epsilon_policy",
    "expert_policy",
    "make_policy",
    "random_policy",
]
