"""Bench case ``gpu``: GNNModule learner step time on CUDA and the share spent waiting for data.

Skipped (one row saying so) without CUDA.
"""

from __future__ import annotations

import time
from typing import Any

from offline_graph.bench.harness import BenchContext, Row
from offline_graph.bench.synthetic import graph_spaces


def learner_steps(
    ctx: BenchContext, device: str, batch_size: int = 4096, steps: int = 20
) -> tuple[list[float], list[float]]:
    """GNNModule forward+backward (BC loss) on ``device`` fed by the converted-rows stream:
    (seconds per step, fraction of each step spent waiting for the batch iterator)."""
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.rllib.offline.collate_fn import GraphCollateFn
    from offline_graph.rllib.core.gnn_module import GNNModule

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
