"""Bench case ``bytes``: bytes per transition at each stage, ours vs the padded stock path.

Also the learner-batch bytes per trained transition of modules with memory (stacked frames
k = 1, 4, 8 and GRU burn-in, :mod:`offline_graph.bench.case_frames`) and of IQL / CQL's value
runs at their default length (:mod:`offline_graph.bench.case_value`), and the byte
accounting helpers: :func:`learner_batch_breakdown` (the
``GraphCollateFn`` batch split into real payload, ``batch`` + ``ptr`` and per-row scalars) and
:func:`table_payload`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from offline_graph.bench.case_frames import case_frames
from offline_graph.bench.case_value import default_run_bytes
from offline_graph.bench.data import dir_bytes, read_items
from offline_graph.bench.harness import BenchContext, Row, item_batch, learner_rows, tensor_bytes
from offline_graph.bench.stock_data import padded_spaces, repeated_worst_case_bytes
from offline_graph.bench.synthetic import DataConfig, payload_bytes
from offline_graph.data.graphs.graph_arrow import ragged_column


def learner_batch_breakdown(table: Any, module_id: str | None = None) -> dict[str, int]:
    """Bytes of the ``GraphCollateFn`` batch of a prelearner output ``table``, split into the
    real payload (x, edge_index, edge_attr), ``batch`` + ``ptr``, and per-row scalars.
    ``module_id`` defaults to RLlib's ``DEFAULT_MODULE_ID``."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    from offline_graph.rllib.offline.collate_fn import GraphCollateFn

    module_id = DEFAULT_MODULE_ID if module_id is None else module_id
    out = GraphCollateFn(module_id)(table)
    obs = f"{module_id}/obs/"
    parts = {"payload": 0, "batch_ptr": 0, "scalars": 0}
    for k, v in out.items():
        nb = v.element_size() * v.nelement()
        if k in (obs + "batch", obs + "ptr"):
            parts["batch_ptr"] += nb
        elif k.startswith(obs):
            parts["payload"] += nb
        else:
            parts["scalars"] += nb
    parts["total"] = tensor_bytes(out)
    return parts


def table_payload(table: Any, cfg: DataConfig) -> int:
    """Real payload of the transitions in a transition table (from its list lengths)."""
    n = np.diff(table.column("x").combine_chunks().offsets.to_numpy())
    e = np.diff(table.column("edge_index").combine_chunks().offsets.to_numpy())
    return int(payload_bytes(n.astype(np.int64), e.astype(np.int64), cfg).sum())


def globals_row(table: Any, counts: np.ndarray, width: int = 8) -> Row:
    """Graph-level features (a Dict space's flat parts, ``globals [G]``) in the learner batch:
    the prelearner output with a ``globals`` column of ``width`` floats per row, collated by
    ``GraphCollateFn``, against the workaround of copying them onto every node."""
    from offline_graph.rllib.offline.collate_fn import GraphCollateFn

    rows = table.num_rows
    values = np.random.default_rng(0).random((rows, width), dtype=np.float32)
    column = ragged_column(values, np.arange(rows + 1, dtype=np.int64))
    out = GraphCollateFn()(table.append_column("globals", column))
    ours = tensor_bytes({k: v for k, v in out.items() if k.endswith("/obs/globals")}) / rows
    per_node = 4.0 * width * float(counts.mean())
    return Row(
        "bytes",
        f"graph-level features (G={width}) in the learner batch",
        "B/transition",
        [ours],
        [per_node],
        "the same features copied onto every node",
        True,
        f"[B, G] = 4*G = {4 * width} B/tr; per node {per_node / ours:.1f}x (mean N {counts.mean():.0f})",
    )


def typed_row(graphs: int = 512, seed: int = 0) -> Row:
    """Typed graphs (:class:`~offline_graph.data.graphs.typed.TypedGraph`) in flight: the
    prelearner's Arrow rows of ``graphs`` long-tailed scheduling states (operations F=4, a
    lognormal count of 4..400; machines F=3, 2..20; ``op__next__op`` chains without features,
    ``op__on__machine`` with D=1), against each type padded to its largest count."""
    from offline_graph.data.analysis.typed_stats import typed_bytes
    from offline_graph.data.graphs.graph_arrow import graph_arrays
    from offline_graph.data.graphs.typed import TypedGraph, typed_observation
    from offline_graph.data.graphs.typed_columns import TypedColumns

    import gymnasium as gym

    def box(width: int) -> gym.spaces.Box:
        return gym.spaces.Box(-np.inf, np.inf, (width,), np.float32)

    space = TypedGraph({"op": box(4), "machine": box(3)}, {"op__next__op": None, "op__on__machine": box(1)})
    rng = np.random.default_rng(seed)
    observations = []
    for _ in range(graphs):
        ops = int(np.clip(rng.lognormal(3.0, 1.0), 4, 400))
        machines = int(rng.integers(2, 21))
        chain = np.stack([np.arange(ops - 1), np.arange(1, ops)])
        on = np.stack([np.arange(ops), rng.integers(0, machines, ops)])
        observations.append(
            typed_observation(
                {
                    "x": {"op": rng.random((ops, 4)), "machine": rng.random((machines, 3))},
                    "edge_index": {"op__next__op": chain, "op__on__machine": on},
                    "edge_attr": {"op__on__machine": rng.random((ops, 1))},
                },
                space,
            )
        )
    cols = TypedColumns.from_graphs(observations, space)
    flight = pa.table(graph_arrays(cols)).nbytes / graphs
    parts = {k: np.diff(p.edge_ptr if "__" in k else p.node_ptr) for k, p in cols.parts.items()}
    real, padded, largest = typed_bytes(parts, space, np.ones(graphs, bool))
    return Row(
        "bytes",
        "typed graph (2 node, 2 edge types) in flight",
        "B/transition",
        [flight],
        [float(padded)],
        f"each type padded to its largest count ({', '.join(f'{k} {v}' for k, v in largest.items())})",
        True,
        f"Arrow rows {flight / real:.3f}x the real payload ({real:.0f} B/tr); "
        f"padded per type {padded / real:.1f}x",
    )


def case_bytes(ctx: BenchContext) -> list[Row]:
    """Bytes per transition at each stage, ours vs the padded stock path (lower is better)."""
    cfg, data = ctx.cfg, ctx.data
    real = data.mean_payload
    n_tr, n_stock = data.episodes.num_transitions, data.stock_episodes.num_transitions
    per = ctx.stock_episodes_per_call
    pre = ctx.ours_prelearner(data.episode_dir)
    items = read_items(data.episode_dir, max_rows=8 * per)
    table = pa.concat_tables([pre(item_batch(items[i : i + per])) for i in range(0, len(items), per)])
    flight = table.nbytes / table.num_rows
    flight_real = table_payload(table, cfg) / table.num_rows
    lb = learner_batch_breakdown(table)
    stock = ctx.stock_prelearner(data.padded_dir, padded_spaces(cfg))
    s_items = read_items(data.padded_dir, max_rows=per)
    s_out = stock(item_batch(s_items))
    s_flight = tensor_bytes(s_out) / learner_rows(s_out)
    padded_obs = cfg.padded_width * 4
    rep = repeated_worst_case_bytes(cfg)

    def x_real(ours: float, base: float, ours_real: float = real) -> str:
        return f"ours {ours / ours_real:.3f}x real, stock {base / real:.1f}x real"

    disk = dir_bytes(data.episode_dir) / n_tr
    s_disk = dir_bytes(data.padded_dir) / n_stock
    rows_disk = dir_bytes(ctx.converted_dir) / n_tr
    s_rows_disk = dir_bytes(data.padded_rows_dir) / n_stock
    bp = lb["batch_ptr"] / table.num_rows
    # Node-selection policies (NodeAction): the only dense tensor of the path is the learner's
    # [B, M] log-prob layout (M = most nodes of any graph in that batch), built on the device.
    counts = np.diff(table.column("x").combine_chunks().offsets.to_numpy()).astype(np.int64)
    bsz = max(1, min(ctx.batch_size, len(counts)))
    groups = [counts[i : i + bsz] for i in range(0, len(counts) - bsz + 1, bsz)]
    dense = float(np.mean([4 * len(g) * g.max() for g in groups])) / bsz
    flat = 4.0 * float(counts.mean())
    selection = Row(
        "bytes",
        "node-action logits on the learner [B, M]",
        "B/transition",
        [dense],
        [4.0 * cfg.n_max],
        f"logits padded to the space's limit max_nodes={cfg.n_max}",
        True,
        f"[B={bsz}, M=max N in batch] is {dense / flat:.1f}x the flat [sumN] logits "
        f"({flat:.0f} B/tr); inputs stay unpadded (mask: 1 B/node = {counts.mean():.0f} B/tr)",
    )
    return [
        Row(
            "bytes",
            "real payload vs padded Box obs (N_max=512)",
            "B/transition",
            [real],
            [padded_obs],
            "flat Box: N,E + x + edge_index + edge_attr padded",
            True,
            f"padded Box {padded_obs / real:.1f}x real",
        ),
        Row(
            "bytes",
            "real payload vs Repeated worst case",
            "B/transition",
            [real],
            [rep],
            "F*MAX f32 + 2*MAX^2 int64 (forum post; edge_attr not counted)",
            True,
            f"Repeated {rep / real:.0f}x real",
        ),
        Row(
            "bytes",
            "on disk: episode files (zstd)",
            "B/transition",
            [disk],
            [s_disk],
            "padded episode files",
            True,
            x_real(disk, s_disk),
        ),
        Row(
            "bytes",
            "on disk: converted rows (zstd)",
            "B/transition",
            [rows_disk],
            [s_rows_disk],
            "padded rows",
            True,
            x_real(rows_disk, s_rows_disk),
        ),
        Row(
            "bytes",
            "in flight: prelearner output",
            "B/transition",
            [flight],
            [s_flight],
            "stock OfflinePreLearner output (obs + new_obs)",
            True,
            x_real(flight, s_flight, flight_real),
        ),
        Row(
            "bytes",
            "learner batch: tensors",
            "B/transition",
            [lb["total"] / table.num_rows],
            [s_flight],
            "stock learner batch",
            True,
            x_real(lb["total"] / table.num_rows, s_flight, flight_real)
            + f"; batch+ptr {bp:.0f} B/tr ({bp / flight_real:.3f}x real), "
            f"x/edge_index/edge_attr {lb['payload'] / table.num_rows / flight_real:.4f}x real",
        ),
        selection,
        globals_row(table, counts),
        typed_row(),
        *case_frames(ctx),
        *default_run_bytes(ctx),
    ]
