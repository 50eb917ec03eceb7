"""The algorithms (RLlib's ``algorithms/``): ``configure`` and the classes it sets.

- :mod:`~offline_graph.rllib.algorithms.configure`: :func:`configure`, which makes any
  ``AlgorithmConfig`` read graph episodes;
- :mod:`~offline_graph.rllib.algorithms.offline_algorithms`: ``GraphBC`` / ``GraphMARWIL``
  (``BC`` / ``MARWIL`` subclasses), :mod:`~offline_graph.rllib.algorithms.value_algorithms`,
  :mod:`~offline_graph.rllib.algorithms.value_configure` and
  :mod:`~offline_graph.rllib.algorithms.value_learner` (IQL and CQL), and
  :mod:`~offline_graph.rllib.algorithms.algo_classes` (which class each config gets);
- :mod:`~offline_graph.rllib.algorithms.online` / :mod:`~offline_graph.rllib.algorithms.ppo_learner`:
  PPO fine-tuning; :mod:`~offline_graph.rllib.algorithms.team_config`: the multi-agent set-up.

Old paths: ``offline_graph.rllib.algorithms.GraphBC`` (the module before the sub-packages) still
gives the class, with a ``DeprecationWarning`` naming its new module.
"""

from offline_graph.moved import forward_from as _forward_from

__getattr__ = _forward_from(
    "offline_graph.rllib.algorithms", ("offline_graph.rllib.algorithms.offline_algorithms",), globals()
)
