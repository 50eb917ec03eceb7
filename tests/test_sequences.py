"""Runs for memory modules (offline_graph.data.learning.sequences): chunks, context, the run rows and
the learner batch (prev / seq_pos / node_prev / target), each graph once. Hand-computed."""

from __future__ import annotations

import numpy as np

from offline_graph.data.learning.sequences import collate_runs, runs_to_arrow, sample_runs, segment_starts
from tests.helpers import FixedRows, two_episode_transitions


def test_segments_and_chunks_stop_at_episode_boundaries() -> None:
    trans = two_episode_transitions()
    assert segment_starts(trans).tolist() == [0, 0, 0, 0, 0, 5, 5, 5]
    ctx0, start, stop = sample_runs(trans, FixedRows(), 4, length=2, context=1)  # type: ignore[arg-type]
    # row 3 -> chunk [2, 4) with context row 1; row 1 -> chunk [0, 2), no context (episode start);
    # row 7 (B, t=2) -> chunk [7, 8) (the episode ends) with context row 6; row 4 -> [4, 5) ctx 3
    assert ctx0.tolist() == [1, 0, 6, 3]
    assert start.tolist() == [2, 0, 7, 4]
    assert stop.tolist() == [4, 2, 8, 5]


def test_run_rows_collate_to_each_graph_once_with_links() -> None:
    trans = two_episode_transitions()
    table = runs_to_arrow(trans, np.array([1, 6]), np.array([2, 7]), np.array([5, 8]))
    assert table.column("context").to_pylist() == [1, 1]
    assert table.column("actions").to_pylist() == [[1, 2, 3, 4], [1, 2]]
    batch = collate_runs(table)
    obs = batch["obs"]
    # 6 distinct graphs: A t=1..4 and B t=1..2, in run order
    assert obs["ptr"].tolist() == [0, 3, 6, 10, 14, 16, 18]
    assert obs["x"][obs["ptr"][:-1], 0].tolist() == [11, 12, 13, 14, 21, 22]
    assert obs["prev"].tolist() == [-1, 0, 1, 2, -1, 4]
    assert obs["seq_pos"].tolist() == [0, 1, 2, 3, 0, 1]
    assert obs["target"].tolist() == [1, 2, 3, 5]  # context graphs 0 and 4 carry no loss
    assert batch["actions"].tolist() == [2, 3, 4, 2]
    # returns-to-go with gamma 1: A t=2..4 -> 3, 2, 1; B t=2 -> 1
    assert batch["value_targets"].tolist() == [3.0, 2.0, 1.0, 1.0]
    # node_prev: graph 1 (3 nodes) -> graph 0's rows 0..2; graph 2 (4 nodes) follows a 3-node
    # graph -> -1; graph 3 (4 nodes) -> graph 2's rows 6..9; run starts -> -1
    assert obs["node_prev"].tolist() == [-1, -1, -1, 0, 1, 2, -1, -1, -1, -1, 6, 7, 8, 9, -1, -1, 14, 15]
    # edges stay local to their graph after the union: graph 3's edges start at node 10
    assert obs["edge_index"][:, 7].tolist() == [10, 11]
