"""The held-out split of episodes: which episodes training never sees, and reading them back.

An episode is held out when ``blake2b(f"{seed}:{episode_id}", digest_size=8)``, read as a
big-endian unsigned 64-bit integer and divided by ``2**64``, is below ``fraction``: the split
depends only on the episode id, the fraction and the seed, not on file order, batching or the
number of workers. The prelearner drops held-out episodes (episode files) or rows (converted
transition rows, by their ``eps_id``) and counts them (``episodes_held_out`` /
``transitions_held_out`` of :class:`~offline_graph.data.episodes.reader.ReadStats`: read = used +
rejected + held out); :func:`read_held_out` reads the same episodes back on the driver for
the offline metrics of ``offline-graph train``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from offline_graph.data.store import storage
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.errors import ConfigError
from offline_graph.data.episodes.reader import ReadStats, read_transitions
from offline_graph.data.learning.transitions import Transitions, table_to_graphs
from offline_graph.data.episodes.validation import EpisodeSpec

HOLDOUT_EVAL_LIMIT = 20_000
"""The driver reads held-out transitions for the offline metrics up to this many."""


def check_fraction(fraction: float, where: str) -> float:
    """``fraction`` as a float in [0, 1), or a ConfigError."""
    if not 0.0 <= float(fraction) < 1.0:
        raise ConfigError(
            f"{where}: holdout must be in [0, 1) (found {fraction!r}). It is the fraction of "
            "episodes kept out of training for the offline metrics; 0 holds out none."
        )
    return float(fraction)


def held_out(episode_ids: Sequence[str], fraction: float, seed: int = 0) -> np.ndarray:
    """Bool per id: whether that episode is held out (module docstring)."""
    if fraction <= 0.0:
        return np.zeros(len(episode_ids), dtype=bool)
    out = np.empty(len(episode_ids), dtype=bool)
    for i, eid in enumerate(episode_ids):
        digest = hashlib.blake2b(f"{int(seed)}:{eid}".encode(), digest_size=8).digest()
        out[i] = int.from_bytes(digest, "big") / 2.0**64 < fraction
    return out


def split_parts(
    parts: Sequence[Transitions], fraction: float, seed: int
) -> tuple[list[Transitions], list[Transitions], int]:
    """(kept parts, held-out parts, held-out episodes) of whole-episode transition parts."""
    kept: list[Transitions] = []
    held: list[Transitions] = []
    episodes = 0
    for part in parts:
        mask = held_out(part.episode_ids, fraction, seed)
        used = np.unique(part.episode_index)
        episodes += int(mask[used].sum())
        rows = mask[part.episode_index]
        if rows.any():
            held.append(part.take(np.flatnonzero(rows)))
            if not rows.all():
                kept.append(part.take(np.flatnonzero(~rows)))
        else:
            kept.append(part)
    return kept, held, episodes


def drop_held_out(
    parts: Sequence[Transitions], fraction: float, seed: int, stats: ReadStats
) -> list[Transitions]:
    """``parts`` without the held-out episodes; ``stats`` moves them from used to held out."""
    kept, held, episodes = split_parts(parts, fraction, seed)
    rows = sum(len(p) for p in held)
    stats.episodes_used -= episodes
    stats.transitions_used -= rows
    stats.episodes_held_out += episodes
    stats.transitions_held_out += rows
    return kept


def row_mask(table: pa.Table, fraction: float, seed: int) -> np.ndarray:
    """Bool per transition row: whether its episode (column ``eps_id``) is held out."""
    if "eps_id" not in table.column_names:
        raise ConfigError(
            f"holdout: column 'eps_id' must be present in transition rows to hold episodes out "
            f"(found columns {table.column_names}). Convert the episodes with offline-graph "
            "convert, or pass --holdout 0."
        )
    ids = table.column("eps_id").cast(pa.string())
    unique = pc.unique(ids)
    chosen = unique.filter(pa.array(held_out(unique.to_pylist(), fraction, seed)))
    return pc.is_in(ids, value_set=chosen).to_numpy(zero_copy_only=False).astype(bool)


def split_rows(table: pa.Table, fraction: float, seed: int) -> tuple[pa.Table, ReadStats, np.ndarray]:
    """(kept rows, their accounting, held-out row mask) of a converted transition table.

    Episodes are counted by their ``t == 0`` row (each occurs once in the data set, however
    the rows are split into batches): read = used + held out.
    """
    held = row_mask(table, fraction, seed)
    first = table.column("t").to_numpy() == 0 if "t" in table.column_names else np.zeros(len(held), bool)
    stats = ReadStats(
        episodes_read=int(first.sum()),
        episodes_used=int((first & ~held).sum()),
        transitions_used=int((~held).sum()),
        episodes_held_out=int((first & held).sum()),
        transitions_held_out=int(held.sum()),
    )
    return table.filter(pa.array(~held)), stats, held


@dataclass
class HeldOut:
    """Held-out transitions read back on the driver (at most ``limit``)."""

    obs: GraphColumns | None
    actions: np.ndarray
    episodes: int
    """Held-out episodes read (whole episodes, up to the limit)."""

    @property
    def transitions(self) -> int:
        return int(len(self.actions))


def read_held_out(
    files: Sequence[str],
    kind: Literal["episodes", "transitions"] | str,
    spec: EpisodeSpec,
    fraction: float,
    seed: int,
    *,
    on_error: Literal["raise", "skip"] = "raise",
    limit: int = HOLDOUT_EVAL_LIMIT,
) -> HeldOut:
    """The held-out episodes' observations and recorded actions, file by file, until ``limit``
    transitions are read (episode files are decoded and validated as the prelearner does)."""
    graphs: list[GraphColumns] = []
    actions: list[np.ndarray] = []
    episodes = total = 0
    for path in files:
        if total >= limit:
            break
        if kind == "transitions":
            table = pq.read_table(storage.open_input_file(path))
            mask = row_mask(table, fraction, seed)
            held_rows = table.filter(pa.array(mask))
            if held_rows.num_rows:
                graphs.append(table_to_graphs(held_rows))
                actions.append(held_rows.column("actions").to_numpy().astype(np.int64))
                if "t" in held_rows.column_names:
                    episodes += int((held_rows.column("t").to_numpy() == 0).sum())
                total += held_rows.num_rows
            continue
        table = pq.read_table(storage.open_input_file(path), columns=["item"])
        items = table.column("item").to_pylist()
        parts = read_transitions(items, [path] * len(items), spec, 0.99, on_error=on_error)
        _, held, count = split_parts(parts, fraction, seed)
        episodes += count
        for part in held:
            graphs.append(part.obs)
            actions.append(part.actions)
            total += len(part)
    return HeldOut(
        obs=GraphColumns.concat(graphs) if graphs else None,
        actions=np.concatenate(actions) if actions else np.zeros(0, np.int64),
        episodes=episodes,
    )
