"""Statistics of recorded episode files: sizes, returns and what padding would cost (no Ray).

Every episode row is decoded with :func:`~offline_graph.data.episodes.codec.decode_state` and
checked with :func:`~offline_graph.data.episodes.validation.validate_episode` against a spec derived from
the data itself: F from the first observation's ``x``, D from its ``edge_attr`` (None when
absent), k = the episode's largest action + 1 (with a data-derived k no action can be out of
range except a negative one, so a per-episode k checks exactly what a global one would).

Byte counts are those of the arrays as stored: ``x`` float32 ``N*F*4``, ``edge_index`` int64
``2*E*8``, ``edge_attr`` float32 ``E*D*4``. "Per transition" counts the observation each
transition carries (``obs_t`` for ``t < T``; the final observation of an episode belongs to
no transition, as in the converted transition rows). Node and edge count percentiles are
over all ``T+1`` observations of every episode (numpy's default linear interpolation).

Two padded layouts are priced per transition (one padded graph each):

* ``box``: a flat Box padded to the observed maximum node count ``N_max`` and edge count
  ``E_max``: ``N_max*F*4 + 2*E_max*8 + E_max*D*4``.
* ``repeated``: RLlib ``Repeated``-style worst case with at most ``n_max`` nodes and a dense
  ``n_max**2`` edge list: ``n_max*F*4 + n_max**2*2*8 + n_max**2*D*4``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from offline_graph.data.episodes.codec import RawEpisode, decode_state
from offline_graph.data.errors import (
    ConfigError,
    OfflineGraphError,
    where,
)
from offline_graph.data.store import storage
from offline_graph.data.store.files import ScanBuilder, episode_table, list_files, read_episode_table
from offline_graph.data.store.format import open_with_metadata
from offline_graph.data.episodes.validation import Episode, EpisodeSpec, validate_episode
from offline_graph.data.analysis.stats_table import format_table as format_table  # the table, re-exported
from offline_graph.data.analysis.typed_stats import inferred_spec, is_typed, metadata_spec, typed_bytes
from offline_graph.data.graphs.globals import GlobalsLayout, globals_layout

PERCENTILES = (50, 90, 99)


def episode_files(path: str) -> list[str]:
    """``path`` itself if it is a file, else the ``*.parquet`` files under it (subdirectories
    too, as RLlib's recorder writes ``DIR/<env>/run-*/``), sorted: :func:`files.list_files`."""
    if not storage.exists(path):
        raise ConfigError(
            f"inspect: PATH must be a Parquet file or a directory of them (found {path!r}, "
            "which does not exist). Check the path."
        )
    files = list_files(path)
    if not files:
        raise ConfigError(
            f"inspect: directory {path} must hold *.parquet episode files (found none). "
            "Record some with `offline-graph record --output DIR`."
        )
    return files


def spec_from_raw(raw: RawEpisode, layout: GlobalsLayout | None = None) -> EpisodeSpec:
    """The spec a raw episode implies: F and D from its first observation, k from its actions;
    ``layout``: the graph-level parts of the files' ``Dict`` observation space (their G).

    Malformed episodes get a spec anyway (F=0, k=1, ...); :func:`validate_episode` then
    reports what is wrong with them.
    """
    first = raw.observations[0] if len(raw.observations) else None
    if layout is not None and isinstance(first, dict) and isinstance(first.get(layout.graph_key), dict):
        first = first[layout.graph_key]  # the Dict's own nesting
    feat, edim = 0, None
    if isinstance(first, dict):
        x = np.asarray(first.get("x"))
        feat = int(x.shape[1]) if x.ndim == 2 else 0
        ea = first.get("edge_attr")
        if ea is not None:
            ea = np.asarray(ea)
            edim = int(ea.shape[1]) if ea.ndim == 2 else 0
    actions = np.asarray(raw.actions)
    k = 1
    if actions.size and actions.dtype.kind in "iu":
        k = max(int(actions.max()) + 1, 1)
    level = None
    if isinstance(first, dict) and first.get("action_mask") is not None:
        # a recorded mask means a selection space: node-level if it has one entry per node
        first_x = first.get("x")
        num_nodes = int(np.shape(first_x)[0]) if first_x is not None and np.ndim(first_x) else -1
        level = "node" if np.shape(first["action_mask"]) == (num_nodes,) else "edge"
        k = 1 << 40  # the space's limit is unknown here; only per-step ranges are checked
    spec = EpisodeSpec(num_features=feat, edge_dim=edim, num_actions=k, action_level=level)
    return spec if layout is None else replace(spec, globals=layout)


def metadata_layout(meta: dict[str, Any]) -> GlobalsLayout | None:
    """The graph-level parts of the observation space the file metadata names (None: a plain
    graph, or no space recorded)."""
    from offline_graph.data.graphs.space_text import parse_space

    text = meta.get("observation_space")
    return globals_layout(parse_space(text, "observation")) if isinstance(text, str) else None


@dataclass
class Collected:
    """Per-episode and per-observation numbers gathered from the files (input of summarize)."""

    files: list[str] = field(default_factory=list)
    versions: set[int] = field(default_factory=set)
    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    terminated: int = 0
    truncated: int = 0
    num_nodes: list[np.ndarray] = field(default_factory=list)
    """Node counts of all T+1 observations, one array per episode."""
    num_edges: list[np.ndarray] = field(default_factory=list)
    num_features: int | None = None
    edge_dim: int | None = None
    globals_dim: int = 0
    """G: the graph-level parts' length per observation (a ``Dict`` space; 0 without)."""
    max_action: int = -1
    action_level: str | None = None
    """"node" / "edge" when the episodes record action masks (selection actions)."""
    rejected: Counter = field(default_factory=Counter)
    first_error: dict[str, str] = field(default_factory=dict)
    typed: Any = None
    """A typed graph's space (:mod:`offline_graph.data.analysis.typed_stats`), None otherwise."""
    inferred: Any = None
    """Typed graphs without recorded spaces: the spec inferred once (first episodes)."""
    parts: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """Typed graphs: per node / edge type, its counts of all T+1 observations per episode."""

    def add(self, ep: Episode, spec: EpisodeSpec) -> None:
        for key, part in getattr(ep.obs, "parts", {}).items():  # typed graphs
            self.parts.setdefault(key, []).append(np.diff(part.edge_ptr if "__" in key else part.node_ptr))
        self.returns.append(float(np.sum(ep.rewards, dtype=np.float64)))
        self.lengths.append(len(ep))
        self.terminated += int(ep.terminated)
        self.truncated += int(ep.truncated)
        self.num_nodes.append(ep.obs.num_nodes)
        self.num_edges.append(ep.obs.num_edges)
        self.max_action = max(self.max_action, int(ep.actions.max()))
        self.action_level = self.action_level or spec.action_level


def _infer_typed(items: list[Any], row: int, file: str) -> EpisodeSpec:
    """The spec of typed episodes without recorded spaces: inferred from up to 20 decodable
    episodes of ``file`` from ``row`` on."""
    raws = []
    for i, item in enumerate(items[row : row + INFER_EPISODES]):
        try:
            raws.append(decode_state(item, file=file, row=row + i))
        except OfflineGraphError:
            continue
    return inferred_spec(raws, f"file {file}")


def _check_spec(spec: EpisodeSpec, col: Collected, ctx: str) -> None:
    """All episodes of a data set must share F and D, or the typed graph (the first valid
    episode sets them)."""
    if col.num_features is None:
        return
    if spec.num_features != col.num_features or spec.edge_dim != col.edge_dim or spec.typed != col.typed:

        def shown(typed: Any, feat: Any, edim: Any) -> str:
            return typed.text() if typed is not None else f"F={feat}, D={edim}"

        raise OfflineGraphError(
            f"{ctx}: observation sizes must match the rest of the data, "
            f"{shown(col.typed, col.num_features, col.edge_dim)} (found "
            f"{shown(spec.typed, spec.num_features, spec.edge_dim)}). The files mix episodes of "
            "different observation spaces; inspect them separately.",
            reason="spec_mismatch",
        )


INFER_EPISODES = 20
"""Typed episodes without recorded spaces: how many the spec is inferred from."""


def collect(
    path: str,
    *,
    strict: bool = False,
    files: list[str] | None = None,
    first: tuple[dict[str, Any], Any] | None = None,
    scan: ScanBuilder | None = None,
) -> Collected:
    """Decode and validate every row under ``path``.

    ``strict``: raise on the first invalid row (the error names file and row); otherwise
    invalid rows are skipped and counted per reason in ``rejected``. ``files``: ``path``'s
    files listed already; ``first``: the first one's (metadata, table) read already;
    ``scan``: receives each file's metadata and schema (the input's scan, no file reopened).
    """
    col = Collected()
    for index, file in enumerate(files if files is not None else episode_files(path)):
        meta, table = first if index == 0 and first is not None else read_episode_table(file)
        items = table.column("item").to_pylist()
        if scan is not None:
            scan.add(file, meta, table.schema, items)
        col.files.append(file)
        col.versions.add(int(meta["version"]))
        layout = metadata_layout(meta)
        typed = metadata_spec(meta)
        for row, item in enumerate(items):
            try:
                raw = decode_state(item, file=file, row=row)
                if typed is None and is_typed(raw):  # no spaces recorded: inferred once
                    typed = col.inferred = col.inferred or _infer_typed(items, row, file)
                spec = typed or spec_from_raw(raw, layout)
                col.typed = col.typed or spec.typed
                ep = validate_episode(raw, spec, file=file, row=row)
                _check_spec(spec, col, where(file=file, row=row, episode_id=ep.id))
            except OfflineGraphError as err:
                if strict:
                    raise
                reason = err.reason or "decode"
                col.rejected[reason] += 1
                col.first_error.setdefault(reason, str(err))
                continue
            if col.num_features is None:
                col.num_features, col.edge_dim = spec.num_features, spec.edge_dim
                col.globals_dim = 0 if layout is None else layout.dim
            col.add(ep, spec)
    return col


def _percentiles(values: np.ndarray) -> dict[str, float | int]:
    out = {f"p{q}": float(np.percentile(values, q)) for q in PERCENTILES}
    out["max"] = int(values.max())
    return out


def graph_bytes(num_nodes: Any, num_edges: Any, num_features: int, edge_dim: int | None) -> Any:
    """Bytes of graphs as stored: x float32, edge_index int64, edge_attr float32."""
    d = edge_dim or 0
    return num_nodes * num_features * 4 + num_edges * (2 * 8 + d * 4)


def box_padded_bytes(n_max: int, e_max: int, num_features: int, edge_dim: int | None) -> int:
    """One graph padded to a flat Box of ``n_max`` nodes and ``e_max`` edges."""
    return int(graph_bytes(n_max, e_max, num_features, edge_dim))


def repeated_padded_bytes(n_max: int, num_features: int, edge_dim: int | None) -> int:
    """RLlib ``Repeated``-style worst case: ``n_max`` nodes and ``n_max**2`` int64 edges."""
    return int(graph_bytes(n_max, n_max**2, num_features, edge_dim))


def summarize(col: Collected, n_max: int | None = None) -> dict[str, Any]:
    """The numbers ``offline-graph inspect`` prints, as a JSON-ready dict.

    ``n_max`` is the node limit of the ``repeated`` layout (default: the observed max N).
    """
    out: dict[str, Any] = {
        "files": len(col.files),
        "format_version": sorted(col.versions),
        "episodes": len(col.returns),
        "episodes_rejected": int(sum(col.rejected.values())),
        "rejected_by_reason": dict(sorted(col.rejected.items())),
        "first_error_by_reason": dict(sorted(col.first_error.items())),
    }
    if not col.returns:
        out["transitions"] = 0
        return out
    returns = np.asarray(col.returns, dtype=np.float64)
    lengths = np.asarray(col.lengths, dtype=np.int64)
    nodes = np.concatenate(col.num_nodes)
    edges = np.concatenate(col.num_edges)
    # obs_t with t < T: every episode's observations except its last one
    keep = np.ones(nodes.shape[0], dtype=bool)
    keep[np.cumsum(lengths + 1) - 1] = False
    feat, edim = int(col.num_features or 0), col.edge_dim
    transitions = int(lengths.sum())
    flat = 4 * col.globals_dim  # graph-level parts: G float32 per observation, in every layout
    real = float(graph_bytes(nodes[keep], edges[keep], feat, edim).sum()) / transitions + flat
    obs_n_max, obs_e_max = int(nodes.max()), int(edges.max())
    rep_n = obs_n_max if n_max is None else int(n_max)
    box = box_padded_bytes(obs_n_max, obs_e_max, feat, edim) + flat
    rep = repeated_padded_bytes(rep_n, feat, edim) + flat
    if col.typed is not None:  # each type's real counts; padded: each type to its largest count
        parts = {k: np.concatenate(v) for k, v in col.parts.items()}
        real, box, largest = typed_bytes(parts, col.typed, keep)
        real, box, rep = real + flat, box + flat, box + flat
        out["typed"] = {"space": col.typed.text(), "largest": largest}
    out.update(
        {
            "transitions": transitions,
            "observations": int(nodes.shape[0]),
            "return": {
                "mean": float(returns.mean()),
                "min": float(returns.min()),
                "max": float(returns.max()),
            },
            "terminated": col.terminated,
            "truncated": col.truncated,
            "num_features": feat,
            "edge_dim": edim,
            "globals_dim": col.globals_dim,
            "num_actions": col.max_action + 1,
            "action_level": col.action_level,
            "nodes": _percentiles(nodes),
            "edges": _percentiles(edges),
            "bytes_per_transition": real,
            "padded_box": {
                "n_max": obs_n_max,
                "e_max": obs_e_max,
                "bytes_per_transition": box,
                "x_fold": box / real,
            },
            "padded_repeated": {
                "n_max": rep_n,
                "bytes_per_transition": rep,
                "x_fold": rep / real,
            },
        }
    )
    return out


def inspect_path(path: str, *, strict: bool = False, n_max: int | None = None) -> dict[str, Any]:
    """:func:`collect` then :func:`summarize` (multi-agent data:
    :mod:`offline_graph.data.analysis.ma_stats`)."""
    return inspect_input(path, strict=strict, n_max=n_max)[0]


def inspect_input(
    path: str, *, strict: bool = False, n_max: int | None = None
) -> tuple[dict[str, Any], ScanBuilder | None]:
    """:func:`inspect_path`'s summary and the input's scan, as ``scan_files(path, "raise" if
    strict else "skip")`` makes it (``.scan``; ``.error``: the file it would refuse in raise
    mode), each file listed once and opened once; None for multi-agent data."""
    from offline_graph.data.analysis import ma_stats

    files = episode_files(path)
    meta, fh = open_with_metadata(files[0])
    if meta.get("multi_agent") or meta.get("kind") != "episodes":
        fh.close()
        if meta.get("multi_agent"):
            return ma_stats.inspect_multi_agent(path, files, strict=strict), None
        first = None  # collect names the kind
    else:
        first = episode_table(files[0], meta, fh)
        if meta.get("foreign") and _first_is_multi_agent(first[1], files, meta):
            return ma_stats.inspect_multi_agent(path, files, strict=strict), None
    scan = ScanBuilder("raise" if strict else "skip")
    summary = summarize(collect(path, strict=strict, files=files, first=first, scan=scan), n_max=n_max)
    scan.done()  # the rows read: the kept first rows of the scan (space inference)
    return summary, scan


def _first_is_multi_agent(table: Any, files: list[str], meta: dict[str, Any]) -> bool:
    """The first row of foreign episode files is a multi-agent episode (the probe of
    :func:`offline_graph.data.analysis.ma_stats.is_multi_agent_data`, on the first file read already)."""
    from offline_graph.data.analysis import ma_stats
    from offline_graph.data.episodes.multi_agent import is_multi_agent, unpack

    if not table.num_rows:  # the probe reads on in the next files
        return ma_stats.is_multi_agent_data(files[1:], meta)
    try:
        return is_multi_agent(unpack(table.column("item")[0].as_py()))
    except Exception:  # an undecodable first row: the single-agent path names it
        return False
