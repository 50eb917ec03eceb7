"""Bench case ``value``: what value-based training (IQL, CQL) costs against BC / MARWIL.

* **bytes**: learner-batch bytes per trained transition of value runs
  (:mod:`offline_graph.data.learning.value_runs`: ``L`` steps + the graph after them, each graph once)
  for ``L = 1, 4, 8`` against BC's transition batch on the same transitions with the same
  number of trained transitions; the naive layout (``s`` and ``s'`` shipped with every
  transition, 2 graphs each) is computed, not measured.
* **updates/s**: one learner update (training forward, loss, backward, Adam step) of a
  ``GNNModule`` on a batch of ``B`` trained transitions, IQL and CQL against MARWIL (policy +
  value head), timed side by side in one run; the GNN encoder passes per update are counted
  with forward hooks (RLlib's own IQL module runs its encoders ~12 times per update: a reference
  from its source, not measured here).
"""

from __future__ import annotations

import time
from statistics import median
from typing import Any, Callable

import numpy as np

from offline_graph.bench.case_frames import _collate_bytes, bench_transitions, transitions_layout
from offline_graph.bench.harness import BenchContext, Row
from offline_graph.data.learning.transitions import Transitions
from offline_graph.data.learning.value_runs import sample_value_runs, value_runs_to_arrow

LENGTHS = (1, 4, 8)
TRAINED = 2048


def value_runs_bytes(
    trans: Transitions, rng: np.random.Generator, length: int, trained: int
) -> tuple[float, float]:
    """(bytes, graphs) per trained transition of value runs of ``length`` steps, cut so that
    exactly ``trained`` steps are trained."""
    start, stop = np.zeros(0, np.int64), np.zeros(0, np.int64)
    while int((stop - start).sum()) < trained:
        more = sample_value_runs(trans, rng, max(1, -(-trained // length)), length)
        start, stop = np.concatenate([start, more[0]]), np.concatenate([stop, more[1]])
    cum = np.cumsum(stop - start)
    keep = int(np.searchsorted(cum, trained)) + 1
    start, stop = start[:keep].copy(), stop[:keep].copy()
    if cum[keep - 1] > trained:  # cut the last run; its next graph is then the step after
        stop[-1] -= int(cum[keep - 1]) - trained
    nbytes, b, g = _collate_bytes(value_runs_to_arrow(trans, start, stop))
    return nbytes / b, g / b


def bytes_rows(
    trans: Transitions,
    repeats: int,
    trained: int = TRAINED,
    lengths: tuple[int, ...] = LENGTHS,
    case: str = "value",
) -> list[Row]:
    """Value-run bytes per trained transition for each of ``lengths`` against BC's (rows of
    bench case ``case``)."""
    one = [
        transitions_layout(trans, np.random.default_rng(s), trained).per_transition for s in range(repeats)
    ]
    rows = []
    for length in lengths:
        got = [value_runs_bytes(trans, np.random.default_rng(s), length, trained) for s in range(repeats)]
        per, graphs = [b for b, _ in got], [g for _, g in got]
        rows.append(
            Row(
                case,
                f"learner batch: value runs L={length} (s + next graphs)",
                "B/transition",
                per,
                one,
                f"BC transition batch, {trained} trained transitions (ratio = BC / ours)",
                True,
                f"{median(graphs):.3f} graphs per trained transition; {median(per) / median(one):.2f}x BC",
            )
        )
    if case != "value":
        return rows
    rows.append(
        Row(
            "value",
            "learner batch: s and s' with every transition (computed)",
            "B/transition",
            [2 * median(one)],
            None,
            "computed, not measured: 2 graphs per transition",
            True,
            "the naive next-observation layout",
        )
    )
    return rows


def _module(kind: str, spaces: tuple[Any, Any], hidden: int) -> Any:
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.rllib.core.gnn_module import GNNModule

    mc: dict[str, Any] = {"hidden": hidden}
    if kind == "marwil":
        mc["value_head"] = True
    elif kind != "bc":
        mc["value_based"] = kind
    return RLModuleSpec(
        module_class=GNNModule, observation_space=spaces[0], action_space=spaces[1], model_config=mc
    ).build()


def _update_fn(kind: str, module: Any, batch: dict[str, Any]) -> Callable[[], None]:
    """One update of ``module`` on ``batch`` (forward, loss, backward, Adam step)."""
    import torch
    from ray.rllib.core.columns import Columns

    from offline_graph.rllib.core.critic import value_train_outputs
    from offline_graph.rllib.algorithms.value_learner import cql_losses, iql_losses

    optim = torch.optim.Adam([p for p in module.parameters() if p.requires_grad], lr=1e-4)

    def step() -> None:
        optim.zero_grad()
        if kind in ("bc", "marwil"):
            out = module.forward_train(batch)
            dist = module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
            loss = -dist.logp(batch["actions"]).mean()
            if kind == "marwil":  # + the value head's squared error
                values = module.compute_values(batch, out[Columns.EMBEDDINGS])
                loss = loss + (values - batch["value_targets"]).pow(2).mean()
        elif kind == "iql":
            out = value_train_outputs(module, batch)
            dist = module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
            loss = iql_losses(out, batch, dist.logp(batch["actions"]), 0.99, 3.0, 0.8)["total_loss"]
        else:
            loss = cql_losses(value_train_outputs(module, batch), batch, 0.99, 1.0)["total_loss"]
        loss.backward()
        optim.step()

    return step


def encoder_passes(module: Any, step: Callable[[], None]) -> int:
    """GNN encoder forward calls during one ``step``."""
    from offline_graph.rllib.core.gnn_layers import GraphEncoder

    calls = [0]
    hooks = [
        m.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
        for m in module.modules()
        if isinstance(m, GraphEncoder)
    ]
    step()
    for h in hooks:
        h.remove()
    return calls[0]


def _tensors(cols: dict[str, Any]) -> dict[str, Any]:
    import torch

    return {
        k: _tensors(v) if isinstance(v, dict) else torch.as_tensor(np.ascontiguousarray(v))
        for k, v in cols.items()
    }


def speed_rows(ctx: BenchContext, trans: Transitions, trained: int) -> list[Row]:
    import torch

    from offline_graph.bench.synthetic import graph_spaces
    from offline_graph.data.learning.transitions import table_to_batch
    from offline_graph.data.learning.value_runs import collate_value_runs
    from offline_graph.rllib.offline.reading import keep_columns

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    sample = trans.take(rng.integers(0, len(trans), size=trained))
    bc_batch = _tensors(table_to_batch(sample.to_arrow(columns=keep_columns(sample))))
    start, stop = sample_value_runs(trans, rng, -(-trained // 4), 4)
    value_batch = _tensors(collate_value_runs(value_runs_to_arrow(trans, start, stop)))
    spaces = graph_spaces(ctx.cfg)
    steps, passes = {}, {}
    for kind in ("marwil", "iql", "cql"):
        module = _module(kind, spaces, 64)
        batch = bc_batch if kind == "marwil" else value_batch
        steps[kind] = _update_fn(kind, module, batch)
        passes[kind] = encoder_passes(module, steps[kind])
    value_trained = len(value_batch["actions"])
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(max(2, ctx.repeats)):  # interleaved: the same load on every kind
        for kind, step in steps.items():
            t = time.perf_counter()
            step()
            times[kind].append(time.perf_counter() - t)
    per_transition = {
        k: [trained / s if k == "marwil" else value_trained / s for s in v] for k, v in times.items()
    }
    return [
        Row(
            "value",
            f"{kind.upper()} updates: trained transitions/s",
            "transitions/s",
            per_transition[kind],
            per_transition["marwil"],
            f"our MARWIL update on {trained} transitions (policy + value head)",
            False,
            f"{passes[kind]} GNN encoder passes per update (MARWIL {passes['marwil']}; RLlib's own IQL "
            f"module ~12, from its source); {value_trained} transitions in value runs of <= 4 steps",
        )
        for kind in ("iql", "cql")
    ]


def case_value(ctx: BenchContext) -> list[Row]:
    """Value-run bytes per trained transition (L = 1, 4, 8) and IQL / CQL update speed."""
    trained = 512 if ctx.quick else TRAINED
    trans = bench_transitions(ctx, target=2 * trained)
    return bytes_rows(trans, ctx.repeats, trained) + speed_rows(ctx, trans, min(trained, ctx.batch_size))


def default_run_bytes(ctx: BenchContext) -> list[Row]:
    """The ``bytes`` case's row: value runs of IQL / CQL's default length against BC's batch."""
    from offline_graph.rllib.algorithms.value_configure import DEFAULT_RUN_LENGTH

    trained = 512 if ctx.quick else TRAINED
    trans = bench_transitions(ctx, target=2 * trained)
    return bytes_rows(trans, ctx.repeats, trained, (DEFAULT_RUN_LENGTH,), "bytes")
