"""``offline-graph convert``: recorded episodes -> transition rows, every transition once.

    offline-graph convert --input sample_data/expert --output /tmp/rows [--gamma 0.99]
                          [--on-error raise|skip] [--env offline_graph/Graph-v0]

The observation/action spaces that episodes are validated against come from ``--env``
(any gymnasium id or ``module:Class`` with a ``spaces.Graph`` observation space). Writes
``transitions-*.parquet`` and ``conversion_report.json`` into ``--output``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from offline_graph.cli.arguments import config_from, parser_for
from offline_graph.data.reader import OnError


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
    env named in the first input file's metadata, else offline_graph/Graph-v0)."""
    env_config: dict | None = None
    """JSON kwargs for the env (default: from the input metadata, else {})."""
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import ray

    from offline_graph.jobs.convert import ConvertConfig, convert
    from offline_graph.data.reader import spec_from_spaces
    from offline_graph.jobs.recording import make_env

    from offline_graph.data.files import scan_files
    from offline_graph.data.format import read_file_metadata

    scan = scan_files(args.input, args.on_error)
    meta = read_file_metadata(scan.files[0]) if scan.files else {}
    env_name = args.env or meta.get("env") or "offline_graph/Graph-v0"
    if args.env_config is not None:
        env_config = args.env_config
    else:
        env_config = meta.get("env_config", {}) if not args.env else {}
    env = make_env(env_name, env_config)
    spec = spec_from_spaces(env.observation_space, env.action_space)
    source: dict[str, Any] = {k: meta[k] for k in ("policy", "seed", "epsilon", "mask_key") if k in meta}
    source.update(env=env_name, **({"env_config": env_config} if env_config else {}))
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    report = convert(
        ConvertConfig(
            input=args.input,
            output=args.output,
            spec=spec,
            gamma=args.gamma,
            on_error=args.on_error,
            num_workers=args.workers,
            episodes_per_batch=args.episodes_per_batch,
            episodes_per_task=args.episodes_per_task,
            source=source,
        )
    )
    print(
        f"episodes in: {report['episodes_in']}  used: {report['episodes_used']}  "
        f"rejected: {report['episodes_rejected']} {report['rejected_by_reason']}"
    )
    print(
        f"transitions out: {report['transitions_out']}  in {report['seconds']:.1f} s "
        f"({report['transitions_per_s']:.0f}/s)  bytes in/out: "
        f"{report['bytes_in']}/{report['bytes_out']}"
    )
    print(f"report: {args.output}/conversion_report.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
