"""The ``offline-graph`` console script: one subcommand per module of this package.

Each subcommand is a CleanRL-style module ``offline_graph/cli/<name>.py`` with ``main(argv)``
(``inspect`` lives in ``inspect_data.py``, so that no module shadows the standard library);
this package only dispatches, through :func:`offline_graph.cli.failures.run_command` (our
errors as one line and an exit status, ``--debug`` for tracebacks). In a checkout,
``pipelines/<name>.py`` runs the same job as a script: ``python pipelines/train.py --help`` is
``offline-graph train --help``.
"""

from __future__ import annotations

import importlib
import sys

from offline_graph.cli.failures import run_command, split_debug

COMMANDS = {
    "record": "record graph episodes from an env into Parquet",
    "inspect": "summarize recorded episodes (sizes, returns, padding cost)",
    "convert": "convert recorded episodes into transition rows (Ray Data job)",
    "train": "train BC or MARWIL on recorded episodes or converted rows, then evaluate",
    "evaluate": "evaluate a saved checkpoint in the env",
    "finetune": "fine-tune a saved checkpoint online with PPO in the env (RLlib's EnvRunners)",
    "bench": "benchmark the graph data path against RLlib's stock padded path",
    "experiment": "the learning-quality table: BC / MARWIL / bag of nodes (--task stitch: IQL / CQL)",
    "migrate": "migrate padded RLlib Repeated recordings into ragged episode files",
    "ma-experiment": "the multi-agent learning-quality table: BC / MARWIL on TeamEnv, per module",
    "stitch-experiment": "the stitching table: BC / MARWIL / IQL / CQL on Stitch-v0 logs, seeds",
}

MODULES = {
    "inspect": "inspect_data",
    "ma-experiment": "ma_experiment",
    "stitch-experiment": "stitch_experiment",
}
"""Subcommands whose module name differs (``inspect`` would shadow the standard library;
a dash is not valid in a module name)."""


def main(argv: list[str] | None = None) -> int:
    argv, debug = split_debug(list(sys.argv[1:] if argv is None else argv))
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: offline-graph [--debug] <command> [options]\n\ncommands:")
        for name, text in COMMANDS.items():
            print(f"  {name:<10} {text}")
        print("\n--debug (anywhere, or OFFLINE_GRAPH_DEBUG=1): tracebacks for our errors too")
        print("exit status: 0 done, 2 bad input or settings, 1 unexpected error, 130 interrupted")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    name, rest = experiment_task(name, rest)
    if name not in COMMANDS:
        print(
            f"offline-graph: command must be one of {sorted(COMMANDS)} (found {name!r}).",
            file=sys.stderr,
        )
        return 2

    def run(args: list[str]) -> int | None:
        module = importlib.import_module(f"offline_graph.cli.{MODULES.get(name, name)}")
        return module.main(args)

    return run_command(name, run, rest, debug)


def experiment_task(name: str, rest: list[str]) -> tuple[str, list[str]]:
    """``experiment --task stitch ...`` is ``stitch-experiment ...`` (``--task graph``, the
    default, the BC / MARWIL table)."""
    if name != "experiment":
        return name, rest
    for i, token in enumerate(rest):
        task = token.split("=", 1)[1] if token.startswith("--task=") else None
        if token == "--task" and i + 1 < len(rest):
            task, drop = rest[i + 1], 2
        else:
            drop = 1
        if task is not None:
            tasks = {"graph": "experiment", "stitch": "stitch-experiment"}
            if task not in tasks:
                print(
                    f"offline-graph experiment: --task must be one of {sorted(tasks)} (found {task!r}).",
                    file=sys.stderr,
                )
                raise SystemExit(2)
            return tasks[task], rest[:i] + rest[i + drop :]
    return name, rest


if __name__ == "__main__":
    sys.exit(main())
