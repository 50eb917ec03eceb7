"""``GraphIQL`` / ``GraphCQL``: RLlib's IQL and CQL for graph observations with discrete, node
and edge actions, set by ``offline_graph.configure`` for an ``IQLConfig`` / ``CQLConfig``.

RLlib 2.60's IQL and CQL are continuous-only (their default modules need a ``Box`` action
space; CQL samples actions between ``low`` and ``high``), IQL inherits MARWIL's ``beta <= 1``
check, and CQL's new-stack ``training_step`` calls ``LearnerGroup.update`` with an argument it
no longer takes. What these subclasses change, nothing of RLlib itself:

- ``get_default_config`` returns :class:`GraphIQLConfig` / :class:`GraphCQLConfig`: RLlib's
  ``Algorithm.__init__`` turns the user's ``IQLConfig`` / ``CQLConfig`` into it (as it does
  for any config of another type), so their ``validate`` runs: IQL's ``beta`` is a
  temperature (the paper uses 3-10), only ``beta > 0`` is required; the default learner is
  :class:`~offline_graph.rllib.algorithms.value_learner.GraphValueTorchLearner` and the default module
  ``GNNModule``;
- ``GraphCQLConfig`` is offline only (``is_online`` False, as MARWIL's): SAC's default would
  build sampling EnvRunners, which need an env;
- ``GraphCQL.training_step`` is the offline training step RLlib's MARWIL (and IQL) run: sample
  the offline data's iterators, one ``LearnerGroup.update`` per iteration;
- the overrides of :class:`~offline_graph.rllib.algorithms.offline_algorithms.GraphOfflineAlgorithm`
  (build-time config check, ``get_module``, checkpoint restore without EnvRunners).
"""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.cql import CQL, CQLConfig
from ray.rllib.algorithms.iql import IQL, IQLConfig
from ray.rllib.algorithms.marwil import MARWIL
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from offline_graph.rllib.algorithms.offline_algorithms import GraphOfflineAlgorithm


def _graph_defaults(config: Any) -> tuple[type, RLModuleSpec]:
    from offline_graph.rllib.core.gnn_module import GNNModule
    from offline_graph.rllib.algorithms.value_learner import GraphValueTorchLearner

    return GraphValueTorchLearner, RLModuleSpec(module_class=GNNModule)


class GraphIQLConfig(IQLConfig):
    """RLlib's ``IQLConfig`` for graph modules (see the module doc)."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class=algo_class or GraphIQL)

    def get_default_learner_class(self) -> Any:
        return _graph_defaults(self)[0]

    def get_default_rl_module_spec(self) -> Any:
        return _graph_defaults(self)[1]

    def validate(self) -> None:
        beta = self.beta
        if beta <= 1.0:
            super().validate()
            return
        # MARWIL's validate bounds beta by 1 (its advantage weight); IQL's beta is the AWR
        # temperature (IQL's own validate only asks beta > 0). Validate the rest as is.
        object.__setattr__(self, "beta", 1.0)
        try:
            super().validate()
        finally:
            object.__setattr__(self, "beta", beta)


class GraphCQLConfig(CQLConfig):
    """RLlib's ``CQLConfig`` for graph modules with discrete / node / edge actions."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class=algo_class or GraphCQL)
        self._is_online = False  # offline only, as MARWILConfig (SAC's default builds EnvRunners)

    def get_default_learner_class(self) -> Any:
        return _graph_defaults(self)[0]

    def get_default_rl_module_spec(self) -> Any:
        return _graph_defaults(self)[1]


class GraphIQL(GraphOfflineAlgorithm, IQL):
    """RLlib's IQL for graph observations (set by :func:`offline_graph.configure`)."""

    @classmethod
    def get_default_config(cls) -> GraphIQLConfig:
        return GraphIQLConfig()


class GraphCQL(GraphOfflineAlgorithm, CQL):
    """RLlib's CQL (discrete: masked argmax of Q) for graph observations."""

    @classmethod
    def get_default_config(cls) -> GraphCQLConfig:  # type: ignore[override]
        return GraphCQLConfig()

    def training_step(self) -> None:
        MARWIL.training_step(self)  # type: ignore[arg-type]
