"""The table of ``offline-graph experiment``: per-row statistics, the gaps the issue asks
for, the Markdown table and the learning-curve PNG (see :mod:`offline_graph.cli.experiment`)."""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

import numpy as np

from offline_graph.cli.train_report import json_default, versions


def row_stats(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean, std (ddof 1), min, max of the final scores of one row's runs, and seconds/run."""
    scores = np.array([r["score"] for r in runs], dtype=float)
    return {
        "mean": float(scores.mean()),
        "std": float(scores.std(ddof=1)) if len(scores) > 1 else 0.0,
        "min": float(scores.min()),
        "max": float(scores.max()),
        "scores": [float(s) for s in scores],
        "seconds_per_run": float(np.mean([r["seconds"] for r in runs])),
    }


def gaps(stats: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The comparisons the issue asks for, with the standard error of the difference."""
    pairs = (
        ("marwil-1", "bc", ">= 10"),
        ("marwil-0", "bc", "within noise"),
        ("marwil-1", "bag-marwil-1", ">= 20"),
    )
    out = []
    for a, b, target in pairs:
        if a in stats and b in stats:
            sa, sb = stats[a], stats[b]
            se = float(np.sqrt(sa["std"] ** 2 / len(sa["scores"]) + sb["std"] ** 2 / len(sb["scores"])))
            out.append({"a": a, "b": b, "diff": sa["mean"] - sb["mean"], "se": se, "target": target})
    return out


def score_table(rows: list[dict[str, Any]]) -> list[str]:
    """The Markdown table of the rows of results.json: one line per row, scores per seed."""
    lines = [
        "| data | algorithm, module | score mean | std | min - max | per seed | s / run |",
        "|------|-------------------|-----------:|----:|----------:|----------|--------:|",
    ]
    for row in rows:
        st = row["stats"]
        seeds = ", ".join(f"{v:.1f}" for v in st["scores"])
        lines.append(
            f"| {row['data']} | {row['label']} | {st['mean']:.1f} | {st['std']:.1f} | "
            f"{st['min']:.1f} - {st['max']:.1f} | {seeds} | {st['seconds_per_run']:.0f} |"
        )
    return lines


def markdown(result: dict[str, Any]) -> str:
    """results.md: the table, the gaps and a line of settings."""
    s = result["settings"]
    lines = [*score_table(result["rows"]), ""]
    for g in result["gaps"]:
        lines.append(
            f"- {g['a']} - {g['b']}: {g['diff']:+.1f} (standard error {g['se']:.1f}; target {g['target']})"
        )
    lines.append(
        f"\nSeeds 0..{s['seeds'] - 1}, {s['iterations']} iterations x {s['updates_per_iteration']} "
        f"updates x {s['batch_size']} transitions, lr {s['lr']:g}, hidden {s['hidden']}, "
        f"layers {s['layers']}; {s['eval_episodes']} evaluation episodes (seed {s['eval_seed']}): "
        f"expert return {result['baselines']['expert']:.2f}, random "
        f"{result['baselines']['random']:.2f}. Mixed data: {result['data']['mixed_made_by']}. "
        f"Wall time {result['wall_seconds'] / 60:.1f} min."
    )
    return "\n".join(lines) + "\n"


def save_curves(path: str, result: dict[str, Any]) -> None:
    """Score vs iteration: mean over seeds, min-max band; one panel per data set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys(r["data"] for r in result["rows"]))  # the data sets, in row order
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, data in zip(axes[0], panels):
        for row in (r for r in result["rows"] if r["data"] == data):
            its = np.array([c["iteration"] for c in row["runs"][0]["curve"]])
            sc = np.array([[c["score"] for c in run["curve"]] for run in row["runs"]])
            (line,) = ax.plot(its, sc.mean(0), marker="o", ms=3, label=row["label"])
            ax.fill_between(its, sc.min(0), sc.max(0), color=line.get_color(), alpha=0.2)
        ax.axhline(100, color="grey", lw=0.8, ls="--")
        ax.axhline(0, color="grey", lw=0.8, ls=":")
        ax.set(
            xlabel="iteration",
            ylabel="normalized score (0 random, 100 expert)",
            title=f"{data} data: {result['data'][data]}",
        )
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(f"mean over {result['settings']['seeds']} seed(s), band = min-max", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_results(
    output: str,
    result: dict[str, Any],
    t0: float,
    table_of: Callable[[dict[str, Any]], str],
    curves: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Add the run's ``wall_seconds`` (since ``t0``) and the package ``versions`` to ``result``,
    write it to ``output``/results.json and its table (``table_of``) to results.md, and
    ``curves`` to learning_curves.png if given; print the table and the paths."""
    result["wall_seconds"] = time.perf_counter() - t0
    result["versions"] = versions()
    names = [("json", "results.json"), ("md", "results.md")]
    if curves is not None:
        names.append(("png", "learning_curves.png"))
    paths = {k: os.path.join(output, n) for k, n in names}
    result["files"] = paths
    if curves is not None:
        curves(paths["png"], result)
    table = table_of(result)
    with open(paths["md"], "w") as f:
        f.write(table)
    with open(paths["json"], "w") as f:
        json.dump(result, f, indent=2, default=json_default)
    print("\n" + table + "\n" + "\n".join(f"{k}: {v}" for k, v in paths.items()))
    return result
