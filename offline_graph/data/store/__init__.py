"""Where the files are: local paths and URIs (:mod:`~offline_graph.data.store.storage`), the
listed and checked episode files (:mod:`~offline_graph.data.store.files`) and the on-disk format
and its metadata (:mod:`~offline_graph.data.store.format`)."""
