"""`offline-graph ma-experiment --quick`: runs end to end; the table agrees with results.json.

Tested for running and for its arithmetic, not for scores (a 2-iteration run means nothing).
"""

from __future__ import annotations

import json
import math

import pytest

from offline_graph.cli import ma_experiment

pytestmark = pytest.mark.slow

import ray  # noqa: F401,E402


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


SMALL = ["--batch-size", "32", "--hidden", "8", "--layers", "1"]
"""Training sizes that --quick leaves as they are (it sets seeds, data, iterations and
evaluation): small batches and modules. The run is tested for its plumbing, not for scores."""


def test_quick_writes_table_and_json(ray_session, tmp_path, capsys):
    """Over 20 s on a busy machine: three (row, seed) runs, each building an algorithm whose
    first ``train()`` starts a prelearner actor (~4 s of CPU, mostly imports)."""
    out = tmp_path / "mae"
    assert ma_experiment.main(["--quick", "--output", str(out), *SMALL]) == 0
    printed = capsys.readouterr().out

    result = json.loads((out / "results.json").read_text())
    keys = [r.key for r in ma_experiment.ROWS]
    assert result["settings"]["quick"] is True and result["settings"]["iterations"] == 1
    assert (result["settings"]["batch_size"], result["settings"]["hidden"]) == (32, 8)
    assert sorted((r["row"], r["seed"]) for r in result["runs"]) == sorted(
        (k, s) for k in keys for s in range(ma_experiment.QUICK["seeds"])
    )
    for run in result["runs"]:
        assert set(run["modules"]) == {"color", "pick"} and run["seconds"] > 0
        for entry in run["modules"].values():
            assert set(entry) == set(ma_experiment.RESULT_KEYS)
            assert entry["illegal_actions"] >= 0 and entry["expert_return"] > entry["random_return"]
    assert "--policy mixed --epsilon 0.6 --episodes 30 --seed 1" in result["data"]["mixed_made_by"]

    table = (out / "results.md").read_text()
    assert table in printed
    lines = {(c[0], c[3]): c for c in map(_cells, table.splitlines()) if len(c) == 9}
    means = {}
    for key in keys:
        for module in ("color", "pick"):
            xs = [r["modules"][module]["normalized"] for r in result["runs"] if r["row"] == key]
            n = len(xs)
            mean = sum(xs) / n
            std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
            means[key, module] = mean
            cells = lines[key, module]
            assert cells[4] == f"{mean:.1f}" and cells[5] == f"{std:.1f}", cells
            assert cells[6] == f"{min(xs):.1f} - {max(xs):.1f}"
            assert cells[7] == ", ".join(f"{x:.1f}" for x in xs)

    def met(v: float, target: float) -> str:
        return "met" if v >= target else "not met"

    expert = "; ".join(
        f"{m} {means['bc-expert', m]:+.1f} {met(means['bc-expert', m], 95)}" for m in ("color", "pick")
    )
    assert f"- BC expert >= 95 per module: {expert}" in table
    diff = {m: means["marwil-mixed", m] - means["bc-mixed", m] for m in ("color", "pick")}
    gap = "; ".join(f"{m} {d:+.1f} {met(d, 10)}" for m, d in diff.items())
    assert f"- MARWIL - BC on mixed >= 10 per module: {gap}" in table


def test_bad_args_exit_2():
    for argv in (
        ["--output", "x", "--seeds", "0"],
        ["--output", "x", "--gamma", "1.5"],
        ["--output", "x", "--rows", "y"],
    ):
        with pytest.raises(SystemExit) as exc:
            ma_experiment.parse_args(argv)
        assert exc.value.code == 2


def test_command_is_dispatched():
    from offline_graph import cli

    assert "ma-experiment" in cli.COMMANDS and cli.MODULES["ma-experiment"] == "ma_experiment"
