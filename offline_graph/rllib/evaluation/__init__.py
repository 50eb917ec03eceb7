"""Evaluating trained modules in environments (RLlib's ``evaluation/``).

- :mod:`~offline_graph.rllib.evaluation.evaluate`: ``evaluate_module``, ``greedy_actions``,
  ``is_legal`` (single agent); :mod:`~offline_graph.rllib.evaluation.ma_evaluation` (multi
  agent); :mod:`~offline_graph.rllib.evaluation.acting` (the shared acting loop and score);
- :mod:`~offline_graph.rllib.evaluation.checkpoints` (module restore),
  :mod:`~offline_graph.rllib.evaluation.checkpoint_selection` (picking a checkpoint by OPE) and
  :mod:`~offline_graph.rllib.evaluation.offline_metrics` (the metrics logged while training).

The top sub-package: stands on all the others. Old paths: ``offline_graph.rllib.evaluation.X``
for a name of the module before the sub-packages still gives it, with a ``DeprecationWarning``.
"""

from offline_graph.moved import forward_from as _forward_from

__getattr__ = _forward_from(
    "offline_graph.rllib.evaluation", ("offline_graph.rllib.evaluation.evaluate",), globals()
)
