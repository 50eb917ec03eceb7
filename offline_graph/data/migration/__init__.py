"""Data from before offline_graph: RLlib ``Repeated`` (padded) rows unpadded
(:mod:`~offline_graph.data.migration.migrate`) and episodes rebuilt from rows
(:mod:`~offline_graph.data.migration.migrate_episodes`)."""
