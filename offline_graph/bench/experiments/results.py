"""What every experiment shares, below the command line: its logged data recorded in this
process (:func:`record_episodes`), the statistics of a line of its table (:func:`row_stats`) and
its results written the same way (:func:`write_results`: ``results.json``, the Markdown table
next to it, and a PNG when the experiment draws one).

Used by ``offline-graph experiment`` (every ``--task``, :mod:`offline_graph.cli.experiments`)
and by the OPE protocol (:mod:`offline_graph.bench.ope_protocol`).
"""

from __future__ import annotations

import glob
import json
import os
import time
from typing import Any, Callable

import numpy as np

from offline_graph.env.making import DEFAULT_ENV


def record_episodes(
    out: str,
    policy: str,
    epsilon: float,
    episodes: int,
    seed: int,
    env: str = DEFAULT_ENV,
    env_config: dict[str, Any] | None = None,
    episodes_per_file: int = 500,
) -> tuple[str, str]:
    """Record ``episodes`` of ``policy`` in ``env`` into the local directory ``out`` in this
    process (episode ``i`` seeded by ``(seed, i)`` only; episode files already there are
    replaced); returns ``(out, the equivalent offline-graph record command line)``."""
    from offline_graph.jobs.recording import plan_jobs, record

    for stale in glob.glob(os.path.join(out, "episodes-*.parquet")):
        os.remove(stale)
    jobs = plan_jobs(
        env=env, env_config=env_config, policy=policy, epsilon=epsilon, seed=seed,
        episodes=episodes, episodes_per_file=episodes_per_file, output=out,
    )  # fmt: skip
    t0 = time.perf_counter()
    summaries = list(record(jobs, workers=1, show_progress=False))
    returns = [r for s in summaries for r in s["returns"]]
    print(
        f"recorded {sum(s['episodes'] for s in summaries)} episodes, "
        f"{sum(s['transitions'] for s in summaries)} transitions, return mean "
        f"{np.mean(returns):.2f} in {time.perf_counter() - t0:.1f}s: {out}",
        flush=True,
    )
    argv = [] if env == DEFAULT_ENV else ["--env", env]
    argv += ["--policy", policy, "--epsilon", f"{epsilon:g}", "--episodes", str(episodes)]
    argv += ["--seed", str(seed)]
    if env_config:
        argv += ["--env-config", f"'{json.dumps(env_config)}'"]
    argv += ["--episodes-per-file", str(episodes_per_file), "--output", out]
    return out, "offline-graph record " + " ".join(argv)


def row_stats(scores: list[float], seconds: list[float]) -> dict[str, Any]:
    """Mean, std (ddof 1), min and max of one table line's scores (one per seed), and the mean
    seconds per run."""
    s = np.array(scores, dtype=float)
    return {
        "mean": float(s.mean()),
        "std": float(s.std(ddof=1)) if len(s) > 1 else 0.0,
        "min": float(s.min()),
        "max": float(s.max()),
        "scores": [float(v) for v in s],
        "seconds_per_run": float(np.mean(seconds)),
    }


def json_default(o: Any) -> Any:
    """``json.dump`` default: numpy scalars and arrays as Python values, anything else as str."""
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def versions() -> dict[str, str]:
    """Versions of Ray, torch and offline_graph, for the summary."""
    import ray
    import torch

    import offline_graph

    return {"ray": ray.__version__, "torch": torch.__version__, "offline_graph": offline_graph.__version__}


def write_results(
    path: str,
    result: dict[str, Any],
    t0: float,
    table_of: Callable[[dict[str, Any]], str],
    curves: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Add the run's ``wall_seconds`` (since ``t0``) and the package ``versions`` to ``result``,
    write it to ``path`` (``.json``), its table (``table_of``) next to it (``.md``) and
    ``curves`` to ``learning_curves.png`` in the same directory if given; print the table and
    the paths."""
    result["wall_seconds"] = time.perf_counter() - t0
    result["versions"] = versions()
    stem = os.path.splitext(path)[0]
    paths = {"json": path, "md": stem + ".md"}
    if curves is not None:
        paths["png"] = os.path.join(os.path.dirname(path), "learning_curves.png")
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
