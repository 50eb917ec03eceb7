"""Transitions as columns, and their Arrow layout (the on-disk and in-flight row format).

One row per transition, no padding, no pickled objects::

    actions        int64                                   (first: RLlib counts rows from it)
    x              list<fixed_size_list<float32, F>>       node features of obs_t
    edge_index     list<fixed_size_list<int64, 2>>         (src, dst) pairs, local indices
    edge_attr      list<fixed_size_list<float32, D>>       only if the space has edge features
    node_mask      list<bool>                              only for NodeAction spaces: allowed nodes
    edge_mask      list<bool>                              only for EdgeAction spaces: allowed edges
    rewards        float32
    terminateds    bool      True on the last step of a terminated episode
    truncateds     bool      True on the last step of a truncated episode
    value_targets  float32   discounted returns-to-go (see offline_graph.data.learning.returns)
    eps_id         string (dictionary-encoded)
    t              int64     step index within the episode (the agent's step, multi-agent)
    agent_id       string (dictionary-encoded)  multi-agent rows only: the agent's id (``str``)
    agent_id_int   bool      multi-agent rows only: the recorded id was an int
    env_t          int64     multi-agent rows only: the env step of the agent's observation
    final_x, final_edge_index, [final_edge_attr], [final_node_mask | final_edge_mask]
                   as x, edge_index, ...: the episode's final observation (the next
                   observation of its last step), on the row that ends the episode
                   (``terminateds`` or ``truncateds``) and null on every other row

``edge_index`` is stored edge-major (``[E, 2]`` per row) because Arrow lists are row-major;
:func:`table_to_batch` turns it into PyG's ``[2, sumE]``.

The ``final_*`` columns hold one graph per episode (the nulls cost an offset and a validity
bit per row, no values); value-based training (IQL, CQL) bootstraps a truncated episode from
it, BC and MARWIL never read it (:data:`BOOKKEEPING_COLUMNS`). ``offline-graph convert``
writes them and marks the files' metadata ``"final_obs": true`` (single-agent rows); rows
converted before have none, and :meth:`Transitions.from_table` then leaves
:attr:`Transitions.final_obs` None (value-based training refuses them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from offline_graph.data.graphs.collate import collate
from offline_graph.data.graphs.columns import BATCHING_RULES, GraphColumns, counts_to_ptr
from offline_graph.data.errors import SchemaError
from offline_graph.data.graphs.graph_arrow import graph_arrays, graph_arrays_at, table_to_graphs
from offline_graph.data.learning.returns import discounted_returns
from offline_graph.data.episodes.validation import Episode, EpisodeSpec

GRAPH_COLUMNS = tuple(BATCHING_RULES)
"""An observation's columns in the row layout (``edge_attr``, the masks and ``globals`` where
the spec has them), in storage order."""
FINAL = "final_"
FINAL_COLUMNS = tuple(FINAL + k for k in GRAPH_COLUMNS)
"""The final observation's columns (module doc), in storage order."""
LEARNER_COLUMNS = ("actions", *GRAPH_COLUMNS, "value_targets")
"""The columns the prelearner emits for the learners (bookkeeping columns stay behind)."""
# Columns the BC / MARWIL losses never read; dropped on the way to the learner.
BOOKKEEPING_COLUMNS = (
    "rewards",
    "terminateds",
    "truncateds",
    "eps_id",
    "t",
    "agent_id",
    "agent_id_int",
    "env_t",
    *FINAL_COLUMNS,
)


def column_kind(name: str) -> str:
    """A row column's kind: a typed graph's ``x:job`` -> ``x`` (``final_x:job`` -> ``final_x``),
    any other name itself (the names the column lists above hold)."""
    return name.partition(":")[0]


def is_bookkeeping(name: str) -> bool:
    """Whether the BC / MARWIL losses never read column ``name`` (:data:`BOOKKEEPING_COLUMNS`,
    a typed graph's final columns too)."""
    return column_kind(name) in BOOKKEEPING_COLUMNS


@dataclass
class Transitions:
    """Columnar transitions (see the module docstring for the fields)."""

    obs: GraphColumns
    actions: np.ndarray
    rewards: np.ndarray
    terminateds: np.ndarray
    truncateds: np.ndarray
    value_targets: np.ndarray
    episode_index: np.ndarray
    episode_ids: list[str]
    t: np.ndarray
    agent_ids: list[Any] | None = None
    """Multi-agent only: the agent id of each entry of ``episode_ids`` (one entry per agent
    of a multi-agent episode, all with the episode's id)."""
    env_t: np.ndarray | None = None
    """Multi-agent only: per transition, the env step at which the agent observed ``obs``."""
    final_obs: GraphColumns | None = None
    """Per entry of ``episode_ids``: the episode's final observation (the next observation of
    its last step; value-based training bootstraps from it when the episode was truncated),
    or None where the source did not keep them (rows converted without ``final_*`` columns).
    Read only through a row that ends its episode: an entry of converted rows whose last step
    is not among them (an episode split across batches) holds a graph without nodes."""

    def __len__(self) -> int:
        return len(self.actions)

    def __repr__(self) -> str:
        return f"Transitions(n={len(self)}, episodes={len(self.episode_ids)}, obs={self.obs!r})"

    @classmethod
    def from_episodes(
        cls,
        episodes: Sequence[Episode],
        gamma: float,
        agent_ids: Sequence[Any] | None = None,
        env_t: Sequence[np.ndarray] | None = None,
    ) -> "Transitions":
        """All steps of ``episodes`` (final observations in ``final_obs``), returns-to-go with
        ``gamma`` (over each episode's own steps and rewards). Multi-agent: ``agent_ids[i]`` is
        the agent whose steps ``episodes[i]`` holds and ``env_t[i]`` its observations' env steps."""
        out = cls.from_steps(
            GraphColumns.concat([e.obs.slice(0, len(e)) for e in episodes]),
            np.concatenate([e.actions for e in episodes]),
            np.concatenate([e.rewards for e in episodes]),
            np.fromiter((len(e) for e in episodes), np.int64, len(episodes)),
            [e.terminated for e in episodes],
            [e.truncated for e in episodes],
            [e.id for e in episodes],
            gamma,
            t_started=np.fromiter((e.t_started for e in episodes), np.int64, len(episodes)),
        )
        out.final_obs = GraphColumns.concat([e.obs.slice(len(e), len(e) + 1) for e in episodes])
        if agent_ids is not None:
            out.agent_ids = list(agent_ids)
        if env_t is not None:
            out.env_t = np.concatenate(
                [np.asarray(v, np.int64)[: len(e)] for v, e in zip(env_t, episodes)]
                or [np.zeros(0, np.int64)]
            )
        return out

    @classmethod
    def from_steps(
        cls,
        obs: GraphColumns,
        actions: np.ndarray,
        rewards: np.ndarray,
        lengths: np.ndarray,
        terminated: Sequence[bool],
        truncated: Sequence[bool],
        episode_ids: Sequence[str],
        gamma: float,
        t_started: np.ndarray | None = None,
    ) -> "Transitions":
        """Whole episodes given step by step (``lengths[i]`` steps of episode i, in order: its
        observations, actions, rewards) and per episode how it ended -> transitions with the
        per-step bookkeeping (end flags on the last step, returns-to-go with ``gamma``, ``t``:
        ``t_started[i]``, default 0, for the first step of episode i, as RLlib counts)."""
        ptr = counts_to_ptr(lengths)
        total = int(ptr[-1])
        rewards = np.asarray(rewards).astype(np.float32)
        terminateds = np.zeros(total, dtype=bool)
        truncateds = np.zeros(total, dtype=bool)
        terminateds[ptr[1:] - 1] = terminated
        truncateds[ptr[1:] - 1] = truncated
        return cls(
            obs=obs,
            actions=np.asarray(actions).astype(np.int64),
            rewards=rewards,
            terminateds=terminateds,
            truncateds=truncateds,
            value_targets=discounted_returns(rewards, ptr, gamma),
            episode_index=np.repeat(np.arange(len(lengths), dtype=np.int32), lengths),
            episode_ids=list(episode_ids),
            t=np.arange(total, dtype=np.int64)
            - np.repeat(ptr[:-1] if t_started is None else ptr[:-1] - t_started, lengths),
        )

    def take(self, idx: np.ndarray) -> "Transitions":
        """Rows ``idx`` (any order, repeats allowed)."""
        return Transitions(
            obs=self.obs.take(idx),
            actions=self.actions[idx],
            rewards=self.rewards[idx],
            terminateds=self.terminateds[idx],
            truncateds=self.truncateds[idx],
            value_targets=self.value_targets[idx],
            episode_index=self.episode_index[idx],
            episode_ids=self.episode_ids,
            t=self.t[idx],
            agent_ids=self.agent_ids,
            env_t=None if self.env_t is None else self.env_t[idx],
            final_obs=self.final_obs,
        )

    @staticmethod
    def concat(parts: Sequence["Transitions"]) -> "Transitions":
        """Row-wise concatenation (episode ids re-indexed)."""
        if len(parts) == 1:
            return parts[0]
        shift = np.cumsum([0] + [len(p.episode_ids) for p in parts[:-1]])
        multi = _all_multi_agent(parts)
        return Transitions(
            obs=GraphColumns.concat([p.obs for p in parts]),
            actions=np.concatenate([p.actions for p in parts]),
            rewards=np.concatenate([p.rewards for p in parts]),
            terminateds=np.concatenate([p.terminateds for p in parts]),
            truncateds=np.concatenate([p.truncateds for p in parts]),
            value_targets=np.concatenate([p.value_targets for p in parts]),
            episode_index=np.concatenate([p.episode_index + np.int32(s) for p, s in zip(parts, shift)]),
            episode_ids=[i for p in parts for i in p.episode_ids],
            t=np.concatenate([p.t for p in parts]),
            agent_ids=None if multi is None else [a for p in parts for a in p.agent_ids or ()],
            env_t=None if multi is None else np.concatenate([p.env_t for p in parts]),  # type: ignore[misc]
            final_obs=(
                GraphColumns.concat([p.final_obs for p in parts])  # type: ignore[misc]
                if all(p.final_obs is not None for p in parts)
                else None
            ),
        )

    @classmethod
    def from_table(cls, table: pa.Table) -> "Transitions":
        """Converted transition rows (the Arrow layout above, ``eps_id`` and ``t`` required;
        multi-agent rows add ``agent_id``, ``agent_id_int`` and ``env_t``) -> Transitions.
        Rows of one episode (and agent) keep their order; an episode's entry is per
        (episode, agent)."""
        eids = table.column("eps_id").cast(pa.string()).to_pylist()
        multi = "agent_id" in table.column_names
        aids = table.column("agent_id").cast(pa.string()).to_pylist() if multi else [None] * len(eids)
        keys = list(dict.fromkeys(zip(eids, aids)))
        index = {k: i for i, k in enumerate(keys)}
        n = table.num_rows

        def column(name: str, dtype: Any) -> np.ndarray:
            if name not in table.column_names:
                return np.zeros(n, dtype=dtype)
            return table.column(name).to_numpy(zero_copy_only=False).astype(dtype)

        out = cls(
            obs=table_to_graphs(table),
            actions=column("actions", np.int64),
            rewards=column("rewards", np.float32),
            terminateds=column("terminateds", bool),
            truncateds=column("truncateds", bool),
            value_targets=column("value_targets", np.float32),
            episode_index=np.fromiter((index[k] for k in zip(eids, aids)), np.int32, n),
            episode_ids=[k[0] for k in keys],
            t=column("t", np.int64),
        )
        if multi:
            flags = dict(zip(aids, table.column("agent_id_int").to_pylist()))
            out.agent_ids = [int(a) if flags.get(a) else a for _, a in keys]
            out.env_t = column("env_t", np.int64)
        out.final_obs = _final_graphs(table, out)
        return out

    def to_arrow(self, columns: Sequence[str] | None = None) -> pa.Table:
        """The Arrow row layout of the module docstring (optionally only ``columns``; the
        others are not built)."""
        arrays: dict[str, pa.Array] = {"actions": pa.array(self.actions)}
        arrays.update(graph_arrays(self.obs))
        builders = {
            "rewards": lambda: pa.array(self.rewards),
            "terminateds": lambda: pa.array(self.terminateds),
            "truncateds": lambda: pa.array(self.truncateds),
            "value_targets": lambda: pa.array(self.value_targets),
            "eps_id": lambda: pa.DictionaryArray.from_arrays(
                pa.array(self.episode_index, pa.int32()), pa.array(self.episode_ids, pa.string())
            ),
            "t": lambda: pa.array(self.t),
        }
        if self.agent_ids is not None and self.env_t is not None:
            agents = self.agent_ids
            builders["agent_id"] = lambda: pa.DictionaryArray.from_arrays(
                pa.array(self.episode_index, pa.int32()), pa.array([str(a) for a in agents], pa.string())
            )
            builders["agent_id_int"] = lambda: pa.array(
                np.fromiter((isinstance(a, int) for a in agents), bool, len(agents))[self.episode_index]
            )
            env_t = self.env_t
            builders["env_t"] = lambda: pa.array(env_t)
        for name, build in builders.items():
            if columns is None or name in columns:
                arrays[name] = build()
        if self.final_obs is not None and (columns is None or set(FINAL_COLUMNS) & set(columns)):
            ends = np.flatnonzero(self.terminateds | self.truncateds)
            finals = graph_arrays_at(self.final_obs.take(self.episode_index[ends]), ends, len(self))
            arrays.update({FINAL + k: v for k, v in finals.items()})
        if columns is not None:
            arrays = {k: v for k, v in arrays.items() if column_kind(k) in columns}
        return pa.table(arrays)


def _final_graphs(table: pa.Table, trans: Transitions) -> GraphColumns | None:
    """The ``final_*`` columns of converted rows -> one graph per entry of ``trans`` (module
    doc); None without them, or when a row that ends an episode has none (rows of an older
    convert in the same batch)."""
    first = next((c for c in table.column_names if column_kind(c) == FINAL + "x"), None)
    if first is None:
        return None
    has = table.column(first).is_valid().to_numpy(zero_copy_only=False)
    ends = trans.terminateds | trans.truncateds
    if (has & ~ends).any():
        row = int(np.flatnonzero(has & ~ends)[0])
        raise SchemaError(
            f"converted rows, episode {trans.episode_ids[trans.episode_index[row]]!r} step "
            f"{int(trans.t[row])}: final_x must be null on a row that does not end its episode "
            "(found a final observation). The rows were not written by offline-graph convert; "
            "convert the episode files again.",
            reason="schema",
        )
    if (ends & ~has).any():
        return None
    names = [c for c in table.column_names if c.startswith(FINAL)]
    graphs = table_to_graphs(table.select(names).filter(pa.array(has)), prefix=FINAL)
    pick = np.full(len(trans.episode_ids), len(graphs), dtype=np.int64)  # no final row: no graph
    pick[trans.episode_index[has]] = np.arange(len(graphs))
    return GraphColumns.concat([graphs, graphs.without_nodes(1)]).take(pick)


def _all_multi_agent(parts: Sequence["Transitions"]) -> bool | None:
    """True if every part is multi-agent, None if none is; raises on a mix."""
    return one_agent_kind("Transitions.concat", [p.agent_ids is not None for p in parts])


def one_agent_kind(where: str, multi_agent: Sequence[bool]) -> bool | None:
    """True if every flag of ``multi_agent`` (a part is multi-agent) is set, None if none is;
    raises on a mix (``where`` names the caller)."""
    flags = set(multi_agent)
    if len(flags) > 1:
        raise ValueError(
            f"{where}: parts must be all single-agent or all multi-agent (found both). "
            "Keep one buffer per module."
        )
    return True if flags == {True} else None


STEP_FIELDS = (
    pa.field("rewards", pa.float32()),
    pa.field("terminateds", pa.bool_()),
    pa.field("truncateds", pa.bool_()),
    pa.field("value_targets", pa.float32()),
    pa.field("eps_id", pa.dictionary(pa.int32(), pa.string())),
    pa.field("t", pa.int64()),
)
"""The Arrow fields of a transition row after its action and graph columns (single-agent
rows, :func:`transition_schema`, and multi-agent ones, ``offline_graph.jobs.ma_convert``)."""


def transition_schema(spec: "EpisodeSpec") -> pa.Schema:
    """The Arrow schema of transition rows for ``spec`` (column order as in the docstring; the
    ``final_*`` columns are nullable)."""

    def ragged(t: pa.DataType, width: int) -> pa.DataType:
        return pa.list_(pa.list_(t, width))

    if spec.typed is not None:
        fields = [pa.field("actions", pa.int64()), *_typed_fields(spec, ragged)]
        graphs = list(fields[1:])
        fields += STEP_FIELDS
        return pa.schema(fields + [pa.field(FINAL + f.name, f.type, nullable=True) for f in graphs])
    fields = [
        pa.field("actions", pa.int64()),
        pa.field("x", ragged(pa.float32(), spec.num_features)),
        pa.field("edge_index", ragged(pa.int64(), 2)),
    ]
    if spec.edge_dim is not None:
        fields.append(pa.field("edge_attr", ragged(pa.float32(), spec.edge_dim)))
    if spec.action_level is not None:
        fields.append(pa.field(f"{spec.action_level}_mask", pa.list_(pa.bool_())))
    if spec.globals is not None:
        fields.append(pa.field("globals", ragged(pa.float32(), spec.globals.dim)))
    graphs = list(fields[1:])
    fields += STEP_FIELDS
    return pa.schema(fields + [pa.field(FINAL + f.name, f.type, nullable=True) for f in graphs])


def _typed_fields(spec: "EpisodeSpec", ragged: Any) -> list[pa.Field]:
    """A typed graph's columns in :func:`graph_arrays`' order (``<column>:<part>``)."""
    assert spec.typed is not None  # noqa: S101 (the caller's branch)
    fields = []
    for i, (name, feat) in enumerate(spec.typed.node_dims.items()):
        fields.append(pa.field(f"x:{name}", ragged(pa.float32(), feat)))
        if spec.action_level == "node" and spec.node_type == name:
            fields.append(pa.field(f"node_mask:{name}", pa.list_(pa.bool_())))
        if i == 0 and spec.globals is not None:
            fields.append(pa.field("globals", ragged(pa.float32(), spec.globals.dim)))
    for name, dim in spec.typed.edge_dims.items():
        fields.append(pa.field(f"edge_index:{name}", ragged(pa.int64(), 2)))
        if dim is not None:
            fields.append(pa.field(f"edge_attr:{name}", ragged(pa.float32(), dim)))
    return fields


def table_to_batch(table: pa.Table, drop: Sequence[str] = BOOKKEEPING_COLUMNS) -> dict[str, object]:
    """A transition table -> ``{"actions", "obs": {x, edge_index, [edge_attr], batch, ptr}, ...}``.

    Every other fixed-width column (``value_targets``, user columns) is passed through as a
    numpy array; ``drop`` names columns the loss never reads.
    """
    out: dict[str, object] = {"actions": table.column("actions").to_numpy()}
    out["obs"] = collate(table_to_graphs(table))
    for name in table.column_names:
        kind = column_kind(name)
        if kind in GRAPH_COLUMNS or name == "actions" or kind in drop:
            continue
        out[name] = table.column(name).to_numpy()
    return out
