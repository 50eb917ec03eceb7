"""Reading recorded graph episodes into training batches (RLlib's ``offline/``).

- :mod:`~offline_graph.rllib.offline.prelearner`: :class:`GraphOfflinePreLearner`, the
  ``OfflinePreLearner`` subclass; :mod:`~offline_graph.rllib.offline.reading` its reading
  strategies (episodes, rows, multi-agent joint rows, memory runs, value targets);
- :mod:`~offline_graph.rllib.offline.collate_fn` (PyG batching),
  :mod:`~offline_graph.rllib.offline.connectors` (the learner connector piece),
  :mod:`~offline_graph.rllib.offline.multi_agent` (agents to modules);
- :mod:`~offline_graph.rllib.offline.episodes` / :mod:`~offline_graph.rllib.offline.write`:
  RLlib episodes to and from our Parquet episode files;
- :mod:`~offline_graph.rllib.offline.offline_data` (``OfflineData``),
  :mod:`~offline_graph.rllib.offline.accounting` (what was read, skipped, emitted),
  :mod:`~offline_graph.rllib.offline.checks` (the config checks made before a read) and
  :mod:`~offline_graph.rllib.offline.resources` (the Ray resource plan of the read).

Stands on :mod:`offline_graph.rllib.core` and :mod:`offline_graph.rllib.env`.
"""
