"""offline-graph bench bytes: learner-batch bytes per trained transition with stacked frames
and GRU burn-in (offline_graph.bench.case_frames), graphs per transition counted by hand."""

from __future__ import annotations

import re

import numpy as np
import pytest

from offline_graph.bench.case_frames import frame_rows, measure_layouts
from offline_graph.bench.harness import tensor_bytes
from offline_graph.cli.bench import format_table
from offline_graph.data.learning.sequences import collate_runs, runs_to_arrow
from tests.helpers import FixedRows, two_episode_transitions


def test_graphs_per_transition_and_printed_ratios_are_the_measured_ones() -> None:
    trans = two_episode_transitions()
    layouts = measure_layouts(trans, FixedRows(), length=2, trained=6, frames=(2, 4))  # type: ignore[arg-type]
    by = {lay.name: lay for lay in layouts}
    assert list(by) == ["k=1", "k=2", "k=4", "gru"]
    assert all(lay.trained == 6 for lay in layouts)  # the same B in every row
    # k=1: rows 3,1,7,4,3,1 -> 6 graphs.
    # Runs (length 2): call 1 draws 3 runs: row 3 -> chunk [2,4), row 1 -> [0,2), row 7 -> [7,8)
    # (B ends) = 5 trained; call 2 draws 1 run: row 3 -> [2,4), cut to [2,3) -> 6 trained.
    # context 1 (k=2): [1,4) [0,2) [6,8) [1,3) -> 3+2+2+2 = 9 graphs
    # context 3 (k=4) and 2 (gru): [0,4) [0,2) [5,8) [0,3) -> 4+2+3+3 = 12 graphs
    hand = {"k=1": 6, "k=2": 9, "k=4": 12, "gru": 12}
    assert {n: lay.graphs for n, lay in by.items()} == hand
    assert {n: lay.graphs_per_transition for n, lay in by.items()} == {n: g / 6 for n, g in hand.items()}

    # The measured bytes are those of the learner batch of these runs (k=2, by hand).
    table = runs_to_arrow(trans, np.array([1, 0, 6, 1]), np.array([2, 0, 7, 2]), np.array([4, 2, 8, 3]))
    batch = collate_runs(table)
    assert len(batch["actions"]) == 6 and len(batch["obs"]["ptr"]) == 10
    flat = {"actions": batch["actions"], "value_targets": batch["value_targets"], **batch["obs"]}
    assert by["k=2"].bytes == tensor_bytes(flat)

    rows = frame_rows([layouts], length=2)
    text = format_table(rows)
    one = by["k=1"].per_transition
    for n, lay in by.items():
        line = next(ln for ln in text.splitlines() if "learner batch: " in ln and n in ln.split(" | ")[1])
        ratio = re.search(rf"{re.escape(n)} / k=1 = ([0-9.]+)x", line)
        assert ratio is not None, line
        assert ratio.group(1) == f"{lay.per_transition / one:.2f}", line
        assert f"{lay.graphs_per_transition:.3f} graphs per trained transition" in line
        assert "stock RLlib has no graph frame stacking" in line
    row = {r.metric: r for r in rows}
    assert row["learner batch: frame_stack k=4"].ours == [by["k=4"].per_transition]
    naive = row["learner batch: naive stacked k=4 (computed)"]
    assert naive.ours == [pytest.approx(4 * one)] and "computed, not measured" in naive.baseline
