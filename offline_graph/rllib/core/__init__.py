"""What every other piece stands on: the graph RLModule and its parts (RLlib's ``core/rl_module``).

- :mod:`~offline_graph.rllib.core.gnn_module`: :class:`GNNModule`, a ``TorchRLModule`` over
  PyG-batched graph observations (graph-, node- and edge-level actions, value heads);
  :mod:`~offline_graph.rllib.core.model_options` its ``model_config`` keys.
- Its parts: :mod:`~offline_graph.rllib.core.gnn_layers` (message passing, pooling),
  :mod:`~offline_graph.rllib.core.selection` (masked distributions over nodes / edges),
  :mod:`~offline_graph.rllib.core.critic` (Q and value heads),
  :mod:`~offline_graph.rllib.core.memory` (memory over time) and
  :mod:`~offline_graph.rllib.core.stepwise` (acting step by step with that memory).
- :mod:`~offline_graph.rllib.core.settings` (:class:`GraphSettings`, the graph part of an
  ``AlgorithmConfig``), :mod:`~offline_graph.rllib.core.graph_minibatch` (RLlib's
  ``utils/minibatch_utils`` for graph batches), :mod:`~offline_graph.rllib.core.ray_session` and
  :mod:`~offline_graph.rllib.core.heap` (a learner process keeps the memory it frees).

Imports nothing else of :mod:`offline_graph.rllib`.
"""
