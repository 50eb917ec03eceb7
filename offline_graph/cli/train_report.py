"""What ``offline-graph train`` measures and writes: per-iteration records, bytes/transition,
the learning curve and the summary JSON helpers (see :mod:`offline_graph.cli.train`)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from offline_graph.bench.experiments.results import json_default as json_default  # train's summary.json
from offline_graph.bench.experiments.results import versions as versions
from offline_graph.data.store import storage
from offline_graph.data.episodes.reader import OnError

SIDE_SAMPLE_LIMIT = 50_000
"""At most this many transitions are decoded locally for the bytes/transition measurement."""


class SideSampler:
    """Learner-sized batches drawn locally from the data, for bytes/transition (see the
    :mod:`offline_graph.cli.train` docstring)."""

    def __init__(
        self,
        files: list[str],
        kind: str,
        observation_space: Any,
        action_space: Any,
        batch_size: int,
        seed: int,
        on_error: OnError,
    ) -> None:
        import pyarrow.parquet as pq

        from offline_graph.data.graphs.columns import GraphColumns
        from offline_graph.data.episodes.reader import read_episodes, spec_from_spaces
        from offline_graph.data.learning.transitions import Transitions, table_to_graphs

        spec = spec_from_spaces(observation_space, action_space)
        parts: list[GraphColumns] = []
        total = 0
        for f in files:
            if kind == "transitions":
                g = table_to_graphs(pq.read_table(storage.open_input_file(f)))
            else:
                items = pq.read_table(storage.open_input_file(f), columns=["item"]).column("item").to_pylist()
                eps = read_episodes(items, [f] * len(items), spec, on_error=on_error)
                if not eps:
                    continue
                g = Transitions.from_episodes(eps, 0.99).obs
            parts.append(g)
            total += len(g)
            if total >= SIDE_SAMPLE_LIMIT:
                break
        self.graphs = GraphColumns.concat(parts) if parts else None
        self.batch_size = int(batch_size)
        self.rng = np.random.default_rng(seed)

    @property
    def num_transitions(self) -> int:
        return 0 if self.graphs is None else len(self.graphs)

    def data_bytes_per_transition(self) -> float:
        """Mean payload bytes per transition over all locally decoded transitions."""
        if self.graphs is None or len(self.graphs) == 0:
            return float("nan")
        return self.graphs.nbytes / len(self.graphs)

    def batch_bytes_per_transition(self) -> float:
        """Payload bytes / B of one collated batch of B uniformly drawn transitions."""
        from offline_graph.data.graphs.collate import collate

        if self.graphs is None or len(self.graphs) == 0:
            return float("nan")
        idx = self.rng.integers(0, len(self.graphs), self.batch_size)
        batch = collate(self.graphs.take(idx))
        kinds = ("x", "edge_index", "edge_attr")  # a typed graph's per type (x:job, ...) too
        payload = sum(v.nbytes for k, v in batch.items() if k.partition(":")[0] in kinds)
        return payload / self.batch_size


def _num(value: Any) -> float | None:
    """``value`` as a float, or None when it is missing or not a number."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def iteration_record(
    result: dict, seconds: float, iteration: int, module_id: str | None = None
) -> dict[str, Any]:
    """The numbers of one ``algo.train()`` result that the run prints and stores (the losses
    of ``module_id``, default RLlib's single module)."""
    from ray.rllib.core import ALL_MODULES, DEFAULT_MODULE_ID

    learners = result.get("learners", {})
    mod = learners.get(module_id or DEFAULT_MODULE_ID, {})
    allm = learners.get(ALL_MODULES, {})
    steps = _num(allm.get("num_env_steps_trained"))
    rec = {
        "iteration": iteration,
        "policy_loss": _num(mod.get("policy_loss")),
        "vf_loss": _num(mod.get("vf_loss")),
        "qf_loss": _num(mod.get("qf_loss")),
        "total_loss": _num(mod.get("total_loss")),
        "env_steps_trained": int(steps) if steps is not None else None,
        "module_steps_trained": int(_num(mod.get("num_module_steps_trained")) or 0),
        "seconds": seconds,
    }
    rec["transitions_per_s"] = (steps / seconds) if steps and seconds > 0 else None
    return rec


def fmt(v: float | None, spec: str = ".4f") -> str:
    """``v`` formatted with ``spec``; ``-`` for None, NaN or infinity."""
    return "-" if v is None or not np.isfinite(v) else format(v, spec)


def save_curve(path: str, history: list[dict[str, Any]], title: str) -> None:
    """Loss per iteration (policy loss; value loss in a second panel when present; the RLlib
    evaluation return of records with ``eval_return`` in a last panel)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    its = [h["iteration"] for h in history]
    has_vf = any(h.get("vf_loss") is not None for h in history)
    evals = [(h["iteration"], h["eval_return"]) for h in history if h.get("eval_return") is not None]
    panels = 1 + has_vf + bool(evals)
    fig, axes = plt.subplots(1, panels, figsize=(4 + 4 * panels, 4))
    axes = np.atleast_1d(axes)
    nan = float("nan")
    if evals:
        axes[-1].plot(*zip(*evals), marker="o", color="tab:green")
        axes[-1].set(xlabel="iteration", ylabel="evaluation return", title="RLlib evaluation")
    axes[0].plot(
        its, [h["policy_loss"] if h["policy_loss"] is not None else nan for h in history], marker="o"
    )
    axes[0].set(xlabel="iteration", ylabel="policy loss", title=title)
    if has_vf:
        axes[1].plot(
            its,
            [h["vf_loss"] if h["vf_loss"] is not None else nan for h in history],
            marker="o",
            color="tab:orange",
        )
        axes[1].set(xlabel="iteration", ylabel="value loss", title="value function")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    storage.write_bytes(path, png.getvalue())  # a local path or a URI
