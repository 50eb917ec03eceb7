"""``offline-graph experiment --task graph|team|stitch|jobshop|channel|dispatch``: a
learning-quality table (rows of algorithms on logged data sets, each trained with seeds
``0..S-1``), by the one runner of :mod:`offline_graph.cli.experiments` from the task's declared
spec.

Usage::

    offline-graph experiment --output runs/experiment            # Graph-v0: BC / MARWIL / bag of nodes
    offline-graph experiment --task team --output runs/team      # Team-v0, per module (ma-experiment)
    offline-graph experiment --task stitch --output runs/stitch  # Stitch-v0: + IQL / CQL (stitch-experiment)
    offline-graph experiment --quick --output /tmp/quick         # a smoke run (~1-2 min)
    offline-graph experiment --task jobshop --quick --output r.json  # job-shop, Taillard gaps
    offline-graph experiment --task channel --output runs/channel  # Channel-v0: graph-level parts
    offline-graph experiment --task dispatch --output runs/dispatch  # Dispatch-v0: typed graphs

``--task`` picks the table (default ``graph``; ``jobshop`` writes a results JSON, ``--output
r.json``, and its two PNGs beside it); every other option is the task's own (``offline-graph
experiment --task team --help``). Written to ``--output``: ``results.json`` (settings, data,
baselines, every run with its curve, per-line statistics, targets), ``results.md`` (the table,
also printed) and ``learning_curves.png``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from offline_graph.cli.experiments import TASKS, task_of
from offline_graph.cli.experiments.runner import parse_args as parse_task_args
from offline_graph.cli.experiments.runner import main_for


def split_task(argv: list[str]) -> tuple[str, list[str]]:
    """(``--task``'s value, default ``graph``; the other arguments). Exits with status 2 and a
    message on an unknown task."""
    pre = argparse.ArgumentParser(prog="offline-graph experiment", add_help=False)
    pre.add_argument("--task", default=TASKS[0])
    ns, rest = pre.parse_known_args(argv)
    if ns.task not in TASKS:
        pre.error(f"--task must be one of {list(TASKS)} (found {ns.task!r}). Each is a table of its own.")
    return ns.task, rest


def parse_args(argv: list[str] | None = None) -> tuple[str, Any]:
    """Command line -> (task, its Config) (--quick applied; exits with status 2 on bad values)."""
    name, rest = split_task(list(sys.argv[1:] if argv is None else argv))
    return name, parse_task_args(task_of(name), rest, TASKS)


def main(argv: list[str] | None = None) -> int:
    name, rest = split_task(list(sys.argv[1:] if argv is None else argv))
    return main_for(name, rest)


if __name__ == "__main__":
    sys.exit(main())
