"""`offline-graph experiment --quick`: runs end to end and writes the table, JSON and PNG.

Tested for running, not for scores (the scores of a 2-iteration run mean nothing).
"""

from __future__ import annotations

import json

import pytest

from offline_graph.cli import experiment

pytestmark = pytest.mark.slow

pytest.importorskip("ray")


SMALL = ["--updates-per-iteration", "2", "--batch-size", "32", "--hidden", "8", "--layers", "1"]
"""Training sizes that --quick leaves as they are (it sets seeds, iterations, evaluation and the
mixed data): the fewest updates a local learner takes, small batches and modules. The run is
tested for its plumbing, not for scores."""


def test_quick_writes_table_json_and_png(ray_session, tmp_path, capsys):
    """Over 20 s: five (row, seed) runs, each building an algorithm and starting its data
    pipeline (a prelearner actor), 2 iterations each, scored every iteration."""
    out = tmp_path / "exp"
    assert experiment.main(["--quick", "--output", str(out), "--num-cpus", "2", *SMALL]) == 0
    printed = capsys.readouterr().out

    result = json.loads((out / "results.json").read_text())
    keys = [r.key for r in experiment.ROWS]
    assert [r["key"] for r in result["rows"]] == keys
    for row in result["rows"]:
        assert len(row["runs"]) == experiment.QUICK["seeds"]
        run = row["runs"][0]
        assert [c["iteration"] for c in run["curve"]] == [1, 2]
        assert run["score"] == run["curve"][-1]["score"] and run["seconds"] > 0
        assert row["stats"]["scores"] == [run["score"]]
    assert [(g["a"], g["b"]) for g in result["gaps"]] == [
        ("marwil-1", "bc"),
        ("marwil-0", "bc"),
        ("marwil-1", "bag-marwil-1"),
    ]
    assert result["settings"]["iterations"] == 2 and result["settings"]["quick"] is True
    assert (result["settings"]["updates_per_iteration"], result["settings"]["hidden"]) == (2, 8)
    assert "--policy decoy --epsilon 0.6 --episodes 200" in result["data"]["mixed_made_by"]

    table = (out / "results.md").read_text()
    assert table.startswith("| data | algorithm, module | score mean |")
    for label in (
        "| expert | BC, GNN |",
        "| mixed | BC, GNN |",
        "| mixed | MARWIL beta=1, GNN |",
        "| mixed | MARWIL beta=0, GNN |",
        "| mixed | MARWIL beta=1, bag of nodes |",
    ):
        assert table.count(label) == 1, label
    assert table in printed

    png = (out / "learning_curves.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


def test_bad_args_exit_2():
    for argv in (
        ["--output", "x", "--seeds", "0"],
        ["--output", "x", "--eval-every", "0"],
        ["--output", "x", "--rows", "nope"],
        ["--output", "x", "--lr", "0"],
        ["--output", "x", "--mixed-data", "/does/not/exist"],
    ):
        with pytest.raises(SystemExit) as info:
            experiment.parse_args(argv)
        assert info.value.code == 2


def test_bad_value_message(capsys):
    with pytest.raises(SystemExit):
        experiment.parse_args(["--output", "x", "--mixed-epsilon", "1.5"])
    err = capsys.readouterr().err
    assert "experiment: --mixed-epsilon must be in [0, 1] (found 1.5). It is the probability" in err
