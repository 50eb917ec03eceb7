"""`offline-graph experiment --task graph|team|stitch`: the one runner end to end (table, JSON
and PNG) on the single-agent and the Team-v0 trainers, each task's declared settings and
targets, the command line and its old names.

The end-to-end runs are tested for running and for their arithmetic, not for scores (the
scores of a 1- or 2-iteration run mean nothing); the stitch task's runs take the single-agent
trainer that the graph run exercises, so it is tested for its declared settings only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib

import pytest

from offline_graph import cli
from offline_graph.cli import experiment
from offline_graph.cli.experiments import TASKS, graph, runs, stitch, task_of, team
from offline_graph.cli.experiments.runner import build_parser
from offline_graph.cli.experiments.spec import Row

MIXED = str(pathlib.Path(__file__).resolve().parents[1] / "sample_data" / "mixed")  # Graph-v0, shipped
SMALL = ["--batch-size", "32", "--hidden", "8", "--layers", "1"]
"""Training sizes that --quick leaves as they are (it sets seeds, data, iterations and
evaluation): small batches and modules. The runs are tested for their plumbing."""


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _check_lines(result: dict, table: str) -> dict[str, float]:
    """Every line of results.md agrees with its runs in results.json; returns the means."""
    cells = {
        c[0] + ("" if len(c) == 8 else f"/{c[3]}"): c
        for c in map(_cells, table.splitlines()[2:])
        if len(c) >= 8
    }
    means = {}
    for line in result["rows"]:
        xs = [r["score"] for r in line["runs"]]
        assert [r["seed"] for r in line["runs"]] == list(range(result["settings"]["seeds"]))
        assert all(r["score"] == r["curve"][-1]["score"] and r["seconds"] > 0 for r in line["runs"])
        mean = sum(xs) / len(xs)
        std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
        c = cells[line["key"]][-5:]
        assert c[:4] == [
            f"{mean:.1f}",
            f"{std:.1f}",
            f"{min(xs):.1f} - {max(xs):.1f}",
            ", ".join(f"{x:.1f}" for x in xs),
        ]
        means[line["key"]] = mean
    assert len(cells) == len(result["rows"])
    return means


def _target_line(t: dict) -> str:
    se = f", standard error {t['se']:.1f}" if "se" in t else ""
    return f"- {t['what']}: {t['value']:+.1f} ({'holds' if t['holds'] else 'FAILS'}{se})"


@pytest.mark.slow
def test_graph_quick_writes_table_json_and_png(ray_session, tmp_path, capsys):
    """Two of the five rows (``--rows``) on given mixed data (``--mixed-data``): a GNN and the
    bag of nodes, one target (the other rows differ only in the algorithm's settings or their
    data, which test_stitch_runs_share_the_value_settings... and the team run exercise; the
    team run also records its data). Over 20 s: two (row, seed) runs, each building an
    algorithm and starting its data pipeline (a prelearner actor), 2 iterations each, scored
    every iteration. It ran three rows and recorded 200 episodes: the team run records, and the
    third row (BC on the given expert data) trained the same single-agent path."""
    out = tmp_path / "exp"
    rows = ["marwil-1", "bag-marwil-1"]
    argv = ["--quick", "--output", str(out), "--num-cpus", "2", "--updates-per-iteration", "2", *SMALL]
    argv += ["--rows", *rows, "--mixed-data", MIXED]
    assert experiment.main(argv) == 0
    printed = capsys.readouterr().out

    result = json.loads((out / "results.json").read_text())
    assert result["task"] == "graph" and result["env"] == "offline_graph/Graph-v0"
    assert [r["key"] for r in result["rows"]] == rows
    for line in result["rows"]:
        assert line["module"] is None and len(line["runs"]) == graph.TASK.quick["seeds"]
        assert [c["iteration"] for c in line["runs"][0]["curve"]] == [1, 2]
    s = result["settings"]
    assert (s["iterations"], s["quick"], s["updates_per_iteration"], s["hidden"]) == (2, True, 2, 8)
    assert result["data"] == {"mixed": MIXED, "mixed_made_by": f"given: {MIXED}"}
    assert result["baselines"]["expert"] > result["baselines"]["random"]

    table = (out / "results.md").read_text()
    assert table in printed
    assert table.startswith("| row | data | algorithm, module | score mean |")
    means = _check_lines(result, table)
    for label in (
        "| mixed | MARWIL beta=1, GNN |",
        "| mixed | MARWIL beta=1, bag of nodes |",
    ):
        assert table.count(label) == 1, label
    gaps = [(t["what"], t["value"]) for t in result["targets"]]
    assert gaps == [  # the targets whose rows ran (marwil-1 - bc, marwil-0 - bc need bc)
        ("marwil-1 - bag-marwil-1: mean >= 20", pytest.approx(means["marwil-1"] - means["bag-marwil-1"])),
    ]
    assert all(_target_line(t) in table for t in result["targets"])

    png = (out / "learning_curves.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    assert result["files"]["png"] == str(out / "learning_curves.png")


@pytest.mark.slow
def test_team_quick_scores_every_module(ray_session, tmp_path, capsys):
    """About 10 s: one (row, seed) run of the team trainer (the old ``ma-experiment`` command,
    its MARWIL row), one module per agent kind, written as the graph run is (the runner's
    plumbing over several rows is the graph run's)."""
    out = tmp_path / "team"
    assert cli.main(["ma-experiment", "--quick", "--output", str(out), "--rows", "marwil-mixed", *SMALL]) == 0
    printed = capsys.readouterr().out

    result = json.loads((out / "results.json").read_text())
    assert result["task"] == "team" and result["settings"]["iterations"] == 1
    assert [(x["row"], x["module"]) for x in result["rows"]] == [("marwil-mixed", m) for m in team.MODULES]
    for line in result["rows"]:
        (run,) = line["runs"]
        assert run["illegal_actions"] >= 0 and run["expert_return"] > run["random_return"]
        assert run["curve"] == [{"iteration": 1, "score": run["score"], "mean_return": run["mean_return"]}]
    runs = [x["runs"][0] for x in result["rows"]]
    assert result["baselines"]["expert"] == pytest.approx(sum(r["expert_return"] for r in runs) / 2)
    assert "--policy mixed --epsilon 0.6 --episodes 30 --seed 1" in result["data"]["mixed_made_by"]
    assert set(result["data"]) == {"mixed", "mixed_made_by"}  # the expert data is not recorded
    assert result["targets"] == []  # no row to compare with

    table = (out / "results.md").read_text()
    assert table in printed and (out / "learning_curves.png").exists()
    assert table.startswith("| row | data | algorithm, module | agent module | score mean |")
    _check_lines(result, table)


def test_team_settings_and_targets_by_hand():
    cfg = team.Config(output="o", gamma=0.9, adv_norm_rate=0.1)
    assert team.settings(cfg, team.ROWS[0]) == {}
    marwil = {"beta": 1.0, "gamma": 0.9, "moving_average_sqd_adv_norm_update_rate": 0.1}
    assert team.settings(cfg, team.ROWS[2]) == marwil
    plans = team.data(cfg)
    assert [(p.policy, p.epsilon, p.seed) for p in plans.values()] == [("expert", 0.0, 0), ("mixed", 0.6, 1)]

    def st(mean: float, std: float = 0.0, n: int = 1) -> dict:
        return {"mean": mean, "min": mean, "std": std, "scores": [mean] * n}

    stats = {
        "bc-expert/color": st(96.0),
        "bc-expert/pick": st(94.0),
        "bc-mixed/color": st(50.0, 3.0, 3),
        "bc-mixed/pick": st(25.0),
        "marwil-mixed/color": st(81.0, 4.0, 3),
        "marwil-mixed/pick": st(30.0),
    }
    got = [(t["what"], t["value"], t["holds"]) for t in team.targets(stats, {})]
    assert got == [
        ("bc-expert/color: mean >= 95", 96.0, True),
        ("bc-expert/pick: mean >= 95", 94.0, False),
        ("marwil-mixed/color - bc-mixed/color: mean >= 10", 31.0, True),
        ("marwil-mixed/pick - bc-mixed/pick: mean >= 10", 5.0, False),
    ]
    assert team.targets(stats, {})[2]["se"] == pytest.approx(math.sqrt(16 / 3 + 9 / 3))


def test_stitch_runs_share_the_value_settings_and_evaluate_in_the_default_config():
    task = task_of("stitch")
    cfg = stitch.Config(output="out", iql_beta=7.0, expectile=0.8, cql_alpha=0.5, tau=0.1)
    iql = runs.train_config(task, cfg, stitch.ROWS[2], "logs", 1)
    assert (iql.algo, iql.beta, iql.expectile, iql.cql_alpha, iql.tau) == ("iql", 7.0, 0.8, None, 0.1)
    assert (iql.seed, iql.env, iql.env_config, iql.checkpoint) == (1, stitch.ENV, {}, "out/runs/iql-s1")
    cql = runs.train_config(task, cfg, stitch.ROWS[6], "expert", 2)
    got = (cql.algo, cql.data, cql.beta, cql.expectile, cql.cql_alpha, cql.tau)
    assert got == ("cql", "expert", None, None, 0.5, 0.1)
    marwil = runs.train_config(task, cfg, stitch.ROWS[1], "logs", 0)
    assert (marwil.algo, marwil.beta, marwil.tau) == ("marwil", 1.0, 0.005)  # train's default tau
    assert [r.label for r in stitch.ROWS[:4]] == ["BC, GNN", "MARWIL beta=1, GNN", "IQL, GNN", "CQL, GNN"]
    assert Row("x", "logs", "iql", beta=3.0).label == "IQL beta=3, GNN"
    logs = stitch.data(cfg)["logs"]
    assert (logs.policy, logs.epsilon, logs.seed, logs.env_config) == (
        "stitch",
        0.15,
        1,
        {"hub_start_prob": 0.5},
    )


def test_stitch_targets_by_hand():
    def st(mean: float, low: float, std: float = 0.0) -> dict:
        return {"mean": mean, "min": low, "std": std, "scores": [mean]}

    stats = {
        "iql": st(90.0, 85.0),
        "cql": st(95.0, 79.5),
        "bc": st(25.0, 20.0),
        "marwil-1": st(30.0, 29.0),
        "bc-expert": st(100.0, 100.0, 2.0),
        "iql-expert": st(96.0, 95.0),
        "cql-expert": st(94.0, 90.0),
    }
    got = [(t["value"], t["holds"]) for t in stitch.targets(stats, {"behaviour": 18.0})]
    assert got == [(85.0, True), (79.5, False), (7.0, True), (12.0, False), (-4.0, True), (-6.0, False)]
    assert stitch.targets(stats, {"behaviour": 18.0})[4]["se"] == pytest.approx(2.0)
    assert stitch.targets({"iql-expert": stats["iql-expert"]}, {}) == []  # no bc-expert row: no control


def test_channel_rows_differ_only_in_the_graph_level_parts_and_targets_by_hand():
    """The graph-only rows train the same algorithm with ``model_config["globals"] = False``
    (``--graph-only``); each target is the gap to the same algorithm on the graph alone."""
    from offline_graph.cli.experiments import channel
    from offline_graph.cli.train_config import algo_config

    task, cfg = task_of("channel"), channel.Config(output="out")
    bc, iql, bc_graph, _ = (runs.train_config(task, cfg, row, "logs", 2) for row in channel.ROWS)
    assert (bc.env, bc.graph_only, bc_graph.graph_only, iql.algo) == (channel.ENV, False, True, "iql")
    assert dataclasses.replace(bc_graph, graph_only=False, checkpoint=bc.checkpoint) == bc
    assert algo_config(bc)[1].get("globals", True) is True
    assert algo_config(bc_graph)[1]["globals"] is False
    assert [r.label for r in channel.ROWS] == [
        "BC, GNN",
        "IQL, GNN",
        "BC, GNN, graph only",
        "IQL, GNN, graph only",
    ]
    logs = channel.data(cfg)["logs"]
    assert (logs.policy, logs.epsilon, logs.episodes, logs.seed) == ("expert", 0.2, 300, 0)

    def st(mean: float, std: float = 0.0) -> dict:
        return {"mean": mean, "min": mean, "std": std, "scores": [mean, mean]}

    stats = {"bc": st(80.0, 2.0), "bc-graph-only": st(10.0, 2.0), "iql": st(35.0), "iql-graph-only": st(10.0)}
    got = [(t["what"], t["value"], t["holds"]) for t in channel.targets(stats, {})]
    assert got == [
        ("bc - bc-graph-only: mean >= 30", 70.0, True),
        ("iql - iql-graph-only: mean >= 30", 25.0, False),
    ]
    assert channel.targets(stats, {})[0]["se"] == pytest.approx(2.0)  # sqrt(4 / 2 + 4 / 2)


def test_command_line_tasks_and_old_names(capsys):
    assert cli.experiment_alias("stitch-experiment", ["--quick"]) == (
        "experiment",
        ["--task", "stitch", "--quick"],
    )
    assert cli.experiment_alias("ma-experiment", []) == ("experiment", ["--task", "team"])
    assert cli.experiment_alias("train", ["--task", "x"]) == ("train", ["--task", "x"])
    assert {"experiment", "ma-experiment", "stitch-experiment"} <= set(cli.COMMANDS)
    name, cfg = experiment.parse_args(["--output", "x", "--task", "stitch", "--quick", "--rows", "iql", "bc"])
    assert (name, cfg.seeds, cfg.iterations, cfg.logs_episodes, cfg.rows) == (
        "stitch",
        1,
        2,
        100,
        ["iql", "bc"],
    )
    assert experiment.parse_args(["--task=stitch", "--output", "x"])[1].hub_start_prob == 0.5
    name, cfg = experiment.parse_args(["--output", "x", "--quick"])
    assert (name, cfg.seeds, cfg.iterations, cfg.eval_every, cfg.mixed_episodes) == ("graph", 1, 2, 1, 200)
    with pytest.raises(SystemExit) as info:
        experiment.parse_args(["--task", "maze", "--output", "x"])
    assert info.value.code == 2
    expected = (
        "--task must be one of ['graph', 'team', 'stitch', 'jobshop', 'channel', 'dispatch'] (found 'maze')"
    )
    assert expected in capsys.readouterr().err


def test_jobshop_task_is_the_one_command_line(capsys):
    """``--task jobshop`` is parsed by the runner from its Config and resolved by the bench's
    steps (the docs' Reproduce line, none, quick); the old ``python -m
    offline_graph.bench.jobshop`` (its options were a second copy) says where it went, exit 2."""
    from offline_graph.bench import jobshop

    line = "--sizes 10x10 15x15 --episodes 60 --extra-features --seeds 0 1 2 --groups all --rules --output r"
    name, cfg = experiment.parse_args(["--task", "jobshop", *line.split()])
    args = jobshop.resolve(cfg)
    assert name == "jobshop" and (args.sizes, args.seeds, args.rules, len(args.groups)) == (
        [(10, 10), (15, 15)], [0, 1, 2], [], 8
    )  # fmt: skip
    assert (args.episodes, args.extra_features, args.output, args.quick) == (60, True, "r", False)
    default = jobshop.resolve(experiment.parse_args(["--task", "jobshop"])[1])
    assert (default.sizes, default.groups, default.algos, default.iterations) == (
        [(10, 10)], ["15x15", "20x15"], ["bc"], 20
    )  # fmt: skip
    quick = jobshop.resolve(experiment.parse_args(["--task", "jobshop", "--quick"])[1])
    assert (quick.sizes, quick.validate) == ([(6, 6)], [(8, 6)])
    assert all(getattr(quick, k) == v for k, v in jobshop.QUICK.items() if k not in ("sizes", "validate"))
    assert jobshop.main(["--quick"]) == 2
    assert capsys.readouterr().err == jobshop.MOVED + "\n"
    assert "offline-graph experiment --task jobshop" in jobshop.MOVED


@pytest.mark.parametrize("name", TASKS)
def test_every_task_has_one_option_per_field_and_help(name):
    task = task_of(name)
    parser = build_parser(task, TASKS)
    actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    assert {a.dest for a in actions} == {f.name for f in dataclasses.fields(task.config)} | {"task"}
    assert all(a.help for a in actions)
    assert {r.data for r in task.rows} <= set(task.data(task.config(output="x")))


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--mixed-epsilon", "1.5"],
            "experiment: --mixed-epsilon must be in [0, 1] (found 1.5). It is the probability",
        ),
        (
            ["--mixed-data", "/does/not/exist"],
            "experiment: --mixed-data must be an existing file or directory",
        ),
        (["--eval-every", "0"], "experiment: --eval-every must be >= 1 (found 0)."),
        (["--lr", "0"], "--lr must be > 0 (found 0.0)."),
        (["--rows", "nope"], "invalid choice: 'nope'"),
        (["--task", "team", "--gamma", "1.5"], "ma-experiment: --gamma must be in [0, 1] (found 1.5)."),
        (["--task", "team", "--seeds", "0"], "ma-experiment: --seeds must be >= 1 (found 0)."),
        (
            ["--task", "stitch", "--logs-epsilon", "1.5"],
            "stitch-experiment: --logs-epsilon must be in [0, 1] (found 1.5).",
        ),
        (["--task", "jobshop", "--sizes", "10"], "jobshop: --sizes must be JxM sizes (found ['10'])."),
        (["--task", "jobshop", "--groups", "7x7"], "jobshop: --groups must be among ['15x15', "),
    ],
)
def test_bad_values_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        experiment.parse_args(["--output", "x", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
