"""The table of every ``offline-graph experiment`` task: results.md (a line per row, or per row
and module; the baselines; the targets; a line of settings) and learning_curves.png (score vs
iteration, mean over seeds with the min-max band, one panel per data set)."""

from __future__ import annotations

from typing import Any

import numpy as np

from offline_graph.cli.experiments.spec import Task


def score_table(lines: list[dict[str, Any]], modules: bool) -> list[str]:
    """The Markdown table of results.json's ``rows``: one line per row (and module), scores per
    seed."""
    head = ["row", "data", "algorithm, module", *(["agent module"] if modules else [])]
    head += ["score mean", "std", "min - max", "per seed", "s / run"]
    rule = ["-" * (len(h) + 2) if h in ("per seed", *head[:-5]) else "-" * (len(h) + 1) + ":" for h in head]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]
    for line in lines:
        st = line["stats"]
        cells = [line["row"], line["data"], line["label"], *([line["module"]] if modules else [])]
        cells += [
            f"{st['mean']:.1f}",
            f"{st['std']:.1f}",
            f"{st['min']:.1f} - {st['max']:.1f}",
            ", ".join(f"{v:.1f}" for v in st["scores"]),
            f"{st['seconds_per_run']:.0f}",
        ]
        out.append("| " + " | ".join(cells) + " |")
    return out


def markdown(task: Task, result: dict[str, Any]) -> str:
    """results.md: the table, the other baselines' scores, the targets, a line of settings."""
    s, base = result["settings"], result["baselines"]
    lines = [*score_table(result["rows"], task.modules is not None), ""]
    for b in task.baselines:
        if b.name in result["baseline_scores"]:
            eps = "" if b.epsilon is None else f", epsilon {epsilon_of(b.epsilon, s):g}"
            lines.append(
                f"The {b.name} ({b.policy} policy{eps}) on the same evaluation episodes: return "
                f"{base[b.name]:.3f}, normalized score {result['baseline_scores'][b.name]:.1f}."
            )
    for t in result["targets"]:
        se = f", standard error {t['se']:.1f}" if "se" in t else ""
        lines.append(f"- {t['what']}: {t['value']:+.1f} ({'holds' if t['holds'] else 'FAILS'}{se})")
    shown = ", ".join(f"{k.replace('_', ' ')} {s[k]:g}" for k in task.shown)
    data = "; ".join(
        f"{k[: -len('_made_by')]}: {v}" for k, v in result["data"].items() if k.endswith("_made_by")
    )
    lines.append(
        f"\nSeeds 0..{s['seeds'] - 1}, {s['iterations']} iterations, {shown}; "
        f"{s['eval_episodes']} evaluation episodes (seed {s['eval_seed']}): expert return "
        f"{base['expert']:.2f}, random {base['random']:.2f}. Data ({data}). "
        f"Wall time {result['wall_seconds'] / 60:.1f} min."
    )
    return "\n".join(lines) + "\n"


def epsilon_of(epsilon: str | float, settings: dict[str, Any]) -> float:
    """A baseline's noise: a number, or the name of the Config field that holds it."""
    return float(settings[epsilon]) if isinstance(epsilon, str) else float(epsilon)


def save_curves(path: str, result: dict[str, Any]) -> None:
    """Score vs iteration: mean over seeds, min-max band; one panel per data set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys(r["data"] for r in result["rows"]))  # the data sets, in row order
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, data in zip(axes[0], panels):
        for line in (r for r in result["rows"] if r["data"] == data):
            its = np.array([c["iteration"] for c in line["runs"][0]["curve"]])
            sc = np.array([[c["score"] for c in run["curve"]] for run in line["runs"]])
            label = line["label"] + ("" if line["module"] is None else f" ({line['module']})")
            (drawn,) = ax.plot(its, sc.mean(0), marker="o", ms=3, label=label)
            ax.fill_between(its, sc.min(0), sc.max(0), color=drawn.get_color(), alpha=0.2)
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
