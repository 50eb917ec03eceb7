"""Summarize recorded episode files: sizes, returns, and what padding every graph would cost.

Usage::

    offline-graph inspect sample_data/expert
    offline-graph inspect sample_data/mixed/episodes-0000000-0000059.parquet --json

See :mod:`offline_graph.data.analysis.stats` for how each number is computed.
"""

from __future__ import annotations

import functools

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from offline_graph.cli.arguments import arg, bounded, check_bounds, parse_config, parser_for
from offline_graph.cli.failures import report_error
from offline_graph.data.errors import OfflineGraphError


@dataclass(frozen=True)
class Config:
    """Settings of one inspect run."""

    path: str = field(metadata=arg(positional=True))
    """A Parquet episode file or a directory of them."""
    json: bool = False
    """Print the numbers as JSON instead of a table."""
    strict: bool = False
    """Fail on the first invalid row (naming file and row) instead of skipping and counting."""
    n_max: int | None = field(default=None, metadata=bounded(1, hint="It is a node count."))
    """Node limit of the RLlib Repeated-style padded layout (default: the observed max N)."""
    env: str | None = None
    """Env whose spaces the data should have (default: the env named in the metadata)."""
    env_config: dict | None = None
    """JSON kwargs for the env (default: from the metadata, else {})."""
    observation_space: str | None = None
    """Observation space as compact text, e.g. graph:F=5,D=3 or graph:F=5 (default: the
    metadata's, the env's, else inferred from the data)."""
    action_space: str | None = None
    """Action space as compact text: discrete:K, node:MAX_NODES or edge:MAX_EDGES."""


def build_parser() -> argparse.ArgumentParser:
    return parser_for(
        Config,
        "offline-graph inspect",
        "Summarize recorded graph episode files (sizes, returns, padding cost).",
        argparse.HelpFormatter,
    )


def parse_args(argv: list[str] | None = None) -> Config:
    """Command line -> :class:`Config` (exits with status 2 on bad values, like argparse)."""
    return parse_config(build_parser(), Config, argv, functools.partial(check_bounds, "inspect"))


def _spaces(cfg: Config, scanned: Any = None) -> dict[str, str] | None:
    """The data's spaces and where they came from (:mod:`offline_graph.env.data_spaces`); None
    (with a note on stderr) when nothing pins them and they cannot be inferred. ``scanned``:
    the input's scan made while inspecting (``offline_graph.data.store.files.ScanBuilder``), so
    the files are not listed and opened again."""
    from offline_graph.env.data_input import DataInput

    given = (cfg.env, cfg.observation_space, cfg.action_space)
    data = DataInput(cfg.path, "raise" if cfg.strict else "skip")
    try:
        if scanned is not None:
            if scanned.error is not None:
                raise scanned.error  # where scan_files would have raised it
            data = DataInput.of(cfg.path, scanned.scan, data.on_error)
        spaces = data.resolve_spaces(
            env=cfg.env,
            env_config=cfg.env_config,
            observation_space=cfg.observation_space,
            action_space=cfg.action_space,
            who="inspect",
            announce=lambda m: print(f"offline-graph inspect: warning: {m}", file=sys.stderr),
        )
    except OfflineGraphError as err:
        if any(v is not None for v in given):
            raise
        print(f"offline-graph inspect: spaces unknown: {err}", file=sys.stderr)
        return None
    return {**spaces.texts, "source": spaces.source}


def main(argv: list[str] | None = None) -> int:
    from offline_graph.data.analysis.stats import format_table, inspect_input

    cfg = parse_args(argv)
    try:
        # each file listed and opened once: the spaces come from the scan made meanwhile
        summary, scanned = inspect_input(cfg.path, strict=cfg.strict, n_max=cfg.n_max)
        if not summary.get("multi_agent"):  # multi-agent: per-agent spaces are in the summary
            summary["spaces"] = _spaces(cfg, scanned)
    except OfflineGraphError as err:
        return report_error("inspect", err)
    print(json.dumps(summary, indent=2) if cfg.json else format_table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
