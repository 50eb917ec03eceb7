"""``offline-graph stitch-experiment``: its runs' settings, the issue's targets, the command
line. The table itself is a long run (docs/guides/value-based.md has its numbers); the same
machinery (record, train_rows, write_results) runs end to end in tests/test_experiment.py."""

from __future__ import annotations

import pytest

from offline_graph import cli
from offline_graph.cli import stitch_experiment as se
from offline_graph.cli.experiment_run import Row


def test_runs_share_the_value_settings_and_evaluate_in_the_default_config():
    cfg = se.Config(output="out", iql_beta=7.0, expectile=0.8, cql_alpha=0.5, tau=0.1)
    iql = se.train_config(cfg, se.ROWS[2], "logs", 1)
    assert (iql.algo, iql.beta, iql.expectile, iql.cql_alpha, iql.tau) == ("iql", 7.0, 0.8, None, 0.1)
    assert (iql.seed, iql.env, iql.env_config, iql.checkpoint) == (1, se.ENV, {}, "out/runs/iql-s1")
    cql = se.train_config(cfg, se.ROWS[6], "expert", 2)
    assert (cql.algo, cql.data, cql.beta, cql.expectile, cql.cql_alpha, cql.tau) == (
        "cql",
        "expert",
        None,
        None,
        0.5,
        0.1,
    )
    marwil = se.train_config(cfg, se.ROWS[1], "logs", 0)
    assert (marwil.algo, marwil.beta, marwil.tau) == ("marwil", 1.0, 0.005)  # train's default tau
    assert [r.label for r in se.ROWS[:4]] == ["BC, GNN", "MARWIL beta=1, GNN", "IQL, GNN", "CQL, GNN"]
    assert Row("x", "logs", "iql", beta=3.0).label == "IQL beta=3, GNN"


def test_targets_by_hand():
    stats = {
        "iql": {"min": 85.0, "mean": 90.0},
        "cql": {"min": 79.5, "mean": 95.0},
        "bc": {"min": 20.0, "mean": 25.0},
        "marwil-1": {"min": 29.0, "mean": 30.0},
        "bc-expert": {"min": 100.0, "mean": 100.0},
        "iql-expert": {"min": 95.0, "mean": 96.0},
        "cql-expert": {"min": 90.0, "mean": 94.0},
    }
    got = [(t["value"], t["holds"]) for t in se.targets(stats, 18.0)]
    assert got == [
        (85.0, True),
        (79.5, False),
        (7.0, True),
        (12.0, False),
        (-4.0, True),
        (-6.0, False),
    ]
    assert se.targets({"iql-expert": stats["iql-expert"]}, 18.0) == []  # no bc-expert row: no control


def test_command_line():
    assert cli.MODULES["stitch-experiment"] == "stitch_experiment" and "stitch-experiment" in cli.COMMANDS
    cfg = se.parse_args(["--output", "x", "--quick", "--rows", "iql", "bc"])
    assert (cfg.seeds, cfg.iterations, cfg.logs_episodes, cfg.rows) == (1, 2, 100, ["iql", "bc"])
    assert se.parse_args(["--output", "x"]).hub_start_prob == 0.5


def test_bad_value_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        se.parse_args(["--output", "x", "--logs-epsilon", "1.5"])
    assert info.value.code == 2
    assert "stitch-experiment: --logs-epsilon must be in [0, 1] (found 1.5)." in capsys.readouterr().err


def test_experiment_task_stitch_is_the_stitch_experiment(capsys):
    from offline_graph.cli import experiment_task

    assert experiment_task("experiment", ["--task", "stitch", "--quick"]) == (
        "stitch-experiment",
        ["--quick"],
    )
    assert experiment_task("experiment", ["--output", "o", "--task=graph"]) == (
        "experiment",
        ["--output", "o"],
    )
    assert experiment_task("experiment", ["--quick"]) == ("experiment", ["--quick"])
    assert experiment_task("train", ["--task", "stitch"]) == ("train", ["--task", "stitch"])
    with pytest.raises(SystemExit) as info:
        experiment_task("experiment", ["--task", "maze"])
    assert info.value.code == 2
    assert "--task must be one of ['graph', 'stitch'] (found 'maze')" in capsys.readouterr().err
