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
    "experiment": "a learning-quality table (--task graph, team, stitch, jobshop, channel)",
    "migrate": "migrate padded RLlib Repeated recordings into ragged episode files",
    "ma-experiment": "experiment --task team: BC / MARWIL on Team-v0, per module",
    "stitch-experiment": "experiment --task stitch: BC / MARWIL / IQL / CQL on Stitch-v0 logs",
}

MODULES = {"inspect": "inspect_data"}
"""Subcommands whose module name differs (``inspect`` would shadow the standard library)."""


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
    name, rest = experiment_alias(name, rest)
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


def experiment_alias(name: str, rest: list[str]) -> tuple[str, list[str]]:
    """The old commands of two tables: ``ma-experiment ...`` is ``experiment --task team ...``
    and ``stitch-experiment ...`` is ``experiment --task stitch ...``."""
    tasks = {"ma-experiment": "team", "stitch-experiment": "stitch"}
    return ("experiment", ["--task", tasks[name], *rest]) if name in tasks else (name, rest)


if __name__ == "__main__":
    sys.exit(main())
