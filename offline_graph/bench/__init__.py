"""Benchmarks of the graph data path against RLlib's stock (padded) path.

``offline_graph.bench.data`` generates the synthetic data sets (ours and the stock baselines'),
``offline_graph.bench.cases`` holds one function per case; ``offline-graph bench`` runs them.
"""
