"""Off-policy evaluation of graph policies (RLlib's ``offline/offline_evaluation_runner`` and
``offline/estimators``).

- :mod:`~offline_graph.rllib.ope.estimate`: ``estimate_value`` (IS, WIS, DR, FQE) with
  :mod:`~offline_graph.rllib.ope.ope_checks` (its settings' ranges);
- :mod:`~offline_graph.rllib.ope.ope_policy`: the target policies (greedy or sampling) of a
  module; :mod:`~offline_graph.rllib.ope.fqe` / :mod:`~offline_graph.rllib.ope.fqe_model`:
  fitted Q evaluation;
- :mod:`~offline_graph.rllib.ope.ope_runner`: the offline-evaluation runner that
  ``config.evaluation(offline_evaluation_type="fqe")`` builds.

Stands on :mod:`offline_graph.rllib.core`, :mod:`offline_graph.rllib.env` and
:mod:`offline_graph.rllib.offline`.
"""

from offline_graph.moved import forward_from as _forward_from

__getattr__ = _forward_from("offline_graph.rllib.ope", ("offline_graph.rllib.ope.estimate",), globals())
