"""Summarize recorded episode files: sizes, returns, and what padding every graph would cost.

Usage::

    offline-graph inspect sample_data/expert
    offline-graph inspect sample_data/mixed/episodes-0000000-0000059.parquet --json

See :mod:`offline_graph.data.stats` for how each number is computed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass

from offline_graph.data.errors import OfflineGraphError


@dataclass(frozen=True)
class Config:
    """Settings of one inspect run."""

    path: str
    """A Parquet episode file or a directory of them."""
    json: bool = False
    """Print the numbers as JSON instead of a table."""
    strict: bool = False
    """Fail on the first invalid row (naming file and row) instead of skipping and counting."""
    n_max: int | None = None
    """Node limit of the RLlib Repeated-style padded layout (default: the observed max N)."""


def build_parser() -> argparse.ArgumentParser:
    from offline_graph.cli.arguments import field_docs

    docs = field_docs(Config)
    p = argparse.ArgumentParser(
        prog="offline-graph inspect",
        description="Summarize recorded graph episode files (sizes, returns, padding cost).",
    )
    p.add_argument("path", help=docs["path"])
    p.add_argument("--json", action="store_true", help=docs["json"])
    p.add_argument("--strict", action="store_true", help=docs["strict"])
    p.add_argument("--n-max", type=int, default=None, help=docs["n_max"])
    return p


def parse_args(argv: list[str] | None = None) -> Config:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.n_max is not None and ns.n_max < 1:
        parser.error(f"inspect: --n-max must be >= 1 (found {ns.n_max}). It is a node count.")
    return Config(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(Config)})


def main(argv: list[str] | None = None) -> int:
    from offline_graph.data.stats import format_table, inspect_path

    cfg = parse_args(argv)
    try:
        summary = inspect_path(cfg.path, strict=cfg.strict, n_max=cfg.n_max)
    except OfflineGraphError as err:
        print(str(err), file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2) if cfg.json else format_table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
