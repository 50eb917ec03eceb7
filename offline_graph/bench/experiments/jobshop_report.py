"""The job-shop experiment's report (issue 41, :mod:`offline_graph.bench.jobshop`): the table of
gaps per Taillard group (ours as mean / min over seeds, the rules measured in the env, L2D's
published numbers), results files merged into one, and its two figures: the gap per group
(:func:`plot_gaps`) and a Gantt chart of one schedule (:func:`plot_gantt`), written by
:func:`save_plots`.

Gap = mean over a group's instances of (makespan - best known upper bound) / upper bound.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from offline_graph.env.jobshop_instances import TAILLARD_GROUPS, TAILLARD_UPPER_BOUNDS, taillard_instance

PUBLISHED: dict[str, tuple[float, float, float, float, float]] = {
    "15x15": (54.8, 56.7, 47.1, 45.0, 26.0),
    "20x15": (65.2, 60.7, 50.6, 47.7, 30.0),
    "20x20": (64.2, 55.7, 47.6, 42.8, 31.6),
    "30x15": (61.6, 52.6, 45.0, 45.6, 33.0),
    "30x20": (66.0, 63.9, 56.3, 48.2, 33.6),
    "50x15": (51.4, 40.9, 34.8, 30.1, 22.4),
    "50x20": (59.5, 53.9, 41.5, 37.9, 26.5),
    "100x20": (41.0, 32.9, 23.4, 20.2, 13.6),
}
"""Issue 41's table (L2D, NeurIPS 2020, Table 3), in %: :data:`PUBLISHED_COLUMNS`. L2D's rules
ran in L2D's own MDP; its last three entries come from its 30x20 policy."""
PUBLISHED_COLUMNS = ("spt", "mwkr", "fdd_mwkr", "mopnr", "l2d")
GAPS_PNG = "jobshop_gaps.png"
GANTT_PNG = "jobshop_gantt.png"


def summarize(runs: list[dict[str, Any]], groups: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """``{label: {group: {"mean", "min", "seeds"}}}`` of the runs' mean gaps (in %); a run's
    label is its algorithm, ``+x`` with the extra node features."""
    gaps: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        for group in groups:
            if group in run["taillard"]:
                per_algo = gaps.setdefault(run.get("label", run["algo"]), {})
                per_algo.setdefault(group, []).append(100.0 * run["taillard"][group]["mean_gap"])
    return {
        algo: {
            group: {"mean": float(np.mean(v)), "min": float(np.min(v)), "seeds": float(len(v))}
            for group, v in per_group.items()
        }
        for algo, per_group in gaps.items()
    }


def selected(result: dict[str, Any]) -> dict[str, Any] | None:
    """The run chosen without Taillard: the lowest validation score (mean makespan / lower bound
    on held-out generated instances, ``run["validation"]``) among the runs scored on the same
    validation set (sizes and instance count; the set most runs share). ``None``: no run
    was validated."""
    sets: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for i, run in enumerate(result["runs"]):
        if run.get("validation"):
            key = tuple((size, len(c["makespans"])) for size, c in run["validation"]["sizes"].items())
            sets.setdefault(key, []).append(i)
    if not sets:
        return None
    key, indices = max(sets.items(), key=lambda item: len(item[1]))
    best = min(indices, key=lambda i: result["runs"][i]["validation"]["score"])
    run = result["runs"][best]
    return {
        "run": best,
        "label": run.get("label", run["algo"]),
        "seed": run["seed"],
        "score": run["validation"]["score"],
        "sizes": [size for size, _ in key],
        "instances": key[0][1],
        "compared": len(indices),
        "taillard": {g: 100.0 * c["mean_gap"] for g, c in run["taillard"].items()},
    }


def _selection_line(result: dict[str, Any]) -> str:
    """The sentence under the table that says how the selected column was chosen."""
    sel = result.get("selected")
    if not sel:
        return ""
    rules = result.get("validation", {}).get("rules", {})
    ref = "; the rules: " + ", ".join(f"{r} {v['score']:.3f}" for r, v in rules.items()) if rules else ""
    return (
        f"\nSelected: {sel['label']} seed {sel['seed']}, the lowest of {sel['compared']} runs' mean "
        f"makespan / lower bound on {sel['instances']} held-out generated instances of each of "
        f"{', '.join(sel['sizes'])} ({sel['score']:.3f}{ref}); chosen without Taillard's instances."
    )


def table(result: dict[str, Any]) -> str:
    """Markdown: group | ours (mean / min over seeds, and how many) | the run selected on
    held-out generated instances (:func:`selected`) | rules measured here | L2D."""
    algos = list(result["summary"])
    rules = list(result["rules"])
    sel = result.get("selected")
    head = [f"{a.upper()} mean / min" for a in algos] + [f"{r.upper()} (ours)" for r in rules]
    if sel:
        head.insert(len(algos), f"selected: {sel['label'].upper()} seed {sel['seed']}")
    lines = ["| group | " + " | ".join(head) + " | L2D (published) |", "|---" * (len(head) + 2) + "|"]
    for group in result["groups"]:
        cells = []
        for a in algos:
            c = result["summary"][a].get(group)
            seeds = "" if not c or c["seeds"] == 3 else f" ({c['seeds']:.0f} seed{'s' * (c['seeds'] > 1)})"
            cells.append(f"{c['mean']:.1f}% / {c['min']:.1f}%{seeds}" if c else "-")
        if sel:
            cells.append(f"{sel['taillard'][group]:.1f}%" if group in sel["taillard"] else "-")
        for r in rules:
            g = result["rules"][r].get(group)
            cells.append(f"{100 * g['mean_gap']:.1f}%" if g else "-")
        lines.append(f"| {group} | " + " | ".join(cells) + f" | {PUBLISHED[group][4]:.1f}% |")
    return "\n".join(lines) + _selection_line(result)


def _merged_validation(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The first part's validation set, with the rules' scores of every part on that set."""
    scored = [p["validation"] for p in parts if p.get("validation", {}).get("sizes")]
    if not scored:
        return {}
    same = [v for v in scored if (v["sizes"], v["instances"]) == (scored[0]["sizes"], scored[0]["instances"])]
    return {**scored[0], "rules": {r: c for v in same for r, c in v.get("rules", {}).items()}}


def merge(paths: list[str]) -> dict[str, Any]:
    """Several results files as one: their runs, rules (per group, first seen wins), logs and
    the 100x20 timing, the summary and table recomputed over the union of their groups."""
    parts = []
    for path in paths:
        with open(path) as fh:
            part = json.load(fh)
        extra = part.get("env_options", {}).get("extra_features", False)
        for r in part["runs"]:
            r.setdefault("label", r["algo"] + ("+x" if extra else ""))
        parts.append(part)
    groups = [g for g in TAILLARD_GROUPS if any(g in p["groups"] for p in parts)]
    rules: dict[str, dict[str, Any]] = {}
    for p in parts:
        for rule, per_group in p["rules"].items():
            for group, cell in per_group.items():
                rules.setdefault(rule, {}).setdefault(group, cell)
    result: dict[str, Any] = {
        "mode": "merged",
        "merged": paths,
        "sizes": parts[0]["sizes"],
        "groups": groups,
        "logs": parts[0]["logs"],
        "runs": [r for p in parts for r in p["runs"]],
        "rules": rules,
        "published": parts[0]["published"],
        "timing_100x20": next((p["timing_100x20"] for p in parts if p.get("timing_100x20")), None),
        "validation": _merged_validation(parts),
    }
    result["summary"] = summarize(result["runs"], groups)
    result["selected"] = selected(result)
    result["table"] = table(result)
    return result


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_gaps(result: dict[str, Any], path: str) -> None:
    """Gap (%) per Taillard group: each of our labels (mean over seeds, a bar from min to max),
    the selected run (:func:`selected`, red stars), the rules measured in this env (dashed) and
    L2D's published gap (black)."""
    plt = _pyplot()
    groups = list(result["groups"])
    x = np.arange(len(groups))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for label in result["summary"]:
        per = {
            g: 100.0
            * np.array(
                [
                    r["taillard"][g]["mean_gap"]
                    for r in result["runs"]
                    if r.get("label", r["algo"]) == label and g in r["taillard"]
                ]
            )
            for g in groups
        }
        xs = [i for i, g in enumerate(groups) if per[g].size]
        mean = [per[groups[i]].mean() for i in xs]
        lo = [per[groups[i]].mean() - per[groups[i]].min() for i in xs]
        hi = [per[groups[i]].max() - per[groups[i]].mean() for i in xs]
        ax.errorbar(xs, mean, yerr=[lo, hi], marker="o", capsize=3, label=f"{label} (ours)")
    for k, (rule, per_group) in enumerate(result["rules"].items()):
        xs = [i for i, g in enumerate(groups) if g in per_group]
        ys = [100 * per_group[groups[i]]["mean_gap"] for i in xs]
        style = {"ls": "--", "lw": 1, "color": str(0.3 + 0.15 * (k % 4)), "marker": "v^<>"[k % 4], "ms": 4}
        ax.plot(xs, ys, label=f"{rule} (rule, this env)", **style)
    sel = result.get("selected")
    if sel:
        xs = [i for i, g in enumerate(groups) if g in sel["taillard"]]
        ys = [sel["taillard"][groups[i]] for i in xs]
        label = f"selected: {sel['label']} seed {sel['seed']} (chosen on generated instances)"
        ax.plot(xs, ys, color="red", marker="*", ms=10, lw=1.5, label=label)
    ax.plot(x, [PUBLISHED[g][4] for g in groups], color="black", marker="s", lw=2, label="L2D (published)")
    ax.set_xticks(x, groups)
    ax.set(xlabel="Taillard group (jobs x machines)", ylabel="mean gap to best known (%)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("Greedy schedules on Taillard's instances (ours: mean over seeds, bar min-max)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_gantt(
    durations: np.ndarray, machines: np.ndarray, starts: np.ndarray, path: str, title: str = ""
) -> int:
    """Gantt chart of one schedule: a row per machine, a bar per operation coloured by its job
    (``starts[j, k]`` is the start of job ``j``'s ``k``-th operation, on ``machines[j, k]``).
    Returns the makespan drawn."""
    plt = _pyplot()
    durations, machines, starts = (np.asarray(a) for a in (durations, machines, starts))
    n_jobs, n_machines = durations.shape
    colors = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(10, 0.32 * n_machines + 1.4))
    for j in range(n_jobs):
        bars = [(int(starts[j, k]), int(durations[j, k])) for k in range(n_machines)]
        for (start, length), m in zip(bars, machines[j]):
            ax.broken_barh([(start, length)], (m - 0.4, 0.8), color=colors(j % 20), edgecolor="white", lw=0.4)
    makespan = int((starts + durations).max())
    ax.axvline(makespan, color="black", lw=1)
    ax.set_yticks(range(n_machines), [f"M{m}" for m in range(n_machines)], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="time", xlim=(0, makespan * 1.01))
    ax.set_title(title or f"makespan {makespan}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return makespan


def best_label(result: dict[str, Any]) -> str:
    """Our label with the lowest mean gap over the groups it was evaluated on."""
    return min(result["summary"], key=lambda a: np.mean([c["mean"] for c in result["summary"][a].values()]))


def gantt_of(result: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """The schedule drawn: the selected run's (:func:`selected`), else the first run of
    :func:`best_label` with a Taillard schedule (``run["schedule"]``), else its first held-out
    generated instance."""
    sel = result.get("selected")
    label = sel["label"] if sel else best_label(result)
    runs = (
        [result["runs"][sel["run"]]]
        if sel
        else [r for r in result["runs"] if r.get("label", r["algo"]) == label]
    )
    run = next((r for r in runs if r.get("schedule")), runs[0])
    if run.get("schedule"):
        name = run["schedule"]["instance"]
        durations, machines = taillard_instance(name)
        starts = np.asarray(run["schedule"]["start_times"])
        size = "x".join(map(str, durations.shape))
        where = f"Taillard {name} ({size}, best known {TAILLARD_UPPER_BOUNDS[name]})"
    else:
        gen = run["generated"]
        durations, machines = (np.asarray(a) for a in gen["instances"][0])
        starts = np.asarray(gen["start_times"][0])
        where = f"a held-out generated {gen['size']} instance"
    span = int((starts + durations).max())
    return (
        durations,
        machines,
        starts,
        f"{label} seed {run['seed']}, greedy, on {where}: makespan {span} (colour: job)",
    )


def save_plots(result: dict[str, Any], directory: str) -> list[str]:
    """:data:`GAPS_PNG` and :data:`GANTT_PNG` of ``result`` in ``directory``; their paths (no
    Gantt chart for a result without a trained run: ``--seeds`` with only ``--rules``)."""
    os.makedirs(directory, exist_ok=True)
    gaps, gantt = os.path.join(directory, GAPS_PNG), os.path.join(directory, GANTT_PNG)
    plot_gaps(result, gaps)
    if not result["runs"]:  # the rules alone: no schedule of ours to draw
        return [gaps]
    durations, machines, starts, title = gantt_of(result)
    plot_gantt(durations, machines, starts, gantt, title)
    return [gaps, gantt]
