"""offline_graph: offline RLlib training (BC, MARWIL) from recorded graph episodes, no padding.

Public API::

    GraphOfflinePreLearner   RLlib OfflinePreLearner for ragged graph episodes / rows
    GNNModule                PyG message-passing TorchRLModule
    configure(config)        fills in everything else graph training needs
    GraphCollateFn           learner-side collate (Arrow rows -> PyG-batched tensors)
    NodeAction / EdgeAction  the action is a node / an edge of this step's graph (masked)
    graph_to_dict / dict_to_graph, encode_episode, collate / uncollate, errors
"""

from __future__ import annotations

from typing import Any

from offline_graph.data.collate import collate, uncollate
from offline_graph.data.errors import (
    ConfigError,
    DecodeError,
    FormatVersionError,
    GraphValidationError,
    OfflineGraphError,
    SchemaError,
)
from offline_graph.data.format import FORMAT_VERSION
from offline_graph.data.graph import dict_to_graph, graph_to_dict
from offline_graph.data.spaces import EdgeAction, NodeAction

__version__ = "0.1.0"

_LAZY = {
    "GraphOfflinePreLearner": "offline_graph.rllib.prelearner",
    "GNNModule": "offline_graph.rllib.gnn_module",
    "configure": "offline_graph.rllib.configure",
    "data_report": "offline_graph.rllib.configure",
    "GraphCollateFn": "offline_graph.rllib.collate_fn",
    "encode_episode": "offline_graph.rllib.episodes",
}


def __getattr__(name: str) -> Any:
    """Import the Ray/torch-heavy parts on first use (keeps `import offline_graph` light)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'offline_graph' has no attribute {name!r}")


__all__ = [
    "FORMAT_VERSION", "ConfigError", "DecodeError", "FormatVersionError", "GraphValidationError",
    "OfflineGraphError", "SchemaError", "NodeAction", "EdgeAction", "collate", "uncollate",
    "dict_to_graph", "graph_to_dict",
    *_LAZY,
]
