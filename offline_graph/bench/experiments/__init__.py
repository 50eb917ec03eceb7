"""The pieces every experiment shares below the command line (:mod:`.results`): recording its
logged data, the statistics of a line of its table, its results.json and table written the same
way. Used by ``offline-graph experiment``'s one runner (:mod:`offline_graph.cli.experiments`,
which holds the tasks) and by the OPE protocol (:mod:`offline_graph.bench.ope_protocol`)."""
