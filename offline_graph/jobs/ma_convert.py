"""The conversion job on multi-agent episode files: one row per agent step, every step once.

Same job as :mod:`offline_graph.jobs.convert` (one fused read -> convert -> write task per
input unit, per-block accounting files, deterministic file names and row order), but each
agent's steps are validated against that agent's own spaces
(:func:`offline_graph.data.analysis.ma_stats.resolve_agent_spaces`: the file metadata's
``agent_spaces``, else inferred per agent id from the data) and no agent -> module mapping is
baked into the rows: one conversion serves any policy mapping (the ``agent_id`` column is what
a mapping reads).

Row layout (:data:`MA_SCHEMA`, the same schema in every output file)::

    actions        int64
    x              list<list<float32>>                 node features of obs_t; the inner width
                                                       is the agent's F (agents differ)
    edge_index     list<fixed_size_list<int64, 2>>     (src, dst) pairs, local indices
    edge_attr      list<list<float32>>                 inner width D; null for agents whose
                                                       observation space has no edge features
    node_mask      list<bool>                          NodeAction agents; null for the others
    edge_mask      list<bool>                          EdgeAction agents; null for the others
    globals        list<list<float32>>                 graph-level parts, one inner list of the
                                                       agent's G values; null for agents whose
                                                       observation space is a plain Graph
    rewards        float32   the agent's own reward
    terminateds    bool      True on the agent's last step if its part terminated
    truncateds     bool      True on the agent's last step if its part was truncated
    value_targets  float32   discounted returns-to-go of the agent's own rewards (gamma)
    eps_id         dictionary<int32, string>   the multi-agent episode's id
    t              int64     the agent's step (its own count, RLlib's agent timestep)
    agent_id       dictionary<int32, string>   str(agent id)
    agent_id_int   bool      the recorded agent id was an int
    env_t          int64     the env step at which the agent observed obs_t

``(eps_id, agent_id, t)`` is unique. Within a task's file, rows come episode by episode, and
within an episode agent by agent (the recorded order), step by step. The file metadata holds
``kind: transitions``, ``multi_agent: true``, ``agent_spaces`` (``{agent_id: {observation_space,
action_space}}``), ``gamma`` and the recording facts; ``_conversion_report.json`` adds
``agents``: per agent id its transitions, episodes, spaces and where they came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError, GraphValidationError
from offline_graph.data.store.format import make_metadata
from offline_graph.data.analysis.ma_stats import AgentSpaces, read_parts, resolve_agent_spaces
from offline_graph.data.episodes.reader import ReadStats, batch_columns
from offline_graph.data.learning.transitions import STEP_FIELDS, Transitions
from offline_graph.data.episodes.validation import EpisodeSpec
from offline_graph.jobs import conversion
from offline_graph.rllib.offline import accounting

_ragged = pa.list_(pa.list_(pa.float32()))
MA_SCHEMA = pa.schema(
    [
        pa.field("actions", pa.int64()),
        pa.field("x", _ragged),
        pa.field("edge_index", pa.list_(pa.list_(pa.int64(), 2))),
        pa.field("edge_attr", _ragged),
        pa.field("node_mask", pa.list_(pa.bool_())),
        pa.field("edge_mask", pa.list_(pa.bool_())),
        pa.field("globals", _ragged),
        *STEP_FIELDS,
        pa.field("agent_id", pa.dictionary(pa.int32(), pa.string())),
        pa.field("agent_id_int", pa.bool_()),
        pa.field("env_t", pa.int64()),
    ]
)
"""The Arrow schema of multi-agent transition rows (module docstring)."""


@dataclass(frozen=True)
class MultiAgentConvertConfig:
    """Settings of one multi-agent conversion run (as :class:`~offline_graph.jobs.convert.ConvertConfig`
    without a single spec: each agent's spaces come from the metadata or the data)."""

    input: str
    output: str
    gamma: float = 0.99
    on_error: Literal["raise", "skip"] = "raise"
    episodes_per_batch: int = 256
    episodes_per_task: int = 512
    num_workers: int | None = None
    cpus_per_worker: float = 1.0
    source: dict = field(default_factory=dict)
    agent_spaces: AgentSpaces | None = None
    """Per-agent specs (None: resolved from the input)."""
    data: Any = field(default=None, compare=False, repr=False)
    """``input`` resolved already (:class:`offline_graph.env.data_input.DataInput`): its scan
    (and per-agent spaces) are used, the input is not listed again. None: resolved here."""


def conform(table: pa.Table) -> pa.Table:
    """A (single-spec) transition table -> :data:`MA_SCHEMA` (widths unfixed, nulls added)."""
    n = table.num_rows
    columns = []
    for f in MA_SCHEMA:
        if f.name in table.column_names:
            columns.append(table.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(columns, schema=MA_SCHEMA)


def parts_table(parts: list[Any], gamma: float) -> pa.Table:
    """Validated agent parts -> their rows in part order (one Transitions per spec)."""
    groups: dict[EpisodeSpec, list[int]] = {}
    for i, part in enumerate(parts):
        groups.setdefault(part.spec, []).append(i)
    tables, order = [], []
    for idx in groups.values():
        group = [parts[i] for i in idx]
        tr = Transitions.from_episodes(
            [p.episode for p in group], gamma, [p.agent_id for p in group], [p.env_t for p in group]
        )
        tables.append(conform(tr.to_arrow(columns=MA_SCHEMA.names)))  # no final_* columns (yet)
        order.append(np.repeat(np.asarray(idx, np.int64), [len(p.episode) for p in group]))
    table = pa.concat_tables(tables)
    return table.take(pa.array(np.argsort(np.concatenate(order), kind="stable")))


@dataclass
class _Part:
    agent_id: Any
    env_t: np.ndarray
    episode: Any
    spec: EpisodeSpec


class ConvertMultiAgentEpisodes:
    """Ray Data map function: a batch of multi-agent episode rows -> all of their agent steps.
    ``spec``: the per-agent specs as a tuple of ``(agent key, EpisodeSpec)`` (hashable, for
    :func:`offline_graph.jobs.conversion.convert_block`'s worker cache)."""

    def __init__(self, spec: Any, gamma: float, on_error: str, stats_dir: str | None) -> None:
        self.specs = dict(spec)
        self.gamma, self.on_error, self.stats_dir = gamma, on_error, stats_dir

    def __call__(self, batch: pa.Table) -> pa.Table:
        items, paths = batch_columns(batch)
        stats = ReadStats()
        parts = read_parts(items, paths, self.specs, on_error=self.on_error, stats=stats)  # type: ignore[arg-type]
        if self.stats_dir is not None:
            conversion.save_stats(self.stats_dir, accounting.block_key(items, paths), stats)
        parts = [p for p in parts if len(p.episode)]
        if not parts:
            return MA_SCHEMA.empty_table()
        return parts_table(
            [_Part(p.agent_id, p.env_t, p.episode, self.specs[p.module_id]) for p in parts], self.gamma
        )


def convert_multi_agent(
    cfg: MultiAgentConvertConfig, map_class: type = ConvertMultiAgentEpisodes
) -> dict[str, Any]:
    """Run the job; returns (and writes next to the rows) the JSON report."""
    scan, start = conversion.start(cfg)
    if cfg.agent_spaces is not None:
        spaces = cfg.agent_spaces
    elif cfg.data is not None:
        spaces = cfg.data.resolve_agent_spaces("convert")
    else:
        spaces = resolve_agent_spaces(scan, scan.metadata, "convert")
    typed = sorted(str(key) for key, spec in spaces.specs.items() if spec.typed is not None)
    if typed:
        raise ConfigError(
            f"convert: every agent's observation space must be a Graph or a Dict with one for "
            f"multi-agent rows (found typed graphs for {typed}). Multi-agent converted rows of "
            "typed graphs are not built; train from the episode files (input_read_episodes=True)."
        )
    meta = {**cfg.source, "multi_agent": True, "agent_spaces": spaces.metadata(), "gamma": cfg.gamma}
    schema = MA_SCHEMA.with_metadata(make_metadata("transitions", **meta))
    total = conversion.run(scan, cfg, tuple(sorted(spaces.specs.items())), map_class, schema)
    rows, episodes, per_agent, bytes_out = verify_output(cfg.output)
    counts = total.as_dict()
    by_agent = counts.pop("transitions_by_module", {})
    agents = {
        key: {
            "transitions": per_agent.get(key, (0, 0))[0],
            "episodes": per_agent.get(key, (0, 0))[1],
            **spaces.texts.get(key, {}),
        }
        for key in sorted(set(spaces.texts) | set(per_agent))
    }
    config = conversion.settings(cfg, "agent_spaces")
    extra = {"multi_agent": True, "transitions_by_agent": by_agent, "agents": agents}
    return conversion.report(
        cfg, scan, start, total, counts, (rows, episodes, bytes_out), "agent steps", config, **extra
    )


def verify_output(output: str) -> tuple[int, int, dict[str, tuple[int, int]], int]:
    """(rows, distinct episodes, per agent (rows, episodes), bytes); (eps_id, agent_id, t)
    must be unique."""
    files = storage.list_dir(output, ".parquet")
    if not files:
        return 0, 0, {}, 0
    tables = []
    for f in files:
        with storage.open_input_file(f) as fh:
            part = pq.read_table(fh, columns=["eps_id", "agent_id", "t"])
        tables.append(
            pa.table(
                {k: part.column(k).cast(pa.string()) for k in ("eps_id", "agent_id")}
                | {"t": part.column("t")}
            )
        )
    keys = pa.concat_tables(tables)
    rows = keys.num_rows
    keyed = keys.append_column("n", keys.column("t"))
    pairs = keyed.group_by(["eps_id", "agent_id", "t"]).aggregate([("n", "count")])
    if pairs.num_rows != rows:
        repeated = pairs.filter(pc.greater(pairs.column("n_count"), 1))
        dup = repeated.column("eps_id")[0].as_py()
        raise GraphValidationError(
            f"convert, output {output}: (eps_id, agent_id, t) must be unique (found "
            f"{rows - pairs.num_rows} repeated agent steps, e.g. of episode {dup!r}). The same "
            "episode id occurs in several input blocks; de-duplicate the input files.",
            reason="duplicate_id",
        )
    agg = keys.group_by("agent_id").aggregate([("t", "count"), ("eps_id", "count_distinct")])
    per_agent = {
        a: (int(n), int(e))
        for a, n, e in zip(
            agg.column("agent_id").to_pylist(),
            agg.column("t_count").to_pylist(),
            agg.column("eps_id_count_distinct").to_pylist(),
        )
    }
    episodes = len(pc.unique(keys.column("eps_id")))
    return rows, episodes, per_agent, sum(storage.size(f) for f in files)


def from_convert_config(cfg: Any) -> MultiAgentConvertConfig:
    """A single-agent ``ConvertConfig`` -> the multi-agent settings (its spec is not used)."""
    names = [f for f in MultiAgentConvertConfig.__dataclass_fields__ if f != "agent_spaces"]  # data kept
    return MultiAgentConvertConfig(**{k: getattr(cfg, k) for k in names})
