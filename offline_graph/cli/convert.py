"""``offline-graph convert``: recorded episodes -> transition rows, every transition once.

    offline-graph convert --input sample_data/expert --output /tmp/rows [--gamma 0.99]
                          [--on-error raise|skip] [--env offline_graph/Graph-v0]

The observation/action spaces that episodes are validated against come from ``--env``
(any gymnasium id or ``module:Class`` with a ``spaces.Graph`` observation space). Writes
``transitions-*.parquet`` and ``conversion_report.json`` into ``--output``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from offline_graph.cli.arguments import field_docs


@dataclass(frozen=True)
class Args:
    """Command-line settings of the conversion job."""

    input: str
    """Episode Parquet file or directory."""
    output: str
    """Output directory (must be empty or absent)."""
    gamma: float = 0.99
    """Discount of value_targets (returns-to-go); stored in the file metadata."""
    on_error: str = "raise"
    """raise: stop at the first bad episode; skip: drop it and count it by reason."""
    env: str | None = None
    """Env whose spaces the episodes must match (gymnasium id or module:Class; default: the
    env named in the first input file's metadata, else offline_graph/Graph-v0)."""
    env_config: str | None = None
    """JSON kwargs for the env (default: from the input metadata, else {})."""
    workers: int | None = None
    """Concurrent conversion tasks at most (default: as many as the CPUs allow)."""
    episodes_per_batch: int = 256
    """Episode rows per map call."""
    episodes_per_task: int = 512
    """Episode rows per task (one output file; the retry unit)."""


def parse_args(argv: list[str] | None) -> Args:
    p = argparse.ArgumentParser(prog="offline-graph convert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    docs = field_docs(Args)
    p.add_argument("--input", required=True, help=docs["input"])
    p.add_argument("--output", required=True, help=docs["output"])
    p.add_argument("--gamma", type=float, default=Args.gamma, help=docs["gamma"])
    p.add_argument("--on-error", choices=["raise", "skip"], default=Args.on_error,
                   help=docs["on_error"])
    p.add_argument("--env", default=Args.env, help=docs["env"])
    p.add_argument("--env-config", default=Args.env_config, help=docs["env_config"])
    p.add_argument("--workers", type=int, default=Args.workers, help=docs["workers"])
    p.add_argument("--episodes-per-batch", type=int, default=Args.episodes_per_batch,
                   help=docs["episodes_per_batch"])
    p.add_argument("--episodes-per-task", type=int, default=Args.episodes_per_task,
                   help=docs["episodes_per_task"])
    return Args(**vars(p.parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import ray

    from offline_graph.jobs.convert import ConvertConfig, convert
    from offline_graph.data.reader import spec_from_spaces
    from offline_graph.jobs.recording import make_env

    from offline_graph.data.files import scan_files
    from offline_graph.data.format import read_file_metadata

    scan = scan_files(args.input, args.on_error)  # type: ignore[arg-type]
    meta = read_file_metadata(scan.files[0]) if scan.files else {}
    env_name = args.env or meta.get("env") or "offline_graph/Graph-v0"
    if args.env_config is not None:
        env_config = json.loads(args.env_config)
    else:
        env_config = meta.get("env_config", {}) if not args.env else {}
    env = make_env(env_name, env_config)
    spec = spec_from_spaces(env.observation_space, env.action_space)
    source = {k: meta[k] for k in ("policy", "seed", "epsilon", "mask_key") if k in meta}
    source.update(env=env_name, **({"env_config": env_config} if env_config else {}))
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    report = convert(ConvertConfig(
        input=args.input, output=args.output, spec=spec, gamma=args.gamma,
        on_error=args.on_error, num_workers=args.workers,  # type: ignore[arg-type]
        episodes_per_batch=args.episodes_per_batch, episodes_per_task=args.episodes_per_task,
        source=source))
    print(f"episodes in: {report['episodes_in']}  used: {report['episodes_used']}  "
          f"rejected: {report['episodes_rejected']} {report['rejected_by_reason']}")
    print(f"transitions out: {report['transitions_out']}  in {report['seconds']:.1f} s "
          f"({report['transitions_per_s']:.0f}/s)  bytes in/out: "
          f"{report['bytes_in']}/{report['bytes_out']}")
    print(f"report: {args.output}/conversion_report.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
