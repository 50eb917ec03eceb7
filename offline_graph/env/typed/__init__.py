"""Tasks whose observations are typed graphs (:class:`~offline_graph.data.graphs.typed.TypedGraph`):
:mod:`~offline_graph.env.typed.dispatch` (``"offline_graph/Dispatch-v0"``)."""
