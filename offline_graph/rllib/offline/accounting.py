"""Run-wide accounting of read / used / rejected episodes across Ray workers.

Workers (prelearner actors, conversion map tasks) report a :class:`ReadStats` per input
block to one named, detached collector actor per cluster (created on first use, reused by
later runs), under the run's name and keyed by a digest of the block, so a block retried
after a worker died replaces its earlier report instead of counting twice. The driver reads
the merged totals of its run with :func:`collect`. When the run ends (``algo.stop()`` of a
``GraphBC`` / ``GraphMARWIL``) :func:`close` keeps the final totals in the driver process and
drops the run from the actor, so the long-lived actor holds only runs in progress.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

from offline_graph.data.episodes.reader import ReadStats

NAMESPACE = "offline_graph"
COLLECTOR = "offline_graph_accounting"
_CLOSED: dict[str, ReadStats] = {}
"""Final totals of the runs this driver closed (what :func:`collect` returns for them)."""


def block_key(items: Sequence[bytes], paths: Sequence[str | None]) -> str:
    """A digest naming one input block (same rows -> same key)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(str(len(items)).encode())
    h.update(str(paths[:1]).encode())
    for item in items:
        raw = isinstance(item, (bytes, bytearray, memoryview))
        h.update(bytes(item[:128]) if raw else repr(item).encode())
    return h.hexdigest()


def to_dict(stats: ReadStats) -> dict[str, Any]:
    return {
        "episodes_read": stats.episodes_read,
        "episodes_used": stats.episodes_used,
        "transitions_used": stats.transitions_used,
        "episodes_held_out": stats.episodes_held_out,
        "transitions_held_out": stats.transitions_held_out,
        "rejected": dict(stats.rejected),
        "examples": dict(stats.examples),
        "transitions_by_module": dict(stats.transitions_by_module),
        "agent_steps_unused": stats.agent_steps_unused,
    }


def from_dicts(blocks: Sequence[dict[str, Any]]) -> ReadStats:
    total = ReadStats()
    for b in blocks:
        part = ReadStats(
            b["episodes_read"],
            b["episodes_used"],
            b["transitions_used"],
            episodes_held_out=b.get("episodes_held_out", 0),
            transitions_held_out=b.get("transitions_held_out", 0),
            agent_steps_unused=b.get("agent_steps_unused", 0),
        )
        part.transitions_by_module.update(b.get("transitions_by_module", {}))
        part.rejected.update(b["rejected"])
        part.examples.update(b["examples"])
        total.merge(part)
    return total


def _actor_class() -> Any:
    import ray

    @ray.remote(num_cpus=0, max_restarts=-1)
    class StatsCollector:
        """Idempotent per-block accounting (a retried block overwrites its own entry)."""

        def __init__(self) -> None:
            self.runs: dict[str, dict[str, dict]] = {}

        def report(self, run: str, key: str, stats: dict) -> None:
            self.runs.setdefault(run, {})[key] = stats

        def summary(self, run: str) -> list[dict]:
            return list(self.runs.get(run, {}).values())

        def drop(self, run: str) -> None:
            self.runs.pop(run, None)

        def run_names(self) -> list[str]:
            return sorted(self.runs)

    return StatsCollector


def get_collector() -> Any:
    """The cluster's collector actor (created on first use, then reused)."""
    return (
        _actor_class()
        .options(name=COLLECTOR, namespace=NAMESPACE, get_if_exists=True, lifetime="detached")
        .remote()
    )


def report(
    collector: Any, run: str, items: Sequence[bytes], paths: Sequence[str | None], stats: ReadStats
) -> None:
    """Send one block's stats for run ``run``; waits for the ack, so that every block's report
    has arrived by the time the block's output exists."""
    import ray

    ray.get(collector.report.remote(run, block_key(items, paths), to_dict(stats)))


def collect(run: str) -> ReadStats:
    """Merged totals of run ``run`` (empty stats if nothing was reported)."""
    import ray

    if run in _CLOSED:
        return _CLOSED[run]
    try:
        actor = ray.get_actor(COLLECTOR, namespace=NAMESPACE)
    except ValueError:
        return ReadStats()
    return from_dicts(ray.get(actor.summary.remote(run)))


def close(run: str) -> ReadStats:
    """End run ``run``: keep its final totals in this process, drop them from the actor."""
    import ray

    totals = collect(run)
    _CLOSED[run] = totals
    try:
        ray.get(ray.get_actor(COLLECTOR, namespace=NAMESPACE).drop.remote(run))
    except ValueError:  # no actor: nothing was reported
        pass
    return totals


def open_runs() -> list[str]:
    """The runs the cluster's collector still holds (for tests and monitoring)."""
    import ray

    try:
        return list(ray.get(ray.get_actor(COLLECTOR, namespace=NAMESPACE).run_names.remote()))
    except ValueError:
        return []
