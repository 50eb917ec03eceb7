"""Recorded episodes: the msgpack episode codec (:mod:`~offline_graph.data.episodes.codec`,
:mod:`~offline_graph.data.episodes.fast_episode`), their validation against the spaces
(:mod:`~offline_graph.data.episodes.validation`, :mod:`~offline_graph.data.episodes.action_checks`,
:mod:`~offline_graph.data.episodes.row_checks`, :mod:`~offline_graph.data.episodes.spec`), the
skip / raise reader (:mod:`~offline_graph.data.episodes.reader`), multi-agent rows
(:mod:`~offline_graph.data.episodes.multi_agent`), the held-out split
(:mod:`~offline_graph.data.episodes.holdout`) and whole logged episodes for OPE
(:mod:`~offline_graph.data.episodes.logged`)."""
