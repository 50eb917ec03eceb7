"""Run-wide accounting of read / used / rejected episodes across Ray workers.

Workers (prelearner actors, conversion map actors) report a :class:`ReadStats` per input
block to one named actor, keyed by a digest of the block, so a block retried after a worker
died replaces its earlier report instead of counting twice. The driver reads the merged
totals with :func:`collect`.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

from offline_graph.reader import ReadStats

NAMESPACE = "offline_graph"


def block_key(items: Sequence[bytes], paths: Sequence[str | None]) -> str:
    """A digest naming one input block (same rows -> same key)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(str(len(items)).encode())
    h.update(str(paths[:1]).encode())
    for item in items:
        h.update(bytes(item[:128]) if isinstance(item, (bytes, bytearray, memoryview)) else repr(item).encode())
    return h.hexdigest()


def to_dict(stats: ReadStats) -> dict[str, Any]:
    return {"episodes_read": stats.episodes_read, "episodes_used": stats.episodes_used,
            "transitions_used": stats.transitions_used, "rejected": dict(stats.rejected),
            "examples": dict(stats.examples)}


def from_dicts(blocks: Sequence[dict[str, Any]]) -> ReadStats:
    total = ReadStats()
    for b in blocks:
        part = ReadStats(b["episodes_read"], b["episodes_used"], b["transitions_used"])
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
            self.blocks: dict[str, dict] = {}

        def report(self, key: str, stats: dict) -> None:
            self.blocks[key] = stats

        def summary(self) -> list[dict]:
            return list(self.blocks.values())

    return StatsCollector


def get_collector(name: str) -> Any:
    """The named collector actor (created on first use; lives until :func:`close`)."""
    return _actor_class().options(
        name=name, namespace=NAMESPACE, get_if_exists=True, lifetime="detached"
    ).remote()


def report(collector: Any, items: Sequence[bytes], paths: Sequence[str | None], stats: ReadStats) -> None:
    """Send one block's stats (fire and forget)."""
    collector.report.remote(block_key(items, paths), to_dict(stats))


def collect(name: str) -> ReadStats:
    """Merged totals of collector ``name`` (empty stats if nothing was reported)."""
    import ray

    try:
        actor = ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return ReadStats()
    return from_dicts(ray.get(actor.summary.remote()))


def close(name: str) -> None:
    """Kill collector ``name`` if it exists."""
    import ray

    try:
        ray.kill(ray.get_actor(name, namespace=NAMESPACE))
    except ValueError:
        pass
