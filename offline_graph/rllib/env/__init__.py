"""Acting in environments with graph observations (RLlib's ``env/``).

- :mod:`~offline_graph.rllib.env.env_runner` / :mod:`~offline_graph.rllib.env.ma_env_runner`:
  ``SingleAgentEnvRunner`` / ``MultiAgentEnvRunner`` subclasses whose episodes hold graphs;
- :mod:`~offline_graph.rllib.env.env_connectors` and :mod:`~offline_graph.rllib.env.env_states`:
  the env-to-module / module-to-env connectors (``ConnectorV2``) and their per-episode state;
- :mod:`~offline_graph.rllib.env.env_to_module` / :mod:`~offline_graph.rllib.env.module_to_env`:
  a single-agent runner's default connector pieces, each pipeline's in one call;
- :mod:`~offline_graph.rllib.env.vector_env`: the vector env of graph observations;
- :mod:`~offline_graph.rllib.env.env_setup`: ``config.env_runners`` / ``config.evaluation``
  set-up and the spaces read from an env.

Stands on :mod:`offline_graph.rllib.core`.
"""
