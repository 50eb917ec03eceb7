"""The toy graph environment (:class:`GraphEnv`), the selection environments and behaviour policies.

Importing this package registers the envs with gymnasium: ``"offline_graph/Graph-v0"``
(:mod:`~offline_graph.env.graph_env`), ``"offline_graph/NextHop-v0"``
(:mod:`~offline_graph.env.next_hop`) and ``"offline_graph/GrowTree-v0"``
(:mod:`~offline_graph.env.grow_tree`).
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

# Selection environments (the action is a node / an edge of the step's graph), one per module.
# (offline_graph.env.selection_envs re-exports them under their old import path.)
from offline_graph.env.grow_tree import GrowTreeConfig, GrowTreeEnv, grow_tree_expert  # noqa: E402
from offline_graph.env.next_hop import NextHopConfig, NextHopEnv, next_hop_expert  # noqa: E402

NEXT_HOP_ID = "offline_graph/NextHop-v0"
GROW_TREE_ID = "offline_graph/GrowTree-v0"
for _id, _entry in (
    (NEXT_HOP_ID, "offline_graph.env.next_hop:NextHopEnv"),
    (GROW_TREE_ID, "offline_graph.env.grow_tree:GrowTreeEnv"),
):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_entry)

__all__ += [
    "GROW_TREE_ID",
    "NEXT_HOP_ID",
    "GrowTreeConfig",
    "GrowTreeEnv",
    "NextHopConfig",
    "NextHopEnv",
    "grow_tree_expert",
    "next_hop_expert",
]
