"""The toy graph environment (:class:`GraphEnv`), the selection environments and behaviour policies.

Importing this package registers the envs with gymnasium: ``"offline_graph/Graph-v0"``
(:mod:`~offline_graph.env.graph_env`), ``"offline_graph/NextHop-v0"``
(:mod:`~offline_graph.env.next_hop`) and ``"offline_graph/GrowTree-v0"``
(:mod:`~offline_graph.env.grow_tree`), the stitching task ``"offline_graph/Stitch-v0"``
(:mod:`~offline_graph.env.stitch`), the memory task ``"offline_graph/Recall-v0"``
(:mod:`~offline_graph.env.recall`), the graph-level parts task ``"offline_graph/Channel-v0"``
(:mod:`~offline_graph.env.channel`), the typed-graph task ``"offline_graph/Dispatch-v0"``
(:mod:`~offline_graph.env.typed.dispatch`) and job-shop scheduling ``"offline_graph/JobShop-v0"``
(:mod:`~offline_graph.env.jobshop`: L2D's MDP, Taillard's instances, dispatching rules).
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
from offline_graph.env.stitch import StitchConfig, StitchEnv, stitch_expert  # noqa: E402

NEXT_HOP_ID = "offline_graph/NextHop-v0"
GROW_TREE_ID = "offline_graph/GrowTree-v0"
STITCH_ID = "offline_graph/Stitch-v0"
for _id, _entry in (
    (NEXT_HOP_ID, "offline_graph.env.next_hop:NextHopEnv"),
    (GROW_TREE_ID, "offline_graph.env.grow_tree:GrowTreeEnv"),
    (STITCH_ID, "offline_graph.env.stitch:StitchEnv"),
):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_entry)

__all__ += [
    "GROW_TREE_ID",
    "NEXT_HOP_ID",
    "STITCH_ID",
    "GrowTreeConfig",
    "GrowTreeEnv",
    "NextHopConfig",
    "NextHopEnv",
    "StitchConfig",
    "StitchEnv",
    "grow_tree_expert",
    "next_hop_expert",
    "stitch_expert",
]

# The memory task: answer at the last step the cue shown at step 0 (offline_graph.env.recall).
from offline_graph.env.recall import RecallConfig, RecallEnv, recall_expert  # noqa: E402

RECALL_ID = "offline_graph/Recall-v0"
if RECALL_ID not in gym.registry:
    gym.register(id=RECALL_ID, entry_point="offline_graph.env.recall:RecallEnv")

__all__ += ["RECALL_ID", "RecallConfig", "RecallEnv", "recall_expert"]

# A graph with graph-level parts in a Dict observation (offline_graph.env.channel).
from offline_graph.env.channel import ChannelConfig, ChannelEnv, channel_expert  # noqa: E402

CHANNEL_ID = "offline_graph/Channel-v0"
if CHANNEL_ID not in gym.registry:
    gym.register(id=CHANNEL_ID, entry_point="offline_graph.env.channel:ChannelEnv")

__all__ += ["CHANNEL_ID", "ChannelConfig", "ChannelEnv", "channel_expert"]

# A typed (heterogeneous) graph of jobs and machines (offline_graph.env.typed.dispatch).
from offline_graph.env.typed.dispatch import DispatchConfig, DispatchEnv, dispatch_expert  # noqa: E402

DISPATCH_ID = "offline_graph/Dispatch-v0"
if DISPATCH_ID not in gym.registry:
    gym.register(id=DISPATCH_ID, entry_point="offline_graph.env.typed.dispatch:DispatchEnv")

__all__ += ["DISPATCH_ID", "DispatchConfig", "DispatchEnv", "dispatch_expert"]

# Job-shop scheduling, L2D's MDP (offline_graph.env.jobshop; the CP-SAT expert needs ortools).
from offline_graph.env.jobshop import JOBSHOP_FEATURES, JobShopConfig, JobShopEnv  # noqa: E402
from offline_graph.env.jobshop_instances import (  # noqa: E402
    TAILLARD_GROUPS,
    TAILLARD_UPPER_BOUNDS,
    generate_instance,
    taillard_instance,
)
from offline_graph.env.jobshop_rules import JOBSHOP_POLICY_NAMES, make_jobshop_policy  # noqa: E402

JOBSHOP_ID = "offline_graph/JobShop-v0"
if JOBSHOP_ID not in gym.registry:
    gym.register(id=JOBSHOP_ID, entry_point="offline_graph.env.jobshop:JobShopEnv")

__all__ += [
    "JOBSHOP_FEATURES",
    "JOBSHOP_ID",
    "JOBSHOP_POLICY_NAMES",
    "TAILLARD_GROUPS",
    "TAILLARD_UPPER_BOUNDS",
    "JobShopConfig",
    "JobShopEnv",
    "generate_instance",
    "make_jobshop_policy",
    "taillard_instance",
]

# The multi-agent TeamEnv (an RLlib MultiAgentEnv): registered by a string entry point and
# exported lazily, so `import offline_graph.env` does not import Ray.
TEAM_ID = "offline_graph/Team-v0"
if TEAM_ID not in gym.registry:
    # Not a gymnasium.Env: no passive env checker nor order enforcing around it.
    gym.register(
        id=TEAM_ID,
        entry_point="offline_graph.env.team:TeamEnv",
        disable_env_checker=True,
        order_enforce=False,
    )

_TEAM_EXPORTS = {
    "TeamConfig": "offline_graph.env.team",
    "TeamEnv": "offline_graph.env.team",
    "pick_correct_action": "offline_graph.env.team_policies",
    "team_expert": "offline_graph.env.team_policies",
    "team_policy_mapping_fn": "offline_graph.env.team_policies",
}
__all__ += ["TEAM_ID", *_TEAM_EXPORTS]


def __getattr__(name: str) -> object:
    if name in _TEAM_EXPORTS:
        import importlib

        return getattr(importlib.import_module(_TEAM_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
