"""Which graph-aware algorithm class ``offline_graph.configure`` sets for a config's
``algo_class``: RLlib's BC / MARWIL / IQL / CQL -> GraphBC / GraphMARWIL / GraphIQL / GraphCQL
(:mod:`offline_graph.rllib.algorithms.offline_algorithms`,
:mod:`offline_graph.rllib.algorithms.value_algorithms`)."""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.bc import BC
from ray.rllib.algorithms.cql import CQL
from ray.rllib.algorithms.iql import IQL
from ray.rllib.algorithms.marwil import MARWIL

from offline_graph.data.errors import ConfigError
from offline_graph.rllib.algorithms.offline_algorithms import GraphBC, GraphMARWIL, GraphOfflineAlgorithm
from offline_graph.rllib.algorithms.value_algorithms import GraphCQL, GraphIQL

GRAPH_ALGORITHMS: dict[type, type] = {BC: GraphBC, IQL: GraphIQL, CQL: GraphCQL, MARWIL: GraphMARWIL}
"""RLlib's algorithm class -> the graph-aware one :func:`offline_graph.configure` sets (the
more derived first: BC and IQL are MARWILs)."""


def graph_algo_class(algo_class: Any) -> type:
    """The graph-aware algorithm class for a config's ``algo_class`` (see
    :data:`GRAPH_ALGORITHMS`); a ``GraphOfflineAlgorithm`` subclass is kept as it is."""
    cls = algo_class
    if isinstance(cls, str):
        from ray.tune.registry import get_trainable_cls

        cls = get_trainable_cls(cls)
    if isinstance(cls, type) and issubclass(cls, GraphOfflineAlgorithm):
        return cls
    if cls in GRAPH_ALGORITHMS:
        return GRAPH_ALGORITHMS[cls]
    found = cls.__name__ if isinstance(cls, type) else repr(cls)
    parent = next((p for p in GRAPH_ALGORITHMS if isinstance(cls, type) and issubclass(cls, p)), None)
    if parent is not None:
        graph = GRAPH_ALGORITHMS[parent].__name__
        hint = f"Derive {found} from offline_graph.{graph}, not {parent.__name__}, to keep its overrides."
    else:
        hint = (
            "offline_graph.configure takes BCConfig, MARWILConfig, IQLConfig, CQLConfig (offline) "
            "and PPOConfig (online, in a graph env)."
        )
    raise ConfigError(
        "configure: config.algo_class must be BC, MARWIL, IQL, CQL or a subclass of "
        f"offline_graph.GraphBC / GraphMARWIL / GraphIQL / GraphCQL (found {found}). {hint}"
    )
