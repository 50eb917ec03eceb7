"""offline_graph: offline RLlib training (BC, MARWIL, IQL, CQL) from recorded graph episodes, no padding.

Public API (every name is imported on first use, so ``import offline_graph`` loads no Ray or
torch)::

    configure(config)            fills in everything else graph training needs; sets
                                 config.algo_class to GraphBC / GraphMARWIL / GraphIQL /
                                 GraphCQL
    GraphBC / GraphMARWIL        RLlib's BC / MARWIL with the build-time config check,
                                 get_module() and checkpoint restore without EnvRunners
    GraphIQL / GraphCQL          RLlib's IQL / CQL for graph observations and Discrete,
                                 NodeAction or EdgeAction actions (masked Q, value runs)
    data_report(config)          episodes / transitions read, used and rejected (by reason)
    max_concurrent_trials(config)  Tune trials that fit beside Ray Data's read CPU
                                 (tune.TuneConfig(max_concurrent_trials=...))
    GraphOfflinePreLearner       RLlib OfflinePreLearner for ragged graph episodes / rows
    GraphEnvRunner               RLlib SingleAgentEnvRunner for spaces.Graph envs (evaluation,
                                 recording; set by configure when the config has an env)
    GraphMultiAgentEnvRunner     RLlib MultiAgentEnvRunner for graph-observing agents (evaluation
                                 per module; set by configure for multi-agent configs with an env)
    multi_agent_offline_config   an RLlib config for multi-agent episode files, one GNNModule
                                 per module id with its own spaces
    configure_online(config)     PPO on a Graph env: GraphEnvRunner, GNNModule with a value
                                 head, GraphPPOTorchLearner (graph-aware learner connector)
    load_module_weights(algo, m) fine-tune: a trained module's weights into a built algorithm
    GNNModule                    PyG message-passing TorchRLModule
    GraphCollateFn               learner-side collate (Arrow rows -> PyG-batched tensors)
    NodeAction / EdgeAction      the action is a node / an edge of this step's graph (masked)
    TypedGraph                   typed nodes and edges (per-type widths and counts, PyG HeteroData)
    graph_space(F, D)            Graph(node Box(F), edge Box(D) or None); with Discrete(K),
    parse_space / space_text     NodeAction, EdgeAction: the spaces of the compact texts
                                 graph:F=5,D=3 / discrete:K / node:MAX / edge:MAX
    resolve_spaces(path, ...)    a data set's spaces: metadata, env, explicit, else inferred
    evaluate_module / evaluate_policy   returns of a module / a named policy in the env
    estimate_value(module, data, method=...)   a policy's value from logs, no simulator
                                 (off-policy evaluation: fqe, wis, pdis, dr)
    restore_module(checkpoint)   the trained RLModule from a checkpoint (no Ray needed)
    write_episodes(path, episodes)   finished RLlib Single/MultiAgentEpisodes -> episode files
    to_multi_agent_episode(item)     a multi-agent row -> RLlib's MultiAgentEpisode
    evaluate_multi_agent_module      per-agent / per-module returns in a MultiAgentEnv
    encode_episode, graph_to_dict / dict_to_graph, collate / uncollate, FORMAT_VERSION
    OfflineGraphError and its subclasses ConfigError, DecodeError, SchemaError,
    GraphValidationError, FormatVersionError, StorageError, OutputExistsError
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from offline_graph.moved import install as _install_moved_paths

__version__ = "0.1.0"
_install_moved_paths()  # old module paths (offline_graph.collate, ...) still import

_EXPORTS: dict[str, str] = {
    # RLlib integration (Ray, torch)
    "configure": "offline_graph.rllib.algorithms.configure",
    "data_report": "offline_graph.rllib.algorithms.configure",
    "max_concurrent_trials": "offline_graph.rllib.offline.resources",
    "GraphBC": "offline_graph.rllib.algorithms.offline_algorithms",
    "GraphMARWIL": "offline_graph.rllib.algorithms.offline_algorithms",
    "GraphIQL": "offline_graph.rllib.algorithms.value_algorithms",
    "GraphCQL": "offline_graph.rllib.algorithms.value_algorithms",
    "GraphOfflinePreLearner": "offline_graph.rllib.offline.prelearner",
    "GraphEnvRunner": "offline_graph.rllib.env.env_runner",
    "GraphMultiAgentEnvRunner": "offline_graph.rllib.env.ma_env_runner",
    "multi_agent_offline_config": "offline_graph.rllib.algorithms.team_config",
    "configure_online": "offline_graph.rllib.algorithms.online",
    "load_module_weights": "offline_graph.rllib.algorithms.online",
    "GraphPPOTorchLearner": "offline_graph.rllib.algorithms.ppo_learner",
    "GNNModule": "offline_graph.rllib.core.gnn_module",
    "GraphCollateFn": "offline_graph.rllib.offline.collate_fn",
    "encode_episode": "offline_graph.rllib.offline.episodes",
    "write_episodes": "offline_graph.rllib.offline.write",
    "to_multi_agent_episode": "offline_graph.rllib.offline.episodes",
    "evaluate_multi_agent_module": "offline_graph.rllib.evaluation.ma_evaluation",
    "evaluate_module": "offline_graph.rllib.evaluation.evaluate",
    "estimate_value": "offline_graph.rllib.ope.estimate",
    "evaluate_policy": "offline_graph.rllib.evaluation.evaluate",
    "restore_module": "offline_graph.rllib.evaluation.evaluate",
    # pure core (numpy, pyarrow)
    "NodeAction": "offline_graph.data.graphs.spaces",
    "EdgeAction": "offline_graph.data.graphs.spaces",
    "TypedGraph": "offline_graph.data.graphs.typed",
    "graph_space": "offline_graph.data.graphs.space_text",
    "parse_space": "offline_graph.data.graphs.space_text",
    "space_text": "offline_graph.data.graphs.space_text",
    "resolve_spaces": "offline_graph.env.data_spaces",
    "graph_to_dict": "offline_graph.data.graphs.graph",
    "dict_to_graph": "offline_graph.data.graphs.graph",
    "collate": "offline_graph.data.graphs.collate",
    "uncollate": "offline_graph.data.graphs.collate",
    "FORMAT_VERSION": "offline_graph.data.store.format",
    "OfflineGraphError": "offline_graph.data.errors",
    "ConfigError": "offline_graph.data.errors",
    "DecodeError": "offline_graph.data.errors",
    "SchemaError": "offline_graph.data.errors",
    "GraphValidationError": "offline_graph.data.errors",
    "FormatVersionError": "offline_graph.data.errors",
    "StorageError": "offline_graph.data.errors",
    "OutputExistsError": "offline_graph.data.errors",
}
"""Public name -> the module it lives in."""

if TYPE_CHECKING:  # the same names, for type checkers and IDEs
    from offline_graph.data.graphs.collate import collate, uncollate
    from offline_graph.data.errors import (
        ConfigError,
        DecodeError,
        FormatVersionError,
        GraphValidationError,
        OfflineGraphError,
        OutputExistsError,
        SchemaError,
        StorageError,
    )
    from offline_graph.data.store.format import FORMAT_VERSION
    from offline_graph.data.graphs.graph import dict_to_graph, graph_to_dict
    from offline_graph.data.graphs.space_text import graph_space, parse_space, space_text
    from offline_graph.data.graphs.spaces import EdgeAction, NodeAction
    from offline_graph.data.graphs.typed import TypedGraph
    from offline_graph.env.data_spaces import resolve_spaces
    from offline_graph.rllib.algorithms.offline_algorithms import GraphBC, GraphMARWIL
    from offline_graph.rllib.algorithms.value_algorithms import GraphCQL, GraphIQL
    from offline_graph.rllib.offline.collate_fn import GraphCollateFn
    from offline_graph.rllib.algorithms.configure import configure, data_report
    from offline_graph.rllib.offline.episodes import encode_episode
    from offline_graph.rllib.evaluation.evaluate import evaluate_module, evaluate_policy, restore_module
    from offline_graph.rllib.ope.estimate import estimate_value
    from offline_graph.rllib.env.env_runner import GraphEnvRunner
    from offline_graph.rllib.env.ma_env_runner import GraphMultiAgentEnvRunner
    from offline_graph.rllib.algorithms.team_config import multi_agent_offline_config
    from offline_graph.rllib.core.gnn_module import GNNModule
    from offline_graph.rllib.algorithms.online import configure_online, load_module_weights
    from offline_graph.rllib.algorithms.ppo_learner import GraphPPOTorchLearner
    from offline_graph.rllib.offline.prelearner import GraphOfflinePreLearner
    from offline_graph.rllib.offline.resources import max_concurrent_trials


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (keeps ``import offline_graph`` light)."""
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'offline_graph' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [  # the keys of _EXPORTS, spelled out for linters and `from offline_graph import *`
    "configure",
    "data_report",
    "max_concurrent_trials",
    "GraphBC",
    "GraphMARWIL",
    "GraphIQL",
    "GraphCQL",
    "GraphOfflinePreLearner",
    "GraphEnvRunner",
    "GraphMultiAgentEnvRunner",
    "multi_agent_offline_config",
    "configure_online",
    "load_module_weights",
    "GraphPPOTorchLearner",
    "GNNModule",
    "GraphCollateFn",
    "encode_episode",
    "write_episodes",
    "to_multi_agent_episode",
    "evaluate_multi_agent_module",
    "evaluate_module",
    "estimate_value",
    "evaluate_policy",
    "restore_module",
    "NodeAction",
    "EdgeAction",
    "TypedGraph",
    "graph_space",
    "parse_space",
    "space_text",
    "resolve_spaces",
    "graph_to_dict",
    "dict_to_graph",
    "collate",
    "uncollate",
    "FORMAT_VERSION",
    "OfflineGraphError",
    "ConfigError",
    "DecodeError",
    "SchemaError",
    "GraphValidationError",
    "FormatVersionError",
    "StorageError",
    "OutputExistsError",
]
