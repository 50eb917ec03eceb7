"""Train BC or MARWIL on recorded graph episodes (or converted rows), then evaluate (CleanRL style).

Usage::

    offline-graph train --algo bc --data sample_data/expert --iterations 20 \\
        --num-learners 0 --checkpoint runs/bc
    python -m offline_graph.cli.train --algo marwil --beta 1.0 --data data/mixed --iterations 20 \\
        --num-learners 2 --checkpoint runs/marwil

The input kind (episode files or converted transition rows) is read from the files'
offline_graph metadata and sets ``input_read_episodes``. One ``algo.train()`` call is one
iteration of ``--updates-per-iteration`` learner updates of ``--batch-size`` transitions per
learner.

Printed per iteration: the losses (policy; vf and total for MARWIL), transitions/s
(``num_env_steps_trained`` of the iteration / wall seconds of ``algo.train()``; the first
iteration includes Ray Data's one-off read + map of the data set) and bytes/transition.
bytes/transition is measured *on the side*: each iteration draws one learner-sized batch
(``--batch-size`` transitions, uniformly, seeded) from the locally decoded data (at most
``SIDE_SAMPLE_LIMIT`` transitions of the first files), batches it with the same
:func:`offline_graph.data.collate.collate` the learners use, and divides the bytes of its
``x + edge_index + edge_attr`` arrays (the PyG layout: float32 / int64 / float32) by the
batch size. ``batch``/``ptr`` index arrays (``8 * (nodes + B + 1)`` bytes) are not counted.

At the end the trained module (taken from the learner, see
:func:`offline_graph.rllib.evaluation.learner_module`; ``algo.get_module()`` does not work for
offline algorithms in RLlib 2.60) plays ``--eval-episodes`` greedy episodes, and the expert
and random policies play the same seeded episodes; the normalized score is
``100 * (module - random) / (expert - random)``. Written to ``--checkpoint DIR``: the RLlib
checkpoint (``algo.save_to_path(DIR)``), ``learning_curve.png`` and ``summary.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from offline_graph.data.errors import ConfigError, OfflineGraphError
from offline_graph.rllib.evaluation import DEFAULT_EVAL_SEED
from offline_graph.cli.arguments import bad_value, field_docs, json_object

ALGOS = ("bc", "marwil")
CONVS = ("gcn", "sage", "gin", "gine")
SIDE_SAMPLE_LIMIT = 50_000
"""At most this many transitions are decoded locally for the bytes/transition measurement."""


@dataclass(frozen=True)
class Config:
    """Settings of one training + evaluation run."""

    algo: str
    """Algorithm: bc (behaviour cloning) or marwil (advantage-weighted BC; --beta 0 is BC)."""
    data: str
    """Parquet file or directory of episode files (offline-graph record) or converted
    transition rows (offline-graph convert); the kind is read from the file metadata."""
    checkpoint: str
    """Output directory: RLlib checkpoint (algo.save_to_path), learning_curve.png and
    summary.json."""
    iterations: int = 10
    """Number of algo.train() calls."""
    num_learners: int = 0
    """0: one learner in this process; N >= 1: N remote learners (DDP, N batches per update)."""
    updates_per_iteration: int = 10
    """Learner updates per iteration (RLlib's dataset_num_iters_per_learner; >= 2 with
    --num-learners 0)."""
    eval_episodes: int = 50
    """Episodes for evaluating the trained module, the expert and the random policy (same
    seeds for all three); 0 skips evaluation."""
    eval_seed: int = DEFAULT_EVAL_SEED
    """Seed of the evaluation episodes. Keep it different from the seed the data was
    recorded with, or the evaluation replays the training graphs."""
    batch_size: int = 256
    """Transitions per learner batch (train_batch_size_per_learner)."""
    lr: float = 1e-3
    """Adam learning rate."""
    beta: float | None = None
    """MARWIL's advantage temperature (default 1.0; 0 turns MARWIL into BC). Not for bc."""
    hidden: int = 64
    """GNN node embedding width."""
    layers: int = 2
    """Number of message-passing layers."""
    conv: str | None = None
    """Message-passing layer: gcn, sage, gin or gine (default: gine with edge features, else
    gin)."""
    bag_of_nodes: bool = False
    """Ignore edges (per-node layers + pooling): the structure-blind baseline."""
    seed: int = 0
    """Training seed (RLlib's torch seeds and the prelearner's batch sampling)."""
    on_error: str = "raise"
    """Bad episode rows: raise (stop, naming the file/row/episode) or skip (count and go on)."""
    curve: str | None = None
    """Learning-curve PNG path (default: <checkpoint>/learning_curve.png)."""
    num_gpus_per_learner: float = 0
    """GPUs per learner (with --num-learners 0: the local learner's GPU)."""
    env: str | None = None
    """Evaluation env id or module:ClassName (default: the env named in the data's metadata,
    else offline_graph/Graph-v0). Its spaces are the module's spaces."""
    env_config: dict = field(default_factory=dict)
    """Keyword arguments of the env, as a JSON object."""
    num_cpus: int | None = None
    """CPUs for ray.init when this script starts Ray (default: all)."""
    torch_threads: int = 1
    """torch intra-op threads of this process, where the local learner (--num-learners 0)
    and the evaluation run (0 leaves torch's default). Batches are small; on a shared 2-CPU
    machine two spinning threads per process made iterations up to ~8x slower."""


def build_parser() -> argparse.ArgumentParser:
    docs = field_docs(Config)
    p = argparse.ArgumentParser(
        prog="offline-graph train",
        description="Train BC or MARWIL on recorded graph data, then evaluate in the env.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--algo", required=True, choices=ALGOS, help=docs["algo"])
    p.add_argument("--data", required=True, help=docs["data"])
    p.add_argument("--checkpoint", required=True, help=docs["checkpoint"])
    opt: list[tuple[str, dict[str, Any]]] = [
        ("iterations", {"type": int}),
        ("num_learners", {"type": int}),
        ("updates_per_iteration", {"type": int}),
        ("eval_episodes", {"type": int}),
        ("eval_seed", {"type": int}),
        ("batch_size", {"type": int}),
        ("lr", {"type": float}),
        ("beta", {"type": float}),
        ("hidden", {"type": int}),
        ("layers", {"type": int}),
        ("conv", {"choices": CONVS}),
        ("bag_of_nodes", {"action": "store_true"}),
        ("seed", {"type": int}),
        ("on_error", {"choices": ("raise", "skip")}),
        ("curve", {}),
        ("num_gpus_per_learner", {"type": float}),
        ("env", {}),
        ("env_config", {"type": json_object}),
        ("num_cpus", {"type": int}),
        ("torch_threads", {"type": int}),
    ]
    defaults = {f.name: f for f in dataclasses.fields(Config)}
    for name, kw in opt:
        f = defaults[name]
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc,operator]
        p.add_argument("--" + name.replace("_", "-"), default=default, help=docs[name], **kw)
    return p


def check_config(cfg: Config) -> None:
    """Refuse values that cannot work (message form of :mod:`offline_graph.data.errors`)."""

    def bad(name: str, expected: str, hint: str) -> ConfigError:
        return bad_value("train", cfg, name, expected, hint)

    if cfg.iterations < 1:
        raise bad("iterations", ">= 1", "Train for at least one iteration.")
    if cfg.num_learners < 0:
        raise bad("num_learners", ">= 0", "0 trains in this process.")
    if cfg.torch_threads < 0:
        raise bad("torch_threads", ">= 0", "0 leaves torch's default.")
    if cfg.updates_per_iteration < 1 or (cfg.num_learners == 0 and cfg.updates_per_iteration < 2):
        raise bad(
            "updates_per_iteration", ">= 2 with --num-learners 0 (>= 1 otherwise)",
            "RLlib's single-batch path cannot apply the graph collate function.",
        )
    if cfg.eval_episodes < 0:
        raise bad("eval_episodes", ">= 0", "0 skips the evaluation.")
    if cfg.batch_size < 1:
        raise bad("batch_size", ">= 1", "It is the number of transitions per learner batch.")
    if not cfg.lr > 0:
        raise bad("lr", "> 0", "It is Adam's learning rate.")
    if cfg.algo == "bc" and cfg.beta is not None:
        raise bad("beta", "unset for --algo bc", "BC is MARWIL with beta=0; use --algo marwil.")
    if cfg.beta is not None and cfg.beta < 0:
        raise bad("beta", ">= 0", "0 turns MARWIL into BC.")
    if cfg.num_gpus_per_learner < 0:
        raise bad("num_gpus_per_learner", ">= 0", "0 trains on CPU.")
    if not os.path.exists(cfg.data):
        raise bad("data", "an existing file or directory", "Record data with offline-graph record.")


def parse_args(argv: list[str] | None = None) -> Config:
    """Command line -> :class:`Config` (exits with status 2 on bad values, like argparse)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    cfg = Config(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(Config)})
    try:
        check_config(cfg)
    except ConfigError as err:
        parser.error(str(err))
    return cfg


# --------------------------------------------------------------------------- data
def data_metadata(files: list[str]) -> dict[str, Any]:
    """The offline_graph metadata of the first file (env, policy, seed, kind, ...)."""
    from offline_graph.data.format import read_file_metadata

    return read_file_metadata(files[0]) if files else {}


class SideSampler:
    """Learner-sized batches drawn locally from the data, for bytes/transition (see doc)."""

    def __init__(self, files: list[str], kind: str, observation_space: Any, action_space: Any,
                 batch_size: int, seed: int, on_error: str) -> None:
        import pyarrow.parquet as pq

        from offline_graph.data.columns import GraphColumns
        from offline_graph.data.reader import read_episodes, spec_from_spaces
        from offline_graph.data.transitions import Transitions, table_to_graphs

        spec = spec_from_spaces(observation_space, action_space)
        parts: list[GraphColumns] = []
        total = 0
        for f in files:
            if kind == "transitions":
                g = table_to_graphs(pq.read_table(f))
            else:
                items = pq.read_table(f, columns=["item"]).column("item").to_pylist()
                eps = read_episodes(items, [f] * len(items), spec, on_error=on_error)  # type: ignore[arg-type]
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
        from offline_graph.data.collate import collate

        if self.graphs is None or len(self.graphs) == 0:
            return float("nan")
        idx = self.rng.integers(0, len(self.graphs), self.batch_size)
        batch = collate(self.graphs.take(idx))
        payload = sum(batch[k].nbytes for k in ("x", "edge_index", "edge_attr") if k in batch)
        return payload / self.batch_size


# --------------------------------------------------------------------------- RLlib
def build_config(cfg: Config, kind: str, observation_space: Any, action_space: Any) -> Any:
    """The configured BCConfig / MARWILConfig for ``cfg`` (via ``offline_graph.configure``)."""
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.algorithms.marwil import MARWILConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import offline_graph
    from offline_graph.rllib.gnn_module import GNNModule
    from offline_graph.rllib.prelearner import GraphOfflinePreLearner

    model_config: dict[str, Any] = {"hidden": cfg.hidden, "layers": cfg.layers,
                                    "bag_of_nodes": cfg.bag_of_nodes}
    if cfg.conv is not None:
        model_config["conv"] = cfg.conv
    config = BCConfig() if cfg.algo == "bc" else MARWILConfig()
    training: dict[str, Any] = {"train_batch_size_per_learner": cfg.batch_size, "lr": cfg.lr}
    if cfg.algo == "marwil":
        training["beta"] = 1.0 if cfg.beta is None else cfg.beta
        model_config["beta"] = training["beta"]
    config = (
        config.environment(observation_space=observation_space, action_space=action_space)
        .offline_data(
            input_=[cfg.data],
            input_read_episodes=(kind == "episodes"),
            prelearner_class=GraphOfflinePreLearner,
            dataset_num_iters_per_learner=cfg.updates_per_iteration,
        )
        .training(**training)
        .learners(num_learners=cfg.num_learners, num_gpus_per_learner=cfg.num_gpus_per_learner)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config=model_config))
        .debugging(seed=cfg.seed)
    )
    return offline_graph.configure(config, on_error=cfg.on_error, seed=cfg.seed)  # type: ignore[arg-type]


def _num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def iteration_record(result: dict, seconds: float, iteration: int) -> dict[str, Any]:
    """The numbers of one ``algo.train()`` result that the run prints and stores."""
    learners = result.get("learners", {})
    mod = learners.get("default_policy", {})
    allm = learners.get("__all_modules__", {})
    steps = _num(allm.get("num_env_steps_trained"))
    rec = {
        "iteration": iteration,
        "policy_loss": _num(mod.get("policy_loss")),
        "vf_loss": _num(mod.get("vf_loss")),
        "total_loss": _num(mod.get("total_loss")),
        "env_steps_trained": int(steps) if steps is not None else None,
        "module_steps_trained": int(_num(mod.get("num_module_steps_trained")) or 0),
        "seconds": seconds,
    }
    rec["transitions_per_s"] = (steps / seconds) if steps and seconds > 0 else None
    return rec


def _fmt(v: float | None, spec: str = ".4f") -> str:
    return "-" if v is None or not np.isfinite(v) else format(v, spec)


def save_curve(path: str, history: list[dict[str, Any]], title: str) -> None:
    """Loss per iteration (policy loss; value loss in a second panel when present)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    its = [h["iteration"] for h in history]
    has_vf = any(h.get("vf_loss") is not None for h in history)
    fig, axes = plt.subplots(1, 2 if has_vf else 1, figsize=(10 if has_vf else 6, 4))
    axes = np.atleast_1d(axes)
    nan = float("nan")
    axes[0].plot(its, [h["policy_loss"] if h["policy_loss"] is not None else nan for h in history],
                 marker="o")
    axes[0].set(xlabel="iteration", ylabel="policy loss", title=title)
    if has_vf:
        axes[1].plot(its, [h["vf_loss"] if h["vf_loss"] is not None else nan for h in history],
                     marker="o", color="tab:orange")
        axes[1].set(xlabel="iteration", ylabel="value loss", title="value function")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(cfg: Config) -> dict[str, Any]:
    """Train, save, evaluate as ``cfg`` says; returns the summary written to summary.json."""
    import ray
    import torch

    from offline_graph.rllib.evaluation import (
        baseline_scores,
        evaluate_module,
        normalized_score,
    )
    from offline_graph.data.files import scan_files
    from offline_graph.jobs.recording import DEFAULT_ENV, DEFAULT_MASK_KEY, make_env
    from offline_graph.rllib.configure import data_report
    from offline_graph.cli.evaluate import format_legality

    # The kind (episodes / transitions) comes from the files' metadata; it sets
    # input_read_episodes (configure checks the same files again).
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    scan = scan_files(cfg.data, cfg.on_error)  # type: ignore[arg-type]
    kind, files = scan.kind, scan.files
    if kind is None or not files:
        raise ConfigError(
            f"train: --data must contain Parquet files (found none under {cfg.data!r}). "
            "Record episodes with `offline-graph record --output DIR`."
        )
    meta = data_metadata(files)
    env_name = cfg.env or meta.get("env") or DEFAULT_ENV
    if not cfg.env_config and meta.get("env_config") and not cfg.env:
        cfg = dataclasses.replace(cfg, env_config=dict(meta["env_config"]))
    mask_key = meta.get("mask_key") or DEFAULT_MASK_KEY
    env = make_env(env_name, cfg.env_config)
    obs_space, act_space = env.observation_space, env.action_space
    if cfg.eval_episodes and meta.get("seed") == cfg.eval_seed:
        print(f"train: warning: --eval-seed {cfg.eval_seed} is the seed the data was recorded "
              "with; the evaluation replays training graphs.", file=sys.stderr)

    side = SideSampler(files, kind, obs_space, act_space, cfg.batch_size, cfg.seed, cfg.on_error)
    print(f"data: {cfg.data} ({len(files)} file(s) of {kind}, env {env_name}); "
          f"{side.data_bytes_per_transition():.0f} payload bytes/transition over "
          f"{side.num_transitions} locally decoded transitions")

    started_ray = False
    if not ray.is_initialized():
        ray.init(num_cpus=cfg.num_cpus, include_dashboard=False, log_to_driver=False)
        started_ray = True
    algo = None
    try:
        config = build_config(cfg, kind, obs_space, act_space)
        t0 = time.perf_counter()
        algo = config.build_algo()
        build_s = time.perf_counter() - t0
        history: list[dict[str, Any]] = []
        print(f"{'iter':>5} {'policy_loss':>12} {'vf_loss':>10} {'steps':>7} {'sec':>7} "
              f"{'trans/s':>9} {'bytes/trans':>11}")
        for it in range(1, cfg.iterations + 1):
            t = time.perf_counter()
            result = algo.train()
            rec = iteration_record(result, time.perf_counter() - t, it)
            rec["bytes_per_transition"] = side.batch_bytes_per_transition()
            history.append(rec)
            print(f"{it:>5} {_fmt(rec['policy_loss']):>12} {_fmt(rec['vf_loss']):>10} "
                  f"{rec['env_steps_trained'] or 0:>7} {rec['seconds']:>7.2f} "
                  f"{_fmt(rec['transitions_per_s'], '.0f'):>9} "
                  f"{_fmt(rec['bytes_per_transition'], '.0f'):>11}", flush=True)

        os.makedirs(cfg.checkpoint, exist_ok=True)
        ckpt = str(algo.save_to_path(os.path.abspath(cfg.checkpoint)))
        module = algo.get_module()
        try:
            report: dict[str, Any] | None = data_report(config)
        except Exception as err:  # noqa: BLE001 (the accounting is informative only)
            report = {"error": f"{type(err).__name__}: {err}"}
    finally:
        if algo is not None:
            algo.stop()
            # Drop the learners' Ray Data iterators now: finalized after ray.shutdown()
            # they log a traceback ("Ray is not initialized").
            del algo
            gc.collect()
        if started_ray:
            ray.shutdown()

    evaluation: dict[str, Any] = {}
    score = None
    if cfg.eval_episodes:
        t = time.perf_counter()
        evaluation["module"] = evaluate_module(module, env_name, cfg.eval_episodes,
                                               cfg.eval_seed, env_config=cfg.env_config,
                                               mask_key=mask_key)
        eval_s = time.perf_counter() - t
        evaluation.update(baseline_scores(env, cfg.eval_episodes, cfg.eval_seed,
                                          mask_key=mask_key))
        m, e, r = (evaluation[k]["mean_return"] for k in ("module", "expert", "random"))
        score = normalized_score(m, r, e) if e != r else None
        print(f"eval ({cfg.eval_episodes} episodes, seed {cfg.eval_seed}, {eval_s:.1f}s): "
              f"module {m:.2f} +- {evaluation['module']['std']:.2f}, expert {e:.2f}, random "
              f"{r:.2f}; normalized score {_fmt(score, '.1f')} (0 = random, 100 = expert); "
              f"{format_legality(evaluation['module'])}")
    env.close()

    curve = cfg.curve or os.path.join(cfg.checkpoint, "learning_curve.png")
    save_curve(curve, history, f"{cfg.algo} on {os.path.basename(os.path.normpath(cfg.data))}")
    later = [h["transitions_per_s"] for h in history[1:] if h["transitions_per_s"]]
    summary = {
        "config": dataclasses.asdict(cfg),
        "data": {"kind": kind, "files": len(files), "env": env_name, "metadata": meta,
                 "payload_bytes_per_transition": side.data_bytes_per_transition(),
                 "side_sample_transitions": side.num_transitions,
                 "files_rejected_before_training": dict(scan.rejected),
                 "report": report},
        "bytes_per_transition_note": (
            "x + edge_index + edge_attr bytes of one collated learner-sized batch drawn "
            "locally per iteration, divided by the batch size (batch/ptr not counted)"
        ),
        "build_seconds": build_s,
        "iterations": history,
        "median_transitions_per_s_after_first": float(np.median(later)) if later else None,
        "evaluation": evaluation,
        "normalized_score": score,
        "illegal_share": evaluation.get("module", {}).get("illegal_share"),
        "success_rate": evaluation.get("module", {}).get("success_rate"),
        "checkpoint": ckpt,
        "module_dir": os.path.join(ckpt, "learner_group", "learner", "rl_module", "default_policy"),
        "curve": curve,
        "versions": _versions(),
    }
    with open(os.path.join(cfg.checkpoint, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, default=_json_default)
    print(f"checkpoint: {ckpt}\ncurve: {curve}\nsummary: "
          f"{os.path.join(cfg.checkpoint, 'summary.json')}")
    return summary


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _versions() -> dict[str, str]:
    import ray
    import torch

    import offline_graph

    return {"ray": ray.__version__, "torch": torch.__version__,
            "offline_graph": offline_graph.__version__}


def quiet_ray_data() -> None:
    """Ray Data's progress logging floods the per-iteration lines; keep warnings only."""
    try:
        from ray.data import DataContext

        ctx = DataContext.get_current()
        ctx.enable_progress_bars = False
        for attr in ("enable_operator_progress_bars", "print_on_execution_start"):
            if hasattr(ctx, attr):
                setattr(ctx, attr, False)
    except Exception:  # noqa: BLE001, S110 (only cosmetics)
        pass
    for name in ("ray.data", "ray.rllib", "ray.tune"):
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    quiet_ray_data()
    try:
        run(cfg)
    except OfflineGraphError as err:
        print(f"offline-graph train: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
