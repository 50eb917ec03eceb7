"""RLlib integration: RLModules over PyG-batched graph observations (e.g. ``gnn_module.GNNModule``).

Nothing heavy is imported here; import the submodules directly.
"""
