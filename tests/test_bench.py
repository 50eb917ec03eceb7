"""offline-graph bench: the quick table of the cheap cases, the stock data, and no padding."""

import contextlib
import io
import json
import re
from statistics import median

import numpy as np
import pyarrow as pa
import pytest

from offline_graph.bench.case_bytes import learner_batch_breakdown
from offline_graph.bench.data import BenchData, read_items
from offline_graph.bench.harness import BenchContext, item_batch
from offline_graph.bench.stock_data import pad_graphs
from offline_graph.bench.synthetic import DataConfig, generate, payload_bytes, size_summary
from offline_graph.cli import bench

CHEAP_ROWS = {
    ("prelearner", "episodes -> learner rows (graphs)"),
    ("prelearner", "episodes -> learner rows vs CartPole"),
    ("prelearner", "ours, 64 episodes per call"),
    ("collate", "collate(GraphColumns) B=256"),
    ("collate", "table_to_batch(Arrow) B=256"),
    ("collate", "collate(GraphColumns) B=1024"),
    ("collate", "table_to_batch(Arrow) B=1024"),
}


def parse_table(text):
    """Rows of the printed table as dicts keyed by the header's column names."""
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("case ") and " | " in ln)
    names = [c.strip() for c in lines[head].split(" | ")]
    rows = []
    for ln in lines[head + 2 :]:
        if " | " not in ln:
            break
        cells = [c.strip() for c in ln.split(" | ")]
        cells += [""] * (len(names) - len(cells))
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def test_quick_table_of_cheap_cases(tmp_path):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    printed = io.StringIO()  # not capsys: Ray's log handler would keep its closed stream
    with contextlib.redirect_stdout(printed):
        rc = bench.main(
            [
                "collate",
                "prelearner",
                "--quick",
                "--repeats",
                "1",
                "--transitions",
                "4000",
                "--stock-transitions",
                "600",
                "--workdir",
                str(tmp_path / "data"),
                "--json",
                str(out_json),
                "--plot",
                str(out_png),
            ]
        )
    assert rc == 0
    text = printed.getvalue()
    rows = parse_table(text)
    assert {(r["case"], r["metric"]) for r in rows} == CHEAP_ROWS
    saved = json.loads(out_json.read_text())
    assert len(saved["rows"]) == len(CHEAP_ROWS)
    assert all(r["ratio"] > 0 for r in saved["rows"])
    assert out_png.stat().st_size > 0

    # Every printed ratio is the row's own numbers: ours median / stock median (all these rows
    # are throughputs, higher is better), and the printed medians are the saved values.
    by_key = {(r["case"], r["metric"]): r for r in saved["rows"]}
    for r in rows:
        assert float(r["ours med"].replace(",", "")) > 0, r
        row = by_key[(r["case"], r["metric"])]
        assert not row["lower_is_better"] and len(row["ours"]) == len(row["base"]) == 1, row
        ours, base = median(row["ours"]), median(row["base"])
        assert float(r["ours med"].replace(",", "")) == pytest.approx(ours, rel=6e-3), r
        assert float(r["base med"].replace(",", "")) == pytest.approx(base, rel=6e-3), r
        assert r["ratio"] == f"{ours / base:.2f}x", r
        assert row["ratio"] == pytest.approx(ours / base, rel=1e-12), row

    # The counts reported for the data are those of the generated episodes, counted here by hand.
    eps = generate(DataConfig(transitions=4000))
    lengths = [int(n) for n in eps.lengths]
    stock = 0  # the stock copies: the first whole episodes holding >= 600 transitions
    for n_steps in lengths:
        if stock >= 600:
            break
        stock += n_steps
    payload, g = [], 0
    for n_steps in lengths:
        for step in range(n_steps):  # each episode's last observation starts no transition
            graph = eps.obs.graph(g + step)
            n, e = graph["x"].shape[0], graph["edge_index"].shape[1]
            payload.append(n * 16 * 4 + e * 2 * 8 + e * 2 * 4)  # x f32, edge_index i64, attr f32
        g += n_steps + 1
    assert sum(lengths) >= 4000 and sum(lengths) - lengths[-1] < 4000
    assert saved["data"]["transitions_actual"] == sum(lengths) == len(payload)
    assert saved["data"]["stock_transitions_actual"] == stock
    assert saved["data"]["payload_bytes"] == pytest.approx(np.mean(payload), rel=1e-12)
    data_line = next(ln for ln in text.splitlines() if ln.startswith("data: "))
    assert data_line.startswith(f"data: {sum(lengths)} transitions in {len(lengths)} episodes;")
    assert f"real payload {np.mean(payload):.0f} B/transition; stock copies {stock} transitions;" in data_line
    per = max(1, round(256 / np.mean(lengths)))  # episodes per stock call: ~B transitions
    for r in rows:
        if r["case"] == "prelearner":
            assert re.search(
                rf"\b{per} episodes(?: \(~{per * np.mean(lengths):.0f} transitions\))? per call",
                r["baseline; notes"],
            ), r


def test_data_is_long_tailed_and_padding_round_trips():
    cfg = DataConfig(transitions=20_000, seed=2)
    eps = generate(cfg)
    sizes = size_summary(eps)
    assert 23 <= sizes["mean"] <= 27 and 100 <= sizes["p99"] <= 140 and sizes["max"] == 512
    assert sizes["edges_per_node"] == 4.0
    graphs = eps.obs.slice(0, 40)
    padded = pad_graphs(graphs, cfg)
    assert padded.shape == (40, cfg.padded_width) and padded.dtype == np.float32
    for g in (0, 17, 39):
        ref, row = graphs.graph(g), padded[g]
        n, e = int(row[0]), int(row[1])
        o = 2
        np.testing.assert_array_equal(row[o : o + n * 16].reshape(n, 16), ref["x"])
        assert not row[o + n * 16 : o + cfg.n_max * 16].any()
        o += cfg.n_max * 16
        np.testing.assert_array_equal(row[o : o + 2 * e].reshape(e, 2).T, ref["edge_index"])
        o += cfg.e_max * 2
        np.testing.assert_array_equal(row[o : o + 2 * e].reshape(e, 2), ref["edge_attr"])


def test_learner_batch_holds_the_real_payload_and_no_padding(tmp_path):
    cfg = DataConfig(transitions=3_000, seed=3, episodes_per_file=40)
    data = BenchData(str(tmp_path), cfg, stock_transitions=0)
    eps = data.episodes
    assert size_summary(eps)["max"] == 512  # long tail up to N_max, mean ~25
    # The true (N, E) of every transition's graph, keyed by its first node's features.
    truth = {}
    for g in eps.transition_index():
        gr = eps.obs.graph(int(g))
        truth[gr["x"][0].tobytes()] = (len(gr["x"]), gr["edge_index"].shape[1])
    pre = BenchContext(data=data, batch_size=128).ours_prelearner(data.episode_dir)
    items = read_items(data.episode_dir)
    table = pa.concat_tables([pre(item_batch(items[i : i + 8])) for i in range(0, len(items), 8)])
    num = table.num_rows
    assert num > 0 and num % 128 == 0
    x = table.column("x").combine_chunks()
    starts = x.offsets.to_numpy()[:-1]
    first_rows = x.flatten().flatten().to_numpy().reshape(-1, 16)
    sampled = np.array([truth[first_rows[s].tobytes()] for s in starts])
    n, e = sampled[:, 0], sampled[:, 1]
    assert n.max() > 100 and np.median(n) < 30  # the sample is long-tailed too
    payload = int(payload_bytes(n, e, cfg).sum())

    parts = learner_batch_breakdown(table)
    batch_ptr = int(n.sum()) * 8 + (num + 1) * 8  # batch: sumN int64, ptr: B+1 int64
    scalars = num * 8 + num * 4  # actions int64, value_targets float32
    assert parts["payload"] == payload
    assert parts["batch_ptr"] == batch_ptr
    assert parts["scalars"] == scalars
    assert parts["total"] == payload + batch_ptr + scalars
    assert parts["total"] - parts["batch_ptr"] <= 1.05 * payload
    print(
        f"learner batch: payload {payload / num:.0f} B/transition, batch+ptr "
        f"{batch_ptr / num:.0f} B/transition ({batch_ptr / payload:.3f}x payload), "
        f"actions+value_targets {scalars / num:.0f} B/transition"
    )


def test_learner_profile_shares_by_hand():
    """The profile split of bench ``learner``: a function's cumulative time, a folder's own
    time summed, the rest as "other"; shares of the wall time (hand-made pstats table)."""
    from types import SimpleNamespace

    from offline_graph.bench.case_learner import profile_shares

    site = "/x/site-packages/ray/rllib/"
    stats = SimpleNamespace(
        stats={  # (file, line, function): (cc, nc, own, cumulative, callers)
            (site + "core/learner/torch/torch_learner.py", 517, "_update"): (1, 1, 0.1, 6.0, {}),
            (site + "core/learner/torch/torch_learner.py", 138, "_uncompiled_update"): (1, 1, 0.2, 5.9, {}),
            (site + "utils/minibatch_utils.py", 217, "__iter__"): (1, 1, 0.1, 1.0, {}),
            (site + "utils/metrics/metrics_logger.py", 10, "log_value"): (1, 1, 0.3, 0.4, {}),
            (site + "utils/metrics/stats/base.py", 20, "push"): (1, 1, 0.2, 0.2, {}),
        }
    )
    shares = profile_shares(stats, wall=10.0)
    assert list(shares.values()) == pytest.approx([60.0, 10.0, 5.0, 25.0])
    assert list(shares)[-1].startswith("other")
