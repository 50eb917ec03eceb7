"""Bench rows (case ``bytes``): learner-batch bytes per trained transition with memory.

Modules with stacked frames (``frame_stack = k``) or recurrent memory (GRU burn-in) train on
*runs* (:mod:`offline_graph.data.learning.sequences`): a chunk of ``L = max_seq_len`` trained steps plus
up to ``context`` earlier steps (``k - 1`` frames, or the burn-in ``L``); each graph of a run is
in the learner batch once, so the bytes per trained transition grow with the graphs per
trained transition ``G / B``, not with ``k``. A naive stacked layout (every transition carrying
its k frames) would be ~k times the k = 1 bytes; that reference is computed, not measured.

Every layout is measured on the same transitions with the same number ``B`` of trained
transitions (the last run is cut so that exactly ``B`` steps are trained). Stock RLlib has no
graph frame stacking, so these rows have no baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Any, Sequence

import numpy as np

from offline_graph.bench.harness import BenchContext, Row, tensor_bytes
from offline_graph.data.learning.sequences import runs_to_arrow, sample_runs
from offline_graph.data.learning.transitions import Transitions

LENGTH = 20
"""Trained steps per run: RLlib's default ``max_seq_len``."""
TRAINED = 4096
"""Trained transitions of every measured learner batch."""
FRAMES = (4, 8)
NO_BASELINE = "ours only: stock RLlib has no graph frame stacking / memory over graphs"


@dataclass
class Layout:
    """One measured learner batch."""

    name: str
    context: int
    """Earlier steps per run (0 for plain transitions)."""
    bytes: int
    """All tensors of ``GraphCollateFn()(table)``."""
    trained: int
    """``B``: trained transitions (``len(actions)``)."""
    graphs: int
    """``G``: graphs in the batch."""

    @property
    def per_transition(self) -> float:
        return self.bytes / self.trained

    @property
    def graphs_per_transition(self) -> float:
        return self.graphs / self.trained


def _collate_bytes(table: Any) -> tuple[int, int, int]:
    """(tensor bytes, trained transitions, graphs) of the learner batch of ``table``."""
    from offline_graph.rllib.offline.collate_fn import GraphCollateFn

    out = GraphCollateFn()(table)
    actions = next(v for k, v in out.items() if k.endswith("/actions"))
    ptr = next(v for k, v in out.items() if k.endswith("/obs/ptr"))
    return tensor_bytes(out), len(actions), len(ptr) - 1


def transitions_layout(trans: Transitions, rng: np.random.Generator, trained: int = TRAINED) -> Layout:
    """k = 1, today's layout: ``trained`` transitions drawn uniformly, one graph each."""
    from offline_graph.rllib.offline.reading import keep_columns

    sample = trans.take(np.asarray(rng.integers(0, len(trans), size=trained), dtype=np.int64))
    nbytes, b, g = _collate_bytes(sample.to_arrow(columns=keep_columns(sample)))
    return Layout("k=1", 0, nbytes, b, g)


def draw_runs(
    trans: Transitions, rng: np.random.Generator, length: int, context: int, trained: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs (``sample_runs``) drawn until they train ``trained`` steps; the last run is cut
    so that exactly ``trained`` steps are trained."""
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    got = 0
    while got < trained:
        num = max(1, -(-(trained - got) // length))
        ctx0, start, stop = sample_runs(trans, rng, num, length, context)
        parts.append((ctx0, start, stop))
        got += int((stop - start).sum())
    ctx0, start, stop = (np.concatenate([p[i] for p in parts]) for i in range(3))
    cum = np.cumsum(stop - start)
    keep = int(np.searchsorted(cum, trained)) + 1  # first run reaching `trained`
    ctx0, start, stop = ctx0[:keep].copy(), start[:keep].copy(), stop[:keep].copy()
    stop[-1] -= int(cum[keep - 1]) - trained
    return ctx0, start, stop


def runs_layout(
    name: str, trans: Transitions, rng: np.random.Generator, length: int, context: int, trained: int = TRAINED
) -> Layout:
    """Runs of ``length`` trained steps with ``context`` earlier steps, each graph once."""
    ctx0, start, stop = draw_runs(trans, rng, length, context, trained)
    nbytes, b, g = _collate_bytes(runs_to_arrow(trans, ctx0, start, stop))
    return Layout(name, context, nbytes, b, g)


def measure_layouts(
    trans: Transitions,
    rng: np.random.Generator,
    length: int = LENGTH,
    trained: int = TRAINED,
    frames: Sequence[int] = FRAMES,
) -> list[Layout]:
    """k = 1, frame stacks ``frames`` (context k - 1) and GRU burn-in (context ``length``)."""
    out = [transitions_layout(trans, rng, trained)]
    out += [runs_layout(f"k={k}", trans, rng, length, k - 1, trained) for k in frames]
    out.append(runs_layout("gru", trans, rng, length, length, trained))
    return out


def ratio_text(name: str, ours: float, one: float) -> str:
    return f"{name} / k=1 = {ours / one:.2f}x"


def frame_rows(repeats: Sequence[Sequence[Layout]], length: int = LENGTH) -> list[Row]:
    """The rows of measured layouts (one list per repeat, in :func:`measure_layouts` order)."""
    names = [lay.name for lay in repeats[0]]
    per: dict[str, list[float]] = {n: [] for n in names}
    gpts: dict[str, list[float]] = {n: [] for n in names}
    for rep in repeats:
        for lay in rep:
            per[lay.name].append(lay.per_transition)
            gpts[lay.name].append(lay.graphs_per_transition)
    gpt = {n: median(v) for n, v in gpts.items()}
    b = repeats[0][0].trained
    one = median(per["k=1"])
    rows = []
    for lay in repeats[0]:
        n = lay.name
        if n == "k=1":
            metric, what = "learner batch: transitions k=1", f"B={b} sampled transitions"
        elif n == "gru":
            metric, what = "learner batch: gru burn-in", f"runs L={length} + burn-in {lay.context}"
        else:
            metric, what = f"learner batch: frame_stack {n}", f"runs L={length} + context {lay.context}"
        rows.append(
            Row(
                "bytes",
                metric,
                "B/transition",
                per[n],
                None,
                NO_BASELINE,
                True,
                f"{what}; {gpt[n]:.3f} graphs per trained transition (G/B); "
                f"{ratio_text(n, median(per[n]), one)}" + (" (issue target <= 1.5x)" if n == "k=8" else ""),
            )
        )
    for k in (int(n[2:]) for n in names if n.startswith("k=") and n != "k=1"):
        rows.append(
            Row(
                "bytes",
                f"learner batch: naive stacked k={k} (computed)",
                "B/transition",
                [one * k],
                None,
                "computed, not measured: k=1 bytes x k",
                True,
                f"each transition carrying its {k} frames; measured k={k} is "
                f"{median(per[f'k={k}']) / (one * k):.2f}x of this",
            )
        )
    return rows


def bench_transitions(ctx: BenchContext, target: int = 2 * TRAINED) -> Transitions:
    """The transitions of the first bench episodes holding >= ``target`` transitions."""
    from offline_graph.bench.data import read_items
    from offline_graph.data.episodes.reader import read_transitions

    mean_len = float(ctx.data.episodes.lengths.mean())
    items = read_items(ctx.data.episode_dir, max_rows=int(np.ceil(target / mean_len)) + 1)
    return Transitions.concat(read_transitions(items, [None] * len(items), ctx.cfg.spec, 0.99))


def case_frames(ctx: BenchContext) -> list[Row]:
    """Learner-batch bytes per trained transition: k = 1, frame_stack k = 4, 8, gru."""
    trans = bench_transitions(ctx)
    reps = [measure_layouts(trans, np.random.default_rng(seed)) for seed in range(ctx.repeats)]
    return frame_rows(reps)
