"""Old import path of the selection environments, kept so existing names keep resolving.

The code now lives one environment per module: :mod:`offline_graph.env.next_hop`,
:mod:`offline_graph.env.grow_tree`, and their shared base and graph helpers in
:mod:`offline_graph.env.selection`. Episode files record the ``--env`` / ``--policy`` strings
they were made with (e.g. ``offline_graph.env.selection_envs:NextHopEnv``,
``offline_graph.env.selection_envs:next_hop_expert``); this module re-exports every public name
those strings may hold, so such data and commands still work. New code should import from
:mod:`offline_graph.env` or the modules above.
"""

from __future__ import annotations

from offline_graph.env.grow_tree import (
    GROW_TREE_FEATURES,
    GrowTreeConfig,
    GrowTreeEnv,
    grow_tree_choices,
    grow_tree_expert,
)
from offline_graph.env.next_hop import (
    NEXT_HOP_FEATURES,
    NextHopConfig,
    NextHopEnv,
    next_hop_choices,
    next_hop_expert,
)
from offline_graph.env.selection import (
    SELECTION_POLICY_NAMES,
    Policy,
    geometric_graph,
    make_selection_policy,
    shortest_distances_to,
)

__all__ = [
    "GROW_TREE_FEATURES",
    "NEXT_HOP_FEATURES",
    "SELECTION_POLICY_NAMES",
    "GrowTreeConfig",
    "GrowTreeEnv",
    "NextHopConfig",
    "NextHopEnv",
    "Policy",
    "geometric_graph",
    "grow_tree_choices",
    "grow_tree_expert",
    "make_selection_policy",
    "next_hop_choices",
    "next_hop_expert",
    "shortest_distances_to",
]
