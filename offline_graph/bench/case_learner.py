"""Bench case ``learner``: our learners through ``algo.train()`` against a plain PyTorch loop of
the same ``GNNModule`` on the same kind of collated batches, at the same torch thread count.

* **ours**: ``offline_graph.configure(BCConfig / MARWILConfig / IQLConfig ...)`` from the episode
  files (``sample_data/expert`` where the run starts in the repository, else Graph-v0 expert
  episodes recorded into the work directory), ``U`` updates of ``B`` transitions per
  ``algo.train()``, a local learner and one remote learner; the whole iteration is counted
  (data wait, connectors, metrics, RLlib's bookkeeping); transitions/s per iteration after the
  first two (start-up: actors, the first Ray Data blocks).
* **plain loop**: the same module class and ``model_config``, ``U`` updates (forward, loss,
  backward, Adam step) on batches collated beforehand by our public path (transitions ->
  Arrow rows -> ``table_to_batch``; IQL: value runs of the default length), timed per ``U``
  updates, one such chunk right before each counted iteration of ours (interleaved pairs: the
  shared machine's load drifts by 10-30% within a minute, and a plain loop timed before all
  of ours would put that drift into the ratio). BC: ``-logp``; MARWIL: ``-logp`` + the value
  head's squared error (the exponential advantage weights cost one ``exp`` per transition); IQL:
  :func:`iql_losses` (no target-network Polyak step: the loop is the lower bound). The bench's
  process runs :func:`~offline_graph.rllib.core.heap.keep_freed_heap` first, as our learners
  do when built, so both sides run on the same allocator settings.
* **overhead**: per iteration, the time that is not the model: ``U * B / ours - U * B / plain``
  in milliseconds, the number that decides a GPU learner (where the model's share shrinks).
* **CUDA** (only with ``torch.cuda.is_available()``, else one row saying skipped): BC with the
  local learner on the GPU (``num_gpus_per_learner=1``) against the same plain loop on CUDA (its
  batches moved there beforehand), ``U`` updates at ``B`` and at 4096, transitions/s and the
  same overhead; on the bench's synthetic Graph-v0-shaped episodes (the shipped 3,804
  transitions hold no batch of 4096), profiling off.

Bench case ``gpu`` (here too, the learner's speed): GNNModule learner step time on CUDA and the
share spent waiting for data; skipped (one row saying so) without CUDA.
"""

from __future__ import annotations

import os
import time
from statistics import median
from typing import Any

import numpy as np

from offline_graph.bench.harness import BenchContext, Row
from offline_graph.rllib.core.heap import keep_freed_heap

SHIPPED = os.path.join("sample_data", "expert")
MODEL = {"hidden": 64, "layers": 2}
"""``offline-graph train``'s defaults, for both sides."""
LR = 1e-3


def learner_data(ctx: BenchContext) -> str:
    """The shipped expert episodes when the run starts in the repository, else Graph-v0
    expert episodes recorded into the work directory (120 episodes, seed 0)."""
    if os.path.isdir(SHIPPED):
        return os.path.abspath(SHIPPED)
    from offline_graph.bench.experiments.results import record_episodes

    out = os.path.join(ctx.data.root, "learner_expert")
    if not os.path.isdir(out):
        record_episodes(out, "expert", 0.0, 120, 0, env="offline_graph/Graph-v0", episodes_per_file=60)
    return out


def _config(
    kind: str, spaces: tuple[Any, Any], data: str, updates: int, batch: int, learners: int, gpus: int = 0
) -> Any:
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.algorithms.iql import IQLConfig
    from ray.rllib.algorithms.marwil import MARWILConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import offline_graph
    from offline_graph.rllib.core.gnn_module import GNNModule

    cls = {"bc": BCConfig, "marwil": MARWILConfig, "iql": IQLConfig}[kind]
    training: dict[str, Any] = {"train_batch_size_per_learner": batch, "lr": LR}
    if kind == "iql":
        training.update(lr=None, actor_lr=LR, critic_lr=LR, value_lr=LR)
    config = (
        cls()
        .environment(observation_space=spaces[0], action_space=spaces[1])
        .offline_data(input_=[data], input_read_episodes=True, dataset_num_iters_per_learner=updates)
        .training(**training)
        .learners(num_learners=learners, num_gpus_per_learner=gpus)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config=dict(MODEL)))
        .debugging(seed=0)
    )
    return offline_graph.configure(config)


PROFILE = (
    ("forward, loss, backward, optimizer step", "rllib/core/learner/torch/torch_learner.py", "_update"),
    ("data wait (the learner's Ray Data iterator)", "rllib/utils/minibatch_utils.py", "__iter__"),
    ("RLlib metrics (MetricsLogger, own time)", "rllib/utils/metrics/", None),
)
"""(part, file, function) of the profile: the function's cumulative time, or with no function
the own time of everything in the file(s); the rest of the iteration is reported as "other"
(connectors, RLlib's bookkeeping, Ray calls)."""


def ours_rates(
    kind: str,
    spaces: tuple[Any, Any],
    data: str,
    updates: int,
    batch: int,
    learners: int,
    iters: int,
    plain: Any,
    gpus: int = 0,
) -> tuple[list[float], list[float], float, dict[str, float]]:
    """Transitions/s of ``algo.train()`` per iteration after the first two, the plain loop's
    transitions/s timed right before each of them (``plain``: :func:`plain_loop`'s function;
    the pairs interleave, so a change of the shared machine's load falls on both sides alike),
    the median transitions trained per iteration, and (local learner) the share of the profiled
    iterations' wall time in each :data:`PROFILE` part (cProfile over the same iterations:
    its own overhead inflates Python-heavy parts; the rates come from unprofiled iterations;
    not with ``gpus``: ``num_gpus_per_learner``)."""
    import cProfile
    import pstats

    algo = _config(kind, spaces, data, updates, batch, learners, gpus).build_algo()
    rates: list[float] = []
    plain_out: list[float] = []
    trained: list[float] = []
    shares: dict[str, float] = {}
    try:
        for it in range(iters + 2):
            if it >= 2:
                plain_out += plain(1, warmup=False)
            t = time.perf_counter()
            result = algo.train()
            seconds = time.perf_counter() - t
            if it >= 2:
                steps = float(result["learners"]["__all_modules__"]["num_env_steps_trained"])
                rates.append(steps / seconds)
                trained.append(steps)
        if learners == 0 and not gpus:
            profiler = cProfile.Profile()
            t = time.perf_counter()
            profiler.runcall(lambda: [algo.train() for _ in range(iters)])
            wall = time.perf_counter() - t
            shares = profile_shares(pstats.Stats(profiler), wall)
    finally:
        algo.stop()
    return rates, plain_out, median(trained), shares


def profile_shares(stats: Any, wall: float) -> dict[str, float]:
    """Share (%) of ``wall`` seconds in each :data:`PROFILE` part."""
    table = stats.stats  # {(file, line, function): (cc, nc, own, cumulative, callers)}
    out = {}
    for part, path, function in PROFILE:
        if function is None:
            seconds = sum(v[2] for k, v in table.items() if path in k[0])
        else:
            seconds = max(
                (v[3] for k, v in table.items() if k[0].endswith(path) and k[2] == function), default=0.0
            )
        out[part] = 100.0 * seconds / wall
    out["other (connectors, RLlib's bookkeeping, Ray calls)"] = max(0.0, 100.0 - sum(out.values()))
    return out


def learner_batches(kind: str, spaces: tuple[Any, Any], data: str, updates: int, batch: int) -> list[Any]:
    """Learner batches as RLlib's learner receives them: our prelearner (built from the same
    config) maps the episode rows, ``GraphCollateFn`` collates ``batch`` rows at a time, and
    RLlib's ``unflatten_dict`` nests them; ``updates`` batches (cycled if the data is short)."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.utils import unflatten_dict

    from offline_graph.bench.data import read_items
    from offline_graph.rllib.offline.collate_fn import GraphCollateFn
    from offline_graph.rllib.offline.prelearner import GraphOfflinePreLearner

    pre = GraphOfflinePreLearner(config=_config(kind, spaces, data, updates, batch, 0), spaces=spaces)
    table = pre({"item": np.array(read_items(data), dtype=object)})
    collate = GraphCollateFn()
    count = max(1, table.num_rows // batch)
    out = [unflatten_dict(collate(table.slice(i * batch, batch)))[DEFAULT_MODULE_ID] for i in range(count)]
    return [out[u % len(out)] for u in range(updates)]


def plain_loop(
    kind: str, spaces: tuple[Any, Any], data: str, updates: int, batch: int, device: str = "cpu"
) -> Any:
    """The plain loop on :func:`learner_batches` (module and batches built once): a function
    of ``repeats`` giving transitions/s, one value per ``updates`` updates (after one warm-up
    pass unless ``warmup=False``), so a chunk can be timed right before each iteration of ours;
    on CUDA the module and the batches are moved to ``device`` first and each pass ends with a
    synchronize."""
    import torch

    from offline_graph.bench.case_value import _module, _update_fn

    torch.manual_seed(0)
    batches = learner_batches(kind, spaces, data, updates, batch)
    module = _module(kind, spaces, MODEL["hidden"])
    cuda = device.startswith("cuda")
    if device != "cpu":
        module.to(device)
        batches = [_to_device(b, device) for b in batches]
    steps = [_update_fn(kind, module, b) for b in batches]
    counts = [len(b["actions"]) for b in batches]

    def rates(repeats: int, warmup: bool = True) -> list[float]:
        out = []
        for chunk in range(repeats + 1) if warmup else range(1, repeats + 1):
            if cuda:
                torch.cuda.synchronize()
            t = time.perf_counter()
            for step in steps:
                step()
            if cuda:
                torch.cuda.synchronize()
            if chunk:
                out.append(sum(counts) / (time.perf_counter() - t))
        return out

    return rates


def _to_device(batch: Any, device: str) -> Any:
    import torch

    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return torch.as_tensor(batch, device=device)


def vs_plain(
    metric: str, ours: list[float], plain: list[float], per_iter: float, updates: int, base: str
) -> Row:
    """A ``learner`` row: ours against the plain loop, and the per-iteration time that is not
    the model (``per_iter`` transitions per iteration)."""
    overhead = 1000 * (per_iter / median(ours) - per_iter / median(plain))
    note = f"not the model: {overhead:.0f} ms per iteration of {updates} updates"
    return Row("learner", metric, "transitions/s", ours, plain, base, False, note)


def case_learner(ctx: BenchContext) -> list[Row]:
    """BC and MARWIL (local and one remote learner) and IQL (local) against their plain loops."""
    import torch

    import offline_graph

    ctx.ray()
    torch.set_num_threads(1)
    keep_freed_heap()  # what our learners do when built: the plain loop gets it too
    data = learner_data(ctx)
    resolved = offline_graph.resolve_spaces(data, who="bench learner")
    spaces = (resolved.observation_space, resolved.action_space)
    updates, batch = (10, ctx.batch_size)
    iters = 2 if ctx.quick else max(8, 3 * ctx.repeats)
    rows: list[Row] = []
    loops: dict[str, Any] = {}
    plain: dict[str, list[float]] = {}
    for kind, learners in (("bc", 0), ("bc", 1), ("marwil", 0), ("marwil", 1), ("iql", 0)):
        if kind not in loops:
            loops[kind] = plain_loop(kind, spaces, data, updates, batch)
            loops[kind](1)  # warm-up, not timed
        # a plain chunk right before each iteration of ours: this shared machine drifts
        ours, plain[kind], per_iter, shares = ours_rates(
            kind, spaces, data, updates, batch, learners, iters, loops[kind]
        )
        where = "local learner" if learners == 0 else "1 remote learner"
        base = f"plain PyTorch loop of the same GNNModule, {updates} updates of B={batch}, 1 torch thread"
        rows.append(
            vs_plain(
                f"{kind.upper()} algo.train(), {where}: transitions/s",
                ours,
                plain[kind],
                per_iter,
                updates,
                base,
            )
        )
        rows += [
            Row(
                "learner", f"{kind.upper()} local iteration, profiled: {part}", "%", [share], None, "cProfile"
            )
            for part, share in shares.items()
        ]
        ctx.log(
            f"learner {kind} ({where}): {median(ours):.0f} vs plain {median(plain[kind]):.0f} transitions/s"
        )
    return rows + cuda_rows(ctx, updates, iters)


def cuda_rows(ctx: BenchContext, updates: int, iters: int) -> list[Row]:
    """BC, local learner on CUDA, against the plain loop on CUDA at B and 4096 (module docstring);
    one skipped row without CUDA."""
    import torch

    from offline_graph.bench.synthetic import graph_spaces

    metric = "BC algo.train(), local learner on CUDA"
    if not torch.cuda.is_available():
        return [Row("learner", f"{metric}: transitions/s", "transitions/s", [], skipped="skipped: no CUDA")]
    spaces, data, name = graph_spaces(ctx.cfg), ctx.data.episode_dir, torch.cuda.get_device_name(0)
    rows = []
    for batch in sorted({ctx.batch_size, 4096}):
        loop = plain_loop("bc", spaces, data, updates, batch, "cuda")
        loop(1)  # warm-up, not timed
        ours, plain, per_iter, _ = ours_rates("bc", spaces, data, updates, batch, 0, iters, loop, gpus=1)
        base = f"plain loop on {name} (batches there beforehand), {updates} updates of B={batch}"
        rows.append(vs_plain(f"{metric}, B={batch}: transitions/s", ours, plain, per_iter, updates, base))
        ctx.log(
            f"learner bc (CUDA, B={batch}): {median(ours):.0f} vs plain {median(plain):.0f} transitions/s"
        )
    return rows


def learner_steps(
    ctx: BenchContext, device: str, batch_size: int = 4096, steps: int = 20
) -> tuple[list[float], list[float]]:
    """GNNModule forward+backward (BC loss) on ``device`` fed by the converted-rows stream:
    (seconds per step, fraction of each step spent waiting for the batch iterator)."""
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.bench.synthetic import graph_spaces
    from offline_graph.rllib.core.gnn_module import GNNModule
    from offline_graph.rllib.offline.collate_fn import GraphCollateFn

    ray = ctx.ray()
    obs_space, act_space = graph_spaces(ctx.cfg)
    module: Any = RLModuleSpec(
        module_class=GNNModule, observation_space=obs_space, action_space=act_space, model_config={}
    ).build()
    module.to(device)
    opt = torch.optim.Adam(module.parameters(), lr=1e-3)
    it = iter(
        ray.data.read_parquet(ctx.converted_dir).iter_torch_batches(
            batch_size=batch_size, collate_fn=GraphCollateFn(), drop_last=True
        )
    )
    step_s, wait = [], []
    prefix = f"{DEFAULT_MODULE_ID}/obs/"
    for i in range(steps + 1):
        t0 = time.perf_counter()
        try:
            b = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter()
        obs = {
            k[len(prefix) :]: v.to(device, non_blocking=True) for k, v in b.items() if k.startswith(prefix)
        }
        actions = b[f"{DEFAULT_MODULE_ID}/actions"].to(device)
        logits = module.forward_train({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
        loss = torch.nn.functional.cross_entropy(logits, actions)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        if i:  # the first step warms up (allocator, kernels) and is not counted
            step_s.append(t2 - t0)
            wait.append((t1 - t0) / (t2 - t0))
    return step_s, wait


def case_gpu(ctx: BenchContext) -> list[Row]:
    """Learner step time at B=4096 on CUDA and the share of it spent waiting for data."""
    import torch

    if not torch.cuda.is_available():
        return [Row("gpu", "learner step B=4096", "ms", [], skipped="skipped: no CUDA")]
    steps, wait = learner_steps(ctx, "cuda", 4096, 10 if ctx.quick else 20)
    name = torch.cuda.get_device_name(0)
    return [
        Row(
            "gpu",
            "learner step B=4096 (fwd+bwd+Adam)",
            "ms",
            [s * 1e3 for s in steps],
            lower_is_better=True,
            note=f"{name}, GNNModule defaults",
        ),
        Row(
            "gpu",
            "time waiting for data",
            "fraction",
            wait,
            lower_is_better=True,
            note="next(iter_torch_batches) / step",
        ),
    ]
