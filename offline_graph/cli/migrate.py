"""``offline-graph migrate``: padded RLlib ``Repeated`` recordings -> our ragged episode files.

Usage::

    offline-graph migrate --input old_rllib_output/ --output data/migrated \\
        --observation-space my_project.spaces:OBS_SPACE [--action-space discrete:4] \\
        [--on-error raise|skip]

``--observation-space module:NAME`` names the ``gymnasium.spaces.Dict`` of RLlib ``Repeated``
spaces the old rows were padded with (``x``: ``Repeated(Box(F), max_len=N_max)``,
``edge_index``: ``Repeated(Box(2), max_len=E_max)``, optional ``edge_attr``:
``Repeated(Box(D), max_len=E_max)``). The input is row-per-transition Parquet or JSON lines
(RLlib's old ``JsonWriter`` / ``DatasetWriter`` output included) with the columns ``obs``,
``new_obs``, ``actions``, ``rewards``, ``terminateds``/``truncateds`` or ``dones``, ``eps_id``
and ``t``. The output is what ``offline-graph record`` writes (``inspect``, ``convert`` and
``train`` read it), plus ``_migration_report.json``. See :mod:`offline_graph.jobs.migrate`.
"""

from __future__ import annotations

import functools

import argparse
import sys
from dataclasses import dataclass, field

from offline_graph.cli.arguments import bounded, check_bounds, parse_config, parser_for
from offline_graph.cli.failures import report_error
from offline_graph.data.errors import ConfigError, OfflineGraphError
from offline_graph.data.migration.migrate_episodes import OnError


@dataclass(frozen=True)
class Config:
    """Settings of one migration run."""

    input: str
    """Old transition file (Parquet, .json or .jsonl lines) or a directory of them."""
    output: str
    """Directory for the episode files and _migration_report.json (created; must be new or
    empty)."""
    observation_space: str
    """module:NAME of the gymnasium Dict of RLlib Repeated spaces (x, edge_index, optional
    edge_attr) the rows were padded with; the current directory is importable."""
    action_space: str | None = None
    """discrete:K, node:MAX or edge:MAX: actions are checked against it and it is stored in
    the files (default: any non-negative integer; the report names discrete:<largest + 1>)."""
    on_error: OnError = "raise"
    """raise: stop at the first bad row (naming file, row, eps_id, t, column); skip: drop its
    episode and count it by reason in the report."""
    episodes_per_file: int = field(default=100, metadata=bounded(1, hint="It is a count."))
    """At most this many episodes per output file."""
    batch_rows: int = field(default=4096, metadata=bounded(1, hint="It is a count."))
    """Input rows read and unpadded at a time (bounds the memory of padded vectors)."""
    json: bool = False
    """Print the whole report as JSON instead of a summary."""


def build_parser() -> argparse.ArgumentParser:
    return parser_for(Config, "offline-graph migrate", __doc__, argparse.RawDescriptionHelpFormatter)


def parse_args(argv: list[str] | None = None) -> Config:
    """Command line -> :class:`Config` (exits with status 2 on bad values, like argparse)."""
    return parse_config(build_parser(), Config, argv, functools.partial(check_bounds, "migrate"))


def format_report(r: dict) -> str:
    rejected = (
        f"  rejected {r['episodes_rejected']} {r['rejected_by_reason']}" if r["episodes_rejected"] else ""
    )
    files = f"  files rejected {r['files_rejected_by_reason']}" if r["files_rejected_by_reason"] else ""
    factor = f"{r['padding_factor']:.2f}x" if r["padding_factor"] else "n/a"
    return "\n".join(
        [
            f"episodes     {r['episodes']} ({r['terminated']} terminated, "
            f"{r['truncated']} truncated){rejected}",
            f"transitions  {r['transitions']} of {r['rows_read']} rows read{files}",
            f"payload      {r['padded_payload_bytes']} B padded -> {r['unpadded_payload_bytes']} B "
            f"unpadded (padding factor {factor})",
            f"files        {r['files_in']} in, {r['bytes_before']} B -> {r['files_out']} out, "
            f"{r['bytes_after']} B",
            f"spaces       {r['observation_space']}  {r['action_space']}",
            f"seconds      {r['seconds']:.2f} ({r['transitions_per_s'] or 0:.0f} rows/s)",
            f"report       {r['output']}/_migration_report.json",
        ]
    )


def run(cfg: Config) -> dict:
    """Migrate as ``cfg`` says; returns the report."""
    from offline_graph.data.graphs.space_text import parse_space
    from offline_graph.jobs.migrate import MigrateConfig, load_space, migrate

    action = parse_space(cfg.action_space, "action") if cfg.action_space else None
    return migrate(
        MigrateConfig(
            input=cfg.input,
            output=cfg.output,
            observation_space=load_space(cfg.observation_space),
            action_space=action,
            on_error=cfg.on_error,
            episodes_per_file=cfg.episodes_per_file,
            batch_rows=cfg.batch_rows,
            observation_space_name=cfg.observation_space,
        )
    )


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    try:
        report = run(cfg)
    except (OfflineGraphError, ConfigError) as err:
        return report_error("migrate", err)
    if cfg.json:
        import json

        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
