"""``offline-graph convert``: recorded episodes -> transition rows, every transition once.

    offline-graph convert --input sample_data/expert --output /tmp/rows [--gamma 0.99]
                          [--on-error raise|skip] [--env offline_graph/Graph-v0]
                          [--observation-space graph:F=5 --action-space discrete:3]

The observation/action spaces that episodes are validated against come from the input's
metadata, ``--env``, ``--observation-space`` / ``--action-space``, else they are inferred from
the data (:mod:`offline_graph.env.data_spaces`); the rows' metadata records them. Writes
``transitions-*.parquet`` and ``_conversion_report.json`` into ``--output``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, Callable

from offline_graph.cli.arguments import config_from, parser_for
from offline_graph.data.store import storage
from offline_graph.data.episodes.reader import OnError


@dataclass(frozen=True)
class Args:
    """Command-line settings of the conversion job."""

    input: str
    """Episode Parquet file or directory."""
    output: str
    """Output directory (must be empty or absent)."""
    gamma: float = 0.99
    """Discount of value_targets (returns-to-go); stored in the file metadata."""
    on_error: OnError = "raise"
    """raise: stop at the first bad episode; skip: drop it and count it by reason."""
    env: str | None = None
    """Env whose spaces the episodes must match (gymnasium id or module:Class; default: the
    env named in the first input file's metadata, if any; recorded in the rows' metadata)."""
    env_config: dict | None = None
    """JSON kwargs for the env (default: from the input metadata, else {})."""
    observation_space: str | None = None
    """Observation space as compact text, e.g. graph:F=5,D=3 or graph:F=5 (edges without
    features). Default: the input metadata's, the env's, else inferred from the data."""
    action_space: str | None = None
    """Action space as compact text: discrete:K, node:MAX_NODES or edge:MAX_EDGES. Default:
    as --observation-space."""
    workers: int | None = None
    """Concurrent conversion tasks at most (default: as many as the CPUs allow)."""
    episodes_per_batch: int = 256
    """Episode rows per map call."""
    episodes_per_task: int = 512
    """Episode rows per task (one output file; the retry unit)."""


def parse_args(argv: list[str] | None = None) -> Args:
    """Command line -> :class:`Args` (exits with status 2 on bad values, like argparse)."""
    parser = parser_for(Args, "offline-graph convert", __doc__, argparse.RawDescriptionHelpFormatter)
    return config_from(Args, parser.parse_args(argv))


def recorded_source(meta: dict[str, Any], env: str | None, env_config: dict | None) -> dict[str, Any]:
    """The recording facts of the input ``meta`` and the env (with its non-empty config) that
    the rows' metadata keeps."""
    source: dict[str, Any] = {k: meta[k] for k in ("policy", "seed", "epsilon", "mask_key") if k in meta}
    if env:
        source.update(env=env, **({"env_config": env_config} if env_config else {}))
    return source


def run_conversion(
    args: Args, job: Callable[[Any], dict[str, Any]], config_class: type, source: dict, **settings: Any
) -> dict[str, Any]:
    """Start Ray if needed, run ``job`` on ``config_class`` settings from ``args`` (and
    ``settings``), print the episode counts; returns the report."""
    from offline_graph.rllib.core.ray_session import start_ray

    start_ray()
    report = job(
        config_class(
            input=args.input,
            output=args.output,
            gamma=args.gamma,
            on_error=args.on_error,
            num_workers=args.workers,
            episodes_per_batch=args.episodes_per_batch,
            episodes_per_task=args.episodes_per_task,
            source=source,
            **settings,
        )
    )
    print(
        f"episodes in: {report['episodes_in']}  used: {report['episodes_used']}  "
        f"rejected: {report['episodes_rejected']} {report['rejected_by_reason']}"
    )
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    from offline_graph.cli.failures import report_error
    from offline_graph.data.errors import OfflineGraphError
    from offline_graph.data.episodes.reader import spec_from_spaces
    from offline_graph.env.data_input import open_input
    from offline_graph.jobs.conversion import REPORT_NAME, require_empty_output
    from offline_graph.jobs.convert import ConvertConfig, convert

    try:
        require_empty_output(args.output)  # before the input's scan and Ray's start
        data = open_input(args.input, args.on_error)  # listed and checked once; the job takes it
        if data.multi_agent:
            return _main_multi_agent(args, data)
        spaces = data.resolve_spaces(
            env=args.env,
            env_config=args.env_config,
            observation_space=args.observation_space,
            action_space=args.action_space,
            who="convert",
            announce=lambda m: print(f"offline-graph convert: warning: {m}", file=sys.stderr),
        )
    except OfflineGraphError as err:
        return report_error("convert", err)
    print(f"spaces: {spaces.describe()}")
    spec = spec_from_spaces(spaces.observation_space, spaces.action_space)
    source = recorded_source(data.metadata, spaces.env, spaces.env_config)
    source.update(spaces.texts)
    report = run_conversion(args, convert, ConvertConfig, source, spec=spec, data=data)
    print(
        f"transitions out: {report['transitions_out']}  in {report['seconds']:.1f} s "
        f"({report['transitions_per_s']:.0f}/s)  bytes in/out: "
        f"{report['bytes_in']}/{report['bytes_out']}"
    )
    print(f"report: {storage.join(args.output, REPORT_NAME)}")
    return 0


def _main_multi_agent(args: Any, data: Any) -> int:
    """``offline-graph convert`` on multi-agent input (``args``: the CLI's Args; ``data``: the
    input resolved, :class:`~offline_graph.env.data_input.DataInput`)."""
    if args.observation_space or args.action_space:
        print(
            "offline-graph convert: --observation-space / --action-space must not be given for "
            "multi-agent data (found them). Each agent's spaces come from the metadata "
            "'agent_spaces' or are inferred per agent id.",
            file=sys.stderr,
        )
        return 2
    from offline_graph.data.errors import OfflineGraphError
    from offline_graph.jobs.conversion import REPORT_NAME
    from offline_graph.jobs.ma_convert import MultiAgentConvertConfig, convert_multi_agent

    try:
        spaces = data.resolve_agent_spaces("convert")
    except OfflineGraphError as err:
        print(f"offline-graph convert: {err}", file=sys.stderr)
        return 2
    for key, texts in sorted(spaces.texts.items()):
        print(f"agent {key}: {texts['observation_space']} / {texts['action_space']} ({texts['source']})")
    env = args.env or data.metadata.get("env")
    env_config = args.env_config if args.env_config is not None else data.metadata.get("env_config")
    source = recorded_source(data.metadata, env, env_config)
    report = run_conversion(
        args, convert_multi_agent, MultiAgentConvertConfig, source, agent_spaces=spaces, data=data
    )
    for key, a in report["agents"].items():
        print(f"agent {key}: transitions {a['transitions']}  episodes {a['episodes']}")
    print(
        f"agent steps out: {report['transitions_out']}  in {report['seconds']:.1f} s  bytes in/out: "
        f"{report['bytes_in']}/{report['bytes_out']}"
    )
    print(f"report: {storage.join(args.output, REPORT_NAME)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
