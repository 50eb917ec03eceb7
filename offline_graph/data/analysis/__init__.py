"""Reading a data set rather than training on it: ``inspect``'s statistics
(:mod:`~offline_graph.data.analysis.stats`, :mod:`~offline_graph.data.analysis.ma_stats`) and the
off-policy estimators (:mod:`~offline_graph.data.analysis.ope`)."""
