"""Bench case ``league``: the row structure and ratios come from the measured numbers.

Quick variant: prelearner measurements only (4 subprocesses, 2 vs 4 modules); the learner
rows go through the same :func:`league_table` and are covered by ``offline-graph bench league``.
"""

from __future__ import annotations

import pytest

from offline_graph.bench.case_league import (
    TRAINED,
    format_league,
    league_table,
    module_names,
    record_league_data,
    run_league,
)
from offline_graph.bench.cases import CASES


def test_module_names() -> None:
    assert module_names(2) == ["color", "pick"]
    assert module_names(5) == ["color", "pick", "color_old_2", "pick_old_3", "color_old_4"]
    assert "league" in CASES


def test_league_prelearner_quick(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Four measured worker processes, two at a time, each ~5 s of CPU, nearly all imports
    (torch, RLlib, torch_geometric, which imports torch._dynamo); a measurement needs a process
    of its own (its peak RSS). The module states are written by this process (it was two more
    worker processes)."""
    data_dir = str(tmp_path / "league")
    record_league_data(data_dir, 16)
    sizes = (2, 4)
    res = run_league(data_dir, sizes, 64, calls=2, per_call=8, roles=("prelearner",))
    assert set(res) == {("prelearner", w, n) for w in ("ours", "stock") for n in sizes}
    table = league_table(res, sizes)
    assert [(t["role"], t["who"]) for t in table] == [("prelearner", "ours"), ("prelearner", "stock")]
    for t in table:
        lo, hi = res[(t["role"], t["who"], 2)], res[(t["role"], t["who"], 4)]
        assert t["rss_lo"] == lo["peak_mb"] and t["rss_hi"] == hi["peak_mb"]
        assert t["ratio"] == pytest.approx(hi["peak_mb"] / lo["peak_mb"])
        assert lo["peak_mb"] >= lo["baseline_mb"] > 0
    ours, stock = table
    # Hand counts: ours builds no module; stock builds every module of the spec.
    assert (ours["modules_lo"], ours["modules_hi"]) == (0, 0)
    assert (stock["modules_lo"], stock["modules_hi"]) == (2, 4)
    params = res[("prelearner", "ours", 4)]["params"]
    assert sorted(params) == sorted(module_names(4))
    # Frozen opponents have their kind's architecture: same parameter count.
    assert params["color_old_2"] == params["color"] and params["pick_old_3"] == params["pick"]
    # float32 weights: 4 bytes per parameter, over all modules.
    assert res[("prelearner", "ours", 4)]["weight_bytes"] == 4 * sum(params.values())
    assert res[("prelearner", "ours", 2)]["weight_bytes"] == 4 * sum(params[m] for m in TRAINED)
    assert res[("prelearner", "ours", 4)]["calls"] == 2
    assert res[("prelearner", "ours", 4)]["rows"] > 0
    text = format_league(table, sizes, params)
    assert "prelearner ours" in text and "prelearner stock" in text
    assert f"{hi_ratio(table, 'stock'):.3f}x" in text


def hi_ratio(table: list[dict], who: str) -> float:
    return next(t["ratio"] for t in table if t["who"] == who)
