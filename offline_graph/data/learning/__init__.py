"""What the learner is fed: transitions (:mod:`~offline_graph.data.learning.transitions`), the
transition buffer (:mod:`~offline_graph.data.learning.buffer`, its ring of graph columns
:mod:`~offline_graph.data.learning.arena`), returns
(:mod:`~offline_graph.data.learning.returns`), runs of steps for memory modules
(:mod:`~offline_graph.data.learning.sequences`), value runs for IQL / CQL
(:mod:`~offline_graph.data.learning.value_runs`) and reward scaling
(:mod:`~offline_graph.data.learning.reward_scale`)."""
