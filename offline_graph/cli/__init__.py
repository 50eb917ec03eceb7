"""The ``offline-graph`` console script: one subcommand per module of this package.

Each subcommand is a CleanRL-style module ``offline_graph/cli/<name>.py`` with ``main(argv)``
(``inspect`` lives in ``inspect_data.py``, so that no module shadows the standard library);
this package only dispatches. In a checkout, ``pipelines/<name>.py`` runs the same job as a
script: ``python pipelines/train.py --help`` is ``offline-graph train --help``.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "record": "record graph episodes from an env into Parquet",
    "inspect": "summarize recorded episodes (sizes, returns, padding cost)",
    "convert": "convert recorded episodes into transition rows (Ray Data job)",
    "train": "train BC or MARWIL on recorded episodes or converted rows, then evaluate",
    "evaluate": "evaluate a saved checkpoint in the env",
    "finetune": "fine-tune a saved checkpoint online with PPO in the env (RLlib's EnvRunners)",
    "bench": "benchmark the graph data path against RLlib's stock padded path",
    "experiment": "the learning-quality table: BC / MARWIL / bag of nodes over seeds, one PNG",
    "migrate": "migrate padded RLlib Repeated recordings into ragged episode files",
    "ma-experiment": "the multi-agent learning-quality table: BC / MARWIL on TeamEnv, per module",
}

MODULES = {"inspect": "inspect_data", "ma-experiment": "ma_experiment"}
"""Subcommands whose module name differs (``inspect`` would shadow the standard library;
a dash is not valid in a module name)."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: offline-graph <command> [options]\n\ncommands:")
        for name, text in COMMANDS.items():
            print(f"  {name:<10} {text}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(
            f"offline-graph: command must be one of {sorted(COMMANDS)} (found {name!r}).",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(f"offline_graph.cli.{MODULES.get(name, name)}")
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
