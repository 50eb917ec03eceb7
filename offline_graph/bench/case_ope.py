"""Bench case ``ope`` and the DOPE-style check of off-policy evaluation on Graph-v0.

Graph-v0 (default settings: ``k`` colors, reward 1 for the correct color, the episode ends
after ``max_mistakes`` wrong actions, a per-step hazard, truncation after ``max_steps``) has
policies whose value is known exactly: the epsilon-mixture of the expert (the correct action
with probability ``1 - eps``, else uniform) is right with probability
``p = 1 - eps + eps / k`` at every step, independently, so (:func:`true_value`)::

    V(eps) = sum_{t < max_steps} p * (1 - hazard)^t * P(fewer than max_mistakes misses in t steps)

:class:`ExpertMixture` is that policy as an RLModule (its ``forward_inference`` reads the
learner batch, finds every graph's correct color as the env does, and returns the mixture's
logits), so the estimators evaluate it like any trained module. The behaviour logs are the
``mixed`` policy's (epsilon ``eps_b``), whose probabilities are known too
(:func:`behaviour_logp`: ``eps_b / k + (1 - eps_b) * 1[a correct]``) and passed as logged.

:func:`dope` estimates every target with every method and reports, per method, the mean
absolute error normalized by the range of the true values, Spearman's rank correlation,
regret@1 (normalized) and how often the 95% interval covers the true value.

Bench case ``ope``: the seconds each method takes per 10k logged transitions (FQE / DR with
``FQE_EPOCHS`` epochs) on freshly recorded Graph-v0 logs.
"""

from __future__ import annotations

import math
import tempfile
import time
from typing import Any, Sequence

import numpy as np

from offline_graph.bench.harness import BenchContext, Row
from offline_graph.data.logged import Logged, load_logged
from offline_graph.data.reader import spec_from_spaces

ENV = "offline_graph/Graph-v0"
METHODS = ("wis", "pdis", "fqe", "dr")
TARGET_EPS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
FQE_EPOCHS = 5


def true_value(eps: float, k: int, max_steps: int, max_mistakes: int, hazard: float) -> float:
    """The exact expected undiscounted return of the expert mixture (module doc)."""
    p = 1.0 - eps + eps / k
    q = 1.0 - p
    total = 0.0
    for t in range(max_steps):
        alive = sum(math.comb(t, m) * q**m * p ** (t - m) for m in range(min(max_mistakes, t + 1)))
        total += p * (1.0 - hazard) ** t * alive
    return total


def _expert_mixture_class() -> type:
    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

    class ExpertMixture(TorchRLModule):
        """Graph-v0's expert mixed with uniform actions: ``model_config = {"epsilon", "k"}``."""

        def setup(self) -> None:
            cfg: Any = self.model_config
            self.eps = float(cfg["epsilon"])
            self.k = int(cfg["k"])
            self.dummy = torch.nn.Parameter(torch.zeros(1))  # a device and parameters

        def _forward(self, batch: dict, **kwargs: Any) -> dict:
            obs = batch[Columns.OBS]
            best = correct_actions(obs, self.k)
            probs = torch.full((len(best), self.k), self.eps / self.k, dtype=torch.float64)
            probs[torch.arange(len(best)), best] += 1.0 - self.eps
            low = torch.finfo(torch.float32).min
            logits = torch.where(probs > 0, probs.log(), torch.full_like(probs, low)).float()
            return {Columns.ACTION_DIST_INPUTS: logits}

    return ExpertMixture


def correct_actions(obs: dict, k: int) -> Any:
    """Graph-v0's correct color of every graph of a learner batch (as ``correct_action``)."""
    import torch

    num_graphs = obs["ptr"].numel() - 1
    color = obs["x"][:, :k].argmax(dim=-1)
    src, dst = obs["edge_index"].long()
    same = color[src] == color[dst]
    counts = torch.zeros(num_graphs * k, dtype=torch.float64)
    idx = obs["batch"][src[same]].long() * k + color[src[same]]
    counts.index_add_(0, idx, torch.ones(len(idx), dtype=torch.float64))
    return counts.view(num_graphs, k).argmax(dim=-1)


def expert_mixture(eps: float, observation_space: Any, action_space: Any) -> Any:
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    spec = RLModuleSpec(
        module_class=_expert_mixture_class(),
        observation_space=observation_space,
        action_space=action_space,
        model_config={"epsilon": float(eps), "k": int(action_space.n)},
    )
    return spec.build()


def behaviour_logp(data: Any, eps_b: float, observation_space: Any, action_space: Any) -> Logged:
    """The logs of ``data`` with the mixed policy's exact ``log mu(a | s)`` (module doc)."""
    from offline_graph.rllib.ope_policy import minibatches, torch_obs

    logged = load_logged(data, spec_from_spaces(observation_space, action_space))
    k = int(action_space.n)
    best = np.concatenate(
        [
            correct_actions(torch_obs(logged.trans.obs.take(i)), k).numpy()
            for i in minibatches(len(logged.trans), 512)
        ]
    )
    mu = eps_b / k + (1.0 - eps_b) * (best == logged.trans.actions)
    return Logged(logged.trans, logged.ptr, np.log(mu))


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""

    def ranks(values: Sequence[float]) -> np.ndarray:
        v = np.asarray(values, np.float64)
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v), dtype=np.float64)
        for value in np.unique(v):
            r[v == value] = r[v == value].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    denom = float(np.sqrt(((ra - ra.mean()) ** 2).sum() * ((rb - rb.mean()) ** 2).sum()))
    return float(((ra - ra.mean()) * (rb - rb.mean())).sum() / denom) if denom else 0.0


def dope(
    data: Any,
    eps_b: float = 0.5,
    targets: Sequence[float] = TARGET_EPS,
    *,
    seed: int = 0,
    epochs: int = 30,
    n_boot: int = 200,
    q_model: dict | None = None,
    batch_size: int = 256,
) -> dict[str, Any]:
    """Every method on every target (module doc); returns per-method metrics and the rows."""
    from offline_graph.env.graph_env import EnvConfig
    from offline_graph.env.making import make_env
    from offline_graph.rllib.ope import estimate_value

    env = make_env(ENV, {})
    c = EnvConfig()
    k = int(env.action_space.n)  # type: ignore[attr-defined]
    logged = behaviour_logp(data, eps_b, env.observation_space, env.action_space)
    truth = [true_value(e, k, c.max_steps, c.max_mistakes, c.hazard) for e in targets]
    rows: dict[str, list[dict]] = {m: [] for m in METHODS}
    for eps in targets:
        module = expert_mixture(eps, env.observation_space, env.action_space)
        common: dict[str, Any] = dict(gamma=1.0, explore=True, n_boot=n_boot, seed=seed)
        for m in ("wis", "pdis"):
            rows[m].append(estimate_value(module, logged, method=m, **common))  # type: ignore[arg-type]
        dr = estimate_value(
            module, logged, method="dr", epochs=epochs, q_model=q_model, batch_size=batch_size, **common
        )  # type: ignore[arg-type]
        rows["dr"].append(dr)
        rows["fqe"].append(dr["fqe"])
    span = max(truth) - min(truth)
    out: dict[str, Any] = {"truth": dict(zip(targets, truth)), "episodes": logged.episodes}
    for m, res in rows.items():
        est = [r["value"] for r in res]
        best = int(np.argmax(est))
        out[m] = {
            "estimates": est,
            "abs_error": float(np.mean(np.abs(np.array(est) - truth)) / span),
            "spearman": spearman(est, truth),
            "regret_at_1": (max(truth) - truth[best]) / span,
            "coverage": float(np.mean([r["ci_low"] <= t <= r["ci_high"] for r, t in zip(res, truth)])),
            "seconds": float(sum(r["seconds"] for r in res)),
        }
    return out


def case_ope(ctx: BenchContext) -> list[Row]:
    """Seconds per 10k transitions of each method (module doc)."""
    from offline_graph.env.making import make_env
    from offline_graph.jobs.recording import plan_jobs, record
    from offline_graph.rllib.ope import estimate_value

    env = make_env(ENV, {})
    episodes = 40 if ctx.quick else 200
    with tempfile.TemporaryDirectory() as out:
        jobs = plan_jobs(
            env=ENV, env_config={}, policy="mixed", epsilon=0.5, seed=0,
            episodes=episodes, episodes_per_file=100, output=out,
        )  # fmt: skip
        list(record(jobs, workers=1, show_progress=False))
        logged = behaviour_logp(out, 0.5, env.observation_space, env.action_space)
    module = expert_mixture(0.2, env.observation_space, env.action_space)
    rows = []
    for method in METHODS:
        times = []
        for r in range(ctx.repeats):
            t = time.perf_counter()
            estimate_value(module, logged, method=method, gamma=1.0, explore=True, epochs=FQE_EPOCHS, seed=r)  # type: ignore[arg-type]
            times.append((time.perf_counter() - t) * 1e4 / len(logged.trans))
        note = f"{FQE_EPOCHS} FQE epochs" if method in ("fqe", "dr") else "200 bootstrap resamples"
        rows.append(
            Row("ope", f"{method} seconds per 10k transitions", "s", times, lower_is_better=True, note=note)
        )
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m offline_graph.bench.case_ope LOGS [--epochs N] [--hidden H --layers L
    --batch-size B]``: the DOPE check (:func:`dope`) on logs of the mixed policy, as JSON."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("data", help="episode files of the mixed policy (epsilon --eps-b)")
    parser.add_argument("--eps-b", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden", type=int, default=64, help="the FQE Q network's width")
    parser.add_argument("--layers", type=int, default=2, help="its message-passing layers")
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args(argv)
    q_model = {"hidden": args.hidden, "layers": args.layers, "head_hidden": max(32, args.hidden)}
    res = dope(
        args.data, args.eps_b, epochs=args.epochs, seed=args.seed, q_model=q_model, batch_size=args.batch_size
    )
    print(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
