"""Record graph episodes from an env into Parquet episode files (CleanRL-style script).

Usage::

    offline-graph record --policy expert --episodes 120 --seed 0 --output data/expert
    python -m offline_graph.cli.record --policy mixed --epsilon 0.5 --episodes 120 --seed 1 \\
        --output data/mixed --workers 4

Episode ``i`` depends only on ``(seed, i)`` (see :mod:`offline_graph.jobs.recording`), so the
same command writes byte-identical files whatever ``--workers`` is. Files hold at most
``--episodes-per-file`` episodes each and are named ``episodes-<first>-<last>.parquet``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError, OfflineGraphError
from offline_graph.jobs.recording import DEFAULT_ENV, DEFAULT_MASK_KEY
from offline_graph.cli.arguments import bad_value, bounded, check_bounds, parse_config, parser_for
from offline_graph.cli.failures import report_error

POLICIES = ("expert", "random", "mixed", "decoy", "stitch")


@dataclass(frozen=True)
class Config:
    """Settings of one recording run."""

    output: str
    """Directory the episode files are written to (created if missing; must be empty unless
    --overwrite)."""
    policy: str = "expert"
    """Behaviour policy: expert (always correct), random (uniform), mixed (expert with
    probability 1-epsilon, else uniform) or decoy (expert with probability 1-epsilon, else the
    most frequent node color: a systematic mistake). Envs with a make_policy(name, epsilon,
    rng) method (the node/edge-selection tasks) supply their own expert/random/mixed;
    offline_graph/Stitch-v0 also stitch (its logs' behaviour, epsilon = door probability). Or
    module:function, a user policy called as function(obs_dict, info) -> action (obs_dict has
    action_mask when the env gives one); for an RLlib MultiAgentEnv it is called as
    function(agent_id, obs_dict, info) -> action."""
    mask_key: str = DEFAULT_MASK_KEY
    """For NodeAction / EdgeAction envs: the info key holding the bool action mask of the
    current observation; it is stored as the observation's action_mask (no key in info: no
    mask, every node/edge allowed)."""
    epsilon: float = field(
        default=0.3, metadata=bounded(0.0, 1.0, hint="It is the probability of a random action.")
    )
    """Probability of the noise action for --policy mixed (uniform) and decoy (most frequent
    node color), of the door for stitch; ignored otherwise."""
    episodes: int = field(default=100, metadata=bounded(1, hint="Record at least one episode."))
    """Number of episodes to record."""
    seed: int = 0
    """Run seed; episode i is seeded from (seed, i) only."""
    env: str = DEFAULT_ENV
    """A gymnasium env id or module:ClassName whose observation space is spaces.Graph, or an
    RLlib MultiAgentEnv (id, module:Class or module:function) whose agents observe spaces.Graph."""
    env_config: dict = field(default_factory=dict)
    """Keyword arguments of the env, as a JSON object (e.g. '{"n_max": 256}')."""
    episodes_per_file: int = field(default=100, metadata=bounded(1, hint="It bounds the size of each file."))
    """At most this many episodes per Parquet file."""
    workers: int = field(default=1, metadata=bounded(1, hint="Use 1 to record in this process."))
    """1 records in this process; more runs one Ray task per file on that many CPUs."""
    overwrite: bool = False
    """Delete the episodes-*.parquet files already in --output instead of refusing."""
    progress: bool = True
    """Show a progress bar (--no-progress hides it)."""


def build_parser() -> argparse.ArgumentParser:
    return parser_for(
        Config,
        "offline-graph record",
        "Record graph episodes from a gymnasium env into Parquet episode files.",
    )


def parse_args(argv: list[str] | None = None) -> Config:
    """Command line -> :class:`Config` (exits with status 2 on bad values, like argparse)."""
    return parse_config(build_parser(), Config, argv, check_config)


def check_config(cfg: Config) -> None:
    """Refuse values that cannot work (message form of :mod:`offline_graph.data.errors`)."""

    def bad(name: str, expected: str, hint: str) -> ConfigError:
        return bad_value("record", cfg, name, expected, hint)

    check_bounds("record", cfg)
    if cfg.policy not in POLICIES and ":" not in cfg.policy:
        raise bad(
            "policy",
            f"one of {list(POLICIES)} or module:function",
            "A user policy is a function(obs_dict, info) -> action.",
        )
    if not cfg.mask_key:
        raise bad("mask_key", "a non-empty info key", "The default is 'action_mask'.")


def prepare_output(output: str, overwrite: bool) -> None:
    """Refuse a non-empty ``output`` unless ``overwrite`` (then delete its episode files)."""
    if storage.exists(output) and not storage.is_dir(output):
        raise ConfigError(
            f"record: --output must be a directory (found the file {output}). Give a new or empty directory."
        )
    if not storage.is_dir(output):
        return
    entries = storage.entries(output)
    if not entries:
        return
    if not overwrite:
        raise ConfigError(
            f"record: --output must be a new or empty directory (found {len(entries)} "
            f"entries in {output}, e.g. {entries[0]!r}). Pass --overwrite to replace the "
            "episode files there, or choose another directory."
        )
    ours = [e for e in entries if e.startswith("episodes-") and e.endswith(".parquet")]
    others = [e for e in entries if e not in ours]
    if others:
        raise ConfigError(
            f"record: --output must hold only episodes-*.parquet files to be overwritten "
            f"(found {others[:3]} in {output}). Remove those entries or choose another "
            "directory."
        )
    for name in ours:
        storage.remove_file(storage.join(output, name))


def run(cfg: Config) -> dict:
    """Record as ``cfg`` says; returns the summary that :func:`main` prints."""
    import numpy as np

    from offline_graph.jobs.recording import make_env, plan_jobs, policy_for, record

    prepare_output(cfg.output, cfg.overwrite)
    env = make_env(cfg.env, cfg.env_config)  # fail fast, before any file or Ray start
    policy_for(env, cfg.policy, cfg.epsilon, np.random.default_rng(0))
    env.close()
    start = time.perf_counter()
    jobs = plan_jobs(
        env=cfg.env,
        env_config=cfg.env_config,
        policy=cfg.policy,
        epsilon=cfg.epsilon,
        mask_key=cfg.mask_key,
        seed=cfg.seed,
        episodes=cfg.episodes,
        episodes_per_file=cfg.episodes_per_file,
        output=cfg.output,
    )
    summaries = sorted(record(jobs, workers=cfg.workers, show_progress=cfg.progress), key=lambda s: s["file"])
    returns = [r for s in summaries for r in s["returns"]]
    agents: dict[str, dict] = {}
    for s in summaries:  # multi-agent files: steps and returns per agent id
        for aid, n in s.get("agent_transitions", {}).items():
            entry = agents.setdefault(aid, {"transitions": 0, "returns": []})
            entry["transitions"] += n
            entry["returns"] += s["agent_returns"].get(aid, [])
    return {
        "output": cfg.output,
        "files": [s["file"] for s in summaries],
        "episodes": sum(s["episodes"] for s in summaries),
        "transitions": sum(s["transitions"] for s in summaries),
        "return_mean": sum(returns) / len(returns),
        "return_min": min(returns),
        "return_max": max(returns),
        "seconds": time.perf_counter() - start,
        **({"agents": dict(sorted(agents.items()))} if agents else {}),
    }


def format_summary(s: dict) -> str:
    lines = [
        f"output       {s['output']}",
        f"episodes     {s['episodes']}",
        f"transitions  {s['transitions']}",
        (f"return       mean {s['return_mean']:.3f}  min {s['return_min']:.3f}  max {s['return_max']:.3f}"),
        f"files        {len(s['files'])}",
    ]
    if s.get("agents"):
        lines.append("agents       (transitions, mean return over the episodes it took part in)")
        for aid, a in s["agents"].items():
            mean = sum(a["returns"]) / len(a["returns"]) if a["returns"] else 0.0
            lines.append(f"  {aid:<12} {a['transitions']:>8}  {mean:.3f}  ({len(a['returns'])} episodes)")
    lines += [f"  {f}" for f in s["files"]]
    lines.append(f"seconds      {s['seconds']:.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    try:
        summary = run(cfg)
    except OfflineGraphError as err:
        return report_error("record", err)
    print(format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
