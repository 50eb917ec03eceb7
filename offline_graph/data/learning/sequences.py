"""Runs of consecutive steps for modules with memory (stacked frames, recurrent state).

A module with ``frame_stack = k > 1`` or ``memory = "gru" | "node_gru"`` trains on *runs*:
an episode is cut into chunks of ``length = max_seq_len`` consecutive steps starting at its
first step; a run is one chunk (its **trained** steps) plus up to ``context`` steps just
before it in the same episode (frames ``k - 1`` for frame stacking, the burn-in for recurrent
state), never crossing an episode boundary. A run's graphs are stored once and shared by all
its transitions: a learner batch carries each distinct graph once, not k times.

Sampling: a transition is drawn uniformly from the buffer and its chunk is the run (chunks
are drawn in proportion to their length, so every transition is equally likely to be trained).

Row layout (one Arrow row per run; steps in order, context first)::

    actions        list<int64>                             per step (context steps: no loss)
    value_targets  list<float32>                           per step
    x              list<list<fixed_size_list<float32, F>>> steps -> nodes -> F
    edge_index     list<list<fixed_size_list<int64, 2>>>   steps -> edges (local ids)
    edge_attr      list<list<fixed_size_list<float32, D>>> only with edge features
    node_mask / edge_mask  list<list<bool>>                only for NodeAction / EdgeAction
    context        int32                                   leading steps without loss

:func:`collate_runs` turns rows into the learner batch: the PyG union of every step's graph
(``G`` graphs) plus ``prev [G]`` (the previous step's graph in the batch, -1 at a run's
start), ``seq_pos [G]``, ``node_prev [sumN]`` (the same node in the previous graph when both
graphs have the same node count, else -1; nodes keep their index within an episode) and
``target [B]`` (the trained steps' graphs); ``actions`` / ``value_targets`` are ``[B]``.
Nothing is padded: not in nodes, not in time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from offline_graph.data.graphs.collate import collate
from offline_graph.data.graphs.columns import concat_ranges
from offline_graph.data.learning.transitions import Transitions, graph_arrays, table_to_graphs

STEP_COLUMNS = ("actions", "value_targets")


def segment_starts(trans: Transitions) -> np.ndarray:
    """Per row: the first row of its run of consecutive steps of one episode."""
    n = len(trans)
    new = np.ones(n, dtype=bool)
    if n > 1:
        same = (trans.episode_index[1:] == trans.episode_index[:-1]) & (trans.t[1:] == trans.t[:-1] + 1)
        new[1:] = ~same
    first = np.flatnonzero(new)
    return first[np.cumsum(new) - 1]


def sample_runs(
    trans: Transitions, rng: np.random.Generator, num_runs: int, length: int, context: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``num_runs`` runs as ``(context_start, start, stop)`` row arrays (see module doc)."""
    starts = segment_starts(trans)
    n = len(trans)
    seg_end = np.empty(n, dtype=np.int64)  # per row: one past the last row of its segment
    first = np.unique(starts)
    ends = np.append(first[1:], n)
    seg_end[:] = np.repeat(ends, np.diff(np.append(first, n)))
    pick = rng.integers(0, n, size=int(num_runs))
    seg0 = starts[pick]
    chunk0 = seg0 + ((pick - seg0) // int(length)) * int(length)
    stop = np.minimum(chunk0 + int(length), seg_end[pick])
    ctx0 = np.maximum(seg0, chunk0 - int(context))
    return ctx0, chunk0, stop


def runs_to_arrow(trans: Transitions, ctx0: np.ndarray, start: np.ndarray, stop: np.ndarray) -> pa.Table:
    """The run rows (module doc) of runs ``[ctx0, stop)`` with trained steps from ``start``."""
    counts = (stop - ctx0).astype(np.int64)
    steps = trans.take(concat_ranges(ctx0, stop))
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    columns: dict[str, pa.Array] = {
        "actions": pa.ListArray.from_arrays(offsets, pa.array(steps.actions)),
        "value_targets": pa.ListArray.from_arrays(offsets, pa.array(steps.value_targets)),
    }
    for name, arr in graph_arrays(steps.obs).items():
        columns[name] = pa.ListArray.from_arrays(offsets, arr)
    columns["context"] = pa.array((start - ctx0).astype(np.int32))
    return pa.table(columns)


def is_run_table(names: Any) -> bool:
    return "context" in names


def collate_runs(table: pa.Table) -> dict[str, Any]:
    """Run rows -> the learner batch (module doc): ``{"actions", "value_targets", "obs"}``."""
    steps_per_run = np.diff(_offsets(table.column("actions")))
    inner = pa.table({name: _flatten(table.column(name)) for name in table.column_names if name != "context"})
    graphs = table_to_graphs(inner)
    obs = collate(graphs)
    g = len(graphs)
    run_first = np.concatenate([[0], np.cumsum(steps_per_run)[:-1]]).astype(np.int64)
    seq_pos = np.arange(g, dtype=np.int64) - np.repeat(run_first, steps_per_run)
    prev = np.where(seq_pos > 0, np.arange(g, dtype=np.int64) - 1, -1)
    nodes = graphs.num_nodes.astype(np.int64)
    ptr = obs["ptr"]
    same = np.zeros(g, dtype=bool)
    has = prev >= 0
    same[has] = nodes[has] == nodes[prev[has]]
    # node v of graph i -> the row of node v in graph prev[i] (same index), else -1
    local = np.arange(int(ptr[-1]), dtype=np.int64) - np.repeat(ptr[:-1], nodes)
    owner = obs["batch"]
    node_prev = np.where(same[owner], ptr[np.maximum(prev, 0)][owner] + local, -1)
    context = table.column("context").to_numpy().astype(np.int64)
    target = np.flatnonzero(seq_pos >= np.repeat(context, steps_per_run))
    obs.update(prev=prev, seq_pos=seq_pos, node_prev=node_prev.astype(np.int64), target=target)
    actions = inner.column("actions").to_numpy()
    values = inner.column("value_targets").to_numpy()
    return {"actions": actions[target], "obs": obs, "value_targets": values[target].astype(np.float32)}


def _offsets(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    off = arr.offsets.to_numpy().astype(np.int64)
    return off - off[0]


def _flatten(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return arr.flatten()
