"""Graphs and their spaces: the graph dict and its checks (:mod:`~offline_graph.data.graphs.graph`),
the flat Arrow columns of a batch of graphs (:mod:`~offline_graph.data.graphs.columns`,
:mod:`~offline_graph.data.graphs.graph_arrow`), PyG-style collate without padding
(:mod:`~offline_graph.data.graphs.collate`), the ``NodeAction`` / ``EdgeAction`` spaces
(:mod:`~offline_graph.data.graphs.spaces`) and the space text form
(:mod:`~offline_graph.data.graphs.space_text`)."""
