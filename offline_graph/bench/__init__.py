"""Benchmarks of the graph data path against RLlib's stock (padded) path.

Data: ``offline_graph.bench.synthetic`` generates the graph episodes,
``offline_graph.bench.stock_data`` their padded / CartPole copies for the stock path, and
``offline_graph.bench.data`` writes and reads the data sets on disk. Cases:
``offline_graph.bench.harness`` holds the rows, the run's context and the timing helpers,
``offline_graph.bench.case_*`` one module per concern, ``offline_graph.bench.cases`` the
registry ``offline-graph bench`` runs.
"""
