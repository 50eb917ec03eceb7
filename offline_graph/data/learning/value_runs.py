"""Value-based training data (IQL, CQL, FQE): transitions with their next graphs, each graph
once (pure numpy / pyarrow).

A value update needs ``(s, a, r, s', terminated, truncated)`` and the action mask of ``s'``.
The next graph of step ``t`` is the graph of step ``t + 1``; shipping it again with every
transition would double the bytes. Instead a row is a *value run*: a chunk of up to ``length``
consecutive steps of one episode (cut from its first step, like the memory runs of
:mod:`offline_graph.data.learning.sequences`) plus the one graph after its last step: the next step's
observation, or the episode's final observation (:attr:`Transitions.final_obs`; stored, never
the next reset, so a truncated episode bootstraps from it). ``L`` steps ship ``L + 1`` graphs.

Sampling: a transition is drawn uniformly and its chunk is the run (chunks in proportion to
their length, so every transition is equally likely to be trained).

Converted rows come in batches that may cut an episode: its rows then sit in the buffer as
several pieces (one entry each), and a piece's last step may have neither its episode's next
step right after it nor the episode's end. Its next graph is then looked up by episode id and
step anywhere in the buffer (the next piece, once buffered); a step whose next observation is
nowhere in the buffer is not trained until it is (never a wrong graph).

Row layout (one Arrow row per run)::

    actions      list<int64>      per trained step
    rewards      list<float32>    per trained step
    terminateds  list<bool>       True only on the last step of a terminated episode
    truncateds   list<bool>       True only on the last step of a truncated episode
    x, edge_index, [edge_attr], [node_mask | edge_mask]
                 list<list<...>>  the run's L steps' graphs, then the next graph
    steps        int32            L (marks the layout)

:func:`collate_value_runs` turns rows into the learner batch: the PyG union of all ``G``
graphs (``obs``: ``x``, ``edge_index``, ``batch``, ``ptr``, masks) with ``obs["target"] [T]``
(the graph of each trained step ``s``) and ``obs["next_index"] [T]`` (the graph of its
``s'``), and ``actions``, ``rewards``, ``terminateds``, ``truncateds`` ``[T]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from offline_graph.data.graphs.collate import collate
from offline_graph.data.graphs.columns import GraphColumns, concat_ranges
from offline_graph.data.errors import SchemaError
from offline_graph.data.learning.sequences import _flatten, _offsets, segment_starts
from offline_graph.data.learning.transitions import Transitions, graph_arrays, table_to_graphs

STEP_COLUMNS = ("actions", "rewards", "terminateds", "truncateds")
MARKER = "steps"


def sample_value_runs(
    trans: Transitions, rng: np.random.Generator, num_runs: int, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """``num_runs`` runs as ``(start, stop)`` row ranges of consecutive steps of one episode,
    each step's next observation known (module doc; no runs when no step's is)."""
    n = len(trans)
    starts = segment_starts(trans)
    first = np.unique(starts)
    stop = np.append(first[1:], n)
    last = stop - 1
    ends = trans.terminateds | trans.truncateds
    unknown = ~ends[last]
    unknown[unknown] = next_rows(trans, last[unknown]) < 0
    stop = stop - unknown  # such a segment's last step is not trained (yet)
    seg_end = np.repeat(stop, np.diff(np.append(first, n)))
    rows = np.flatnonzero(np.arange(n) < seg_end)
    if not rows.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pick = rows[rng.integers(0, len(rows), size=int(num_runs))]
    seg0 = starts[pick]
    chunk0 = seg0 + ((pick - seg0) // int(length)) * int(length)
    return chunk0, np.minimum(chunk0 + int(length), seg_end[pick])


def next_rows(trans: Transitions, rows: np.ndarray) -> np.ndarray:
    """Per entry of ``rows``: the row holding the same episode's next step (``t + 1``): the
    row after it, else any row of ``trans`` (another piece of the episode); -1 if none."""
    rows = np.asarray(rows, dtype=np.int64)
    n = len(trans)
    out = np.full(len(rows), -1, dtype=np.int64)
    inside = np.flatnonzero(rows + 1 < n)
    r = rows[inside]
    adjacent = (trans.episode_index[r + 1] == trans.episode_index[r]) & (trans.t[r + 1] == trans.t[r] + 1)
    out[inside[adjacent]] = r[adjacent] + 1
    todo = np.flatnonzero(out < 0)
    if not todo.size:
        return out
    agents = trans.agent_ids if trans.agent_ids is not None else [None] * len(trans.episode_ids)
    codes: dict[Any, int] = {}
    entry = np.fromiter((codes.setdefault(k, len(codes)) for k in zip(trans.episode_ids, agents)), np.int64)
    span = int(trans.t.max()) + 2
    key = entry[trans.episode_index] * span + trans.t
    order = np.argsort(key, kind="stable")
    want = key[rows[todo]] + 1
    pos = np.minimum(np.searchsorted(key[order], want), n - 1)
    found = key[order][pos] == want
    out[todo[found]] = order[pos[found]]
    return out


def next_graphs(trans: Transitions, stop: np.ndarray) -> GraphColumns:
    """The graph after the last step ``stop - 1`` of each run: the episode's final observation
    when that step ends the episode, else its next step's graph (:func:`next_rows`)."""
    last = np.asarray(stop, dtype=np.int64) - 1
    end = trans.terminateds[last] | trans.truncateds[last]
    if end.any() and trans.final_obs is None:
        ids = sorted({trans.episode_ids[i] for i in trans.episode_index[last[end]][:3]})
        raise SchemaError(
            f"value runs: the final observation of every episode must be kept (found none for "
            f"episodes {ids}). Value-based training reads episode files, or converted rows "
            "that carry final observations (offline-graph convert)."
        )
    nxt = np.full(len(last), -1, dtype=np.int64)
    nxt[~end] = next_rows(trans, last[~end])
    if (~end & (nxt < 0)).any():
        row = int(last[~end & (nxt < 0)][0])
        raise SchemaError(
            f"value runs, episode {trans.episode_ids[trans.episode_index[row]]!r} step "
            f"{int(trans.t[row])}: the next observation of a run's last step must be buffered "
            "(found neither the episode's next step nor its end). Draw runs with "
            "sample_value_runs, which leaves such steps out."
        )
    parts: list[GraphColumns] = []
    order = np.empty(len(last), dtype=np.int64)
    if (~end).any():
        parts.append(trans.obs.take(nxt[~end]))
    if end.any():
        parts.append(trans.final_obs.take(trans.episode_index[last[end]]))  # type: ignore[union-attr]
    order[np.flatnonzero(~end)] = np.arange(int((~end).sum()))
    order[np.flatnonzero(end)] = int((~end).sum()) + np.arange(int(end.sum()))
    return GraphColumns.concat(parts).take(order)


def value_runs_to_arrow(trans: Transitions, start: np.ndarray, stop: np.ndarray) -> pa.Table:
    """The value-run rows (module doc) of runs ``[start, stop)``."""
    steps = (stop - start).astype(np.int64)
    rows = concat_ranges(start, stop)
    step_off = pa.array(np.concatenate([[0], np.cumsum(steps)]).astype(np.int32))
    graph_off = pa.array(np.concatenate([[0], np.cumsum(steps + 1)]).astype(np.int32))
    run_of_row = np.repeat(np.arange(len(start)), steps)
    # each run's graphs: its steps, then its next graph (one interleaved take)
    own = trans.obs.take(rows)
    nxt = next_graphs(trans, stop)
    position = np.arange(len(rows)) + run_of_row  # step j of run r sits at graph_off[r] + j
    order = np.empty(len(rows) + len(start), dtype=np.int64)
    order[position] = np.arange(len(rows))
    order[np.cumsum(steps + 1) - 1] = len(rows) + np.arange(len(start))
    graphs = GraphColumns.concat([own, nxt]).take(order)
    columns: dict[str, pa.Array] = {
        "actions": pa.ListArray.from_arrays(step_off, pa.array(trans.actions[rows])),
        "rewards": pa.ListArray.from_arrays(step_off, pa.array(trans.rewards[rows])),
        "terminateds": pa.ListArray.from_arrays(step_off, pa.array(trans.terminateds[rows])),
        "truncateds": pa.ListArray.from_arrays(step_off, pa.array(trans.truncateds[rows])),
    }
    for name, arr in graph_arrays(graphs).items():
        columns[name] = pa.ListArray.from_arrays(graph_off, arr)
    columns[MARKER] = pa.array(steps.astype(np.int32))
    return pa.table(columns)


def is_value_table(names: Any) -> bool:
    return MARKER in names


def collate_value_runs(table: pa.Table) -> dict[str, Any]:
    """Value-run rows -> the learner batch (module doc)."""
    steps = table.column(MARKER).to_numpy().astype(np.int64)
    graph_cols = [c for c in table.column_names if c not in STEP_COLUMNS and c != MARKER]
    graphs = table_to_graphs(pa.table({c: _flatten(table.column(c)) for c in graph_cols}))
    if len(graphs) != int((steps + 1).sum()) or not np.array_equal(
        np.diff(_offsets(table.column("actions"))), steps
    ):
        raise SchemaError(
            f"collate_value_runs: each row must hold steps + 1 graphs and steps actions (found "
            f"{len(graphs)} graphs for {int(steps.sum())} steps in {len(steps)} rows). Rows come "
            "from offline_graph.data.learning.value_runs.value_runs_to_arrow."
        )
    obs = collate(graphs)
    first = np.concatenate([[0], np.cumsum(steps + 1)[:-1]]).astype(np.int64)
    target = concat_ranges(first, first + steps)
    obs.update(target=target, next_index=target + 1)
    out: dict[str, Any] = {"actions": _flatten(table.column("actions")).to_numpy().astype(np.int64)}
    out["obs"] = obs
    for name, dtype in (("rewards", np.float32), ("terminateds", bool), ("truncateds", bool)):
        out[name] = _flatten(table.column(name)).to_numpy(zero_copy_only=False).astype(dtype)
    return out
