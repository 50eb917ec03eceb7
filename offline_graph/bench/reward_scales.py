"""Do IQL and CQL need their rewards rescaled by hand? The same expert logs at several reward
scales, trained through RLlib's own configs with only the documented defaults (issue 40).

The task (graph-level ``Discrete(2)``): each step shows a fresh random graph (3-12 nodes, 4
node features, a ring of edges); the correct action is 1 when the node features' first column
sums above 0, else 0. The logs are an expert's (every action correct), 4-16 steps per
episode, 30% of them truncated, written as RLlib ``SingleAgentEpisode``s with
``offline_graph.write_episodes``. Rewards: ``scale`` for every (correct) step (``dense``), or
``scale`` once at the end of a terminated episode, 0 otherwise (``sparse``).

Each algorithm is an RLlib config plus ``offline_graph.configure``: ``BCConfig``,
``IQLConfig`` (the CLI's ``beta=3``, ``expectile=0.8``), ``CQLConfig`` (``min_q_weight=1``),
learning rates 1e-3, batch 256, ``tau`` 0.005, the reward scaling left at its default. The
score is the greedy accuracy on 512 fresh graphs after ``iterations`` iterations; the table
gives, per reward scale, the mean and min over seeds, and the lowest accuracy any iteration
after the first ``warmup`` showed (a collapse to one class reads about 0.5).

IQL's actor divides its advantages by their batch std where it is above 1 by default
(``configure``'s ``advantage_norm``); ``--beta``, ``--updates`` (per iteration) and
``--advantage-norm`` change IQL's settings for the collapse checks of the value-based guide,
which also print IQL's mean advantage weight and advantage std per iteration.

Run: ``python -m offline_graph.bench.reward_scales [--seeds 0 1 2] [--iterations 6]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

import numpy as np

F = 4
SETTINGS: tuple[tuple[str, float], ...] = (
    ("dense", 100.0),
    ("sparse", 1.0),
    ("dense", 10.0),
    ("dense", 1.0),
    ("dense", 0.1),
)


def _graph(rng: np.random.Generator) -> tuple[dict[str, np.ndarray], int]:
    n = int(rng.integers(3, 13))
    ring = np.arange(n, dtype=np.int64)
    x = rng.normal(size=(n, F)).astype(np.float32)
    return {"x": x, "edge_index": np.stack([ring, (ring + 1) % n])}, int(x[:, 0].sum() > 0)


def expert_episodes(n: int, seed: int, kind: str, scale: float) -> list[Any]:
    """``n`` expert episodes (module doc) as RLlib ``SingleAgentEpisode``s."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    rng = np.random.default_rng(seed)
    episodes = []
    for i in range(n):
        length = int(rng.integers(4, 17))
        truncated = bool(rng.random() < 0.3)
        ep = SingleAgentEpisode(id_=f"expert-{seed}-{i:04d}")
        obs, label = _graph(rng)
        ep.add_env_reset(observation=obs)
        for t in range(length):
            nxt, nxt_label = _graph(rng)
            last = t == length - 1
            if kind == "dense":
                reward = scale
            else:
                reward = scale if last and not truncated else 0.0
            ep.add_env_step(
                observation=nxt,
                action=np.int64(label),
                reward=float(reward),
                terminated=last and not truncated,
                truncated=last and truncated,
            )
            label = nxt_label
        episodes.append(ep)
    return episodes


def make_config(algo: str, data: str, seed: int, scaling: str | None = None, iql: dict | None = None) -> Any:
    """The RLlib config of ``algo`` on ``data`` (module doc), configured; ``iql``: IQL's
    ``beta``, ``updates`` (per iteration) and ``advantage_norm`` where not the module doc's."""
    opts = {"beta": 3.0, "updates": 10, "advantage_norm": None, **(iql or {})}
    import gymnasium as gym
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.algorithms.cql import CQLConfig
    from ray.rllib.algorithms.iql import IQLConfig

    import offline_graph
    from offline_graph import GraphOfflinePreLearner

    training: dict[str, Any] = {"train_batch_size_per_learner": 256}
    if algo == "bc":
        config: Any = BCConfig()
        training["lr"] = 1e-3
    elif algo == "iql":
        config = IQLConfig()
        training.update(
            beta=float(opts["beta"]), expectile=0.8, actor_lr=1e-3, critic_lr=1e-3, value_lr=1e-3, tau=0.005
        )
    else:
        config = CQLConfig()
        training.update(min_q_weight=1.0, critic_lr=1e-3, tau=0.005)
    config = (
        config.environment(
            observation_space=offline_graph.graph_space(F, None), action_space=gym.spaces.Discrete(2)
        )
        .offline_data(
            input_=[data],
            input_read_episodes=True,
            prelearner_class=GraphOfflinePreLearner,
            dataset_num_iters_per_learner=int(opts["updates"]),
        )
        .training(**training)
        .learners(num_learners=0)
        .debugging(seed=seed)
    )
    if algo == "bc":
        return offline_graph.configure(config, seed=seed)
    extra = (
        {} if algo == "cql" or opts["advantage_norm"] is None else {"advantage_norm": opts["advantage_norm"]}
    )
    return offline_graph.configure(config, seed=seed, reward_scaling=scaling, **extra)


def accuracy(module: Any, graphs: list[dict], labels: np.ndarray) -> float:
    from offline_graph.rllib.evaluation.acting import greedy_actions

    return float((greedy_actions(module, graphs, None) == labels).mean())


def run_one(
    algo: str,
    data: str,
    seed: int,
    iterations: int,
    test: tuple[list, np.ndarray],
    scaling: str | None = None,
    iql: dict | None = None,
) -> dict[str, Any]:
    """One training run: the accuracy (and IQL's mean advantage weight) after each iteration,
    and the reward scale used."""
    import offline_graph

    config = make_config(algo, data, seed, scaling, iql)
    algo_obj = config.build_algo()
    curve, weights, stds = [], [], []
    t0 = time.perf_counter()
    try:
        for _ in range(iterations):
            learner = algo_obj.train()["learners"]["default_policy"]
            curve.append(accuracy(algo_obj.get_module(), *test))
            weights.append(float(learner.get("adv_weight_mean", float("nan"))))
            stds.append(float(learner.get("adv_std", float("nan"))))
        report = offline_graph.data_report(config)
    finally:
        algo_obj.stop()
    return {
        "curve": curve,
        "adv_weight_mean": weights,
        "adv_std": stds,
        "seconds": time.perf_counter() - t0,
        "reward_scale": report.get("reward_scale", {}),
    }


def run(
    seeds: list[int],
    iterations: int,
    episodes: int,
    warmup: int = 2,
    scaling: str | None = None,
    settings: tuple[tuple[str, float], ...] = SETTINGS,
    algos: tuple[str, ...] = ("bc", "iql", "cql"),
    iql: dict | None = None,
) -> dict[str, Any]:
    import ray

    import offline_graph

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rng = np.random.default_rng(12345)
    pairs = [_graph(rng) for _ in range(512)]
    test = ([g for g, _ in pairs], np.array([lab for _, lab in pairs]))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, scale in settings:
            for seed in seeds:
                data = f"{tmp}/{kind}-{scale:g}-{seed}"
                offline_graph.write_episodes(data, expert_episodes(episodes, seed, kind, scale))
                for algo in algos:
                    res = run_one(algo, data, seed, iterations, test, scaling, iql)
                    rows.append({"kind": kind, "scale": scale, "seed": seed, "algo": algo, **res})
                    print(
                        f"{kind} x{scale:g} seed {seed} {algo}: "
                        + " ".join(f"{a:.3f}" for a in res["curve"])
                        + f" ({res['seconds']:.0f} s, scale {res['reward_scale'].get('scale', 1.0):.4g})"
                        + (_iql_line(res) if algo == "iql" else ""),
                        flush=True,
                    )
    return {
        "rows": rows,
        "iterations": iterations,
        "episodes": episodes,
        "warmup": warmup,
        "scaling": scaling,
        "iql": iql or {},
    }


def _iql_line(res: dict[str, Any]) -> str:
    """IQL's mean advantage weight and advantage std per iteration."""
    weights = " ".join(f"{w:.3g}" for w in res["adv_weight_mean"])
    return f" w {weights} std " + " ".join(f"{s:.3g}" for s in res["adv_std"])


def markdown(result: dict[str, Any]) -> str:
    """The table: per setting and algorithm, final accuracy mean / min over seeds, and the
    lowest accuracy of any iteration after the warm-up."""
    warm = int(result["warmup"])
    out = [
        "| rewards | BC final (mean / min) | IQL final | IQL lowest after it. "
        f"{warm} | CQL final | CQL lowest after it. {warm} |",
        "|---|---|---|---|---|---|",
    ]
    for kind, scale in dict.fromkeys((r["kind"], r["scale"]) for r in result["rows"]):
        cells = []
        for algo in ("bc", "iql", "cql"):
            runs = [r for r in result["rows"] if (r["kind"], r["scale"], r["algo"]) == (kind, scale, algo)]
            if not runs:
                continue
            final = np.array([r["curve"][-1] for r in runs])
            cells.append(f"{final.mean():.3f} / {final.min():.3f}")
            if algo != "bc":
                cells.append(f"{min(min(r['curve'][warm:]) for r in runs):.3f}")
        label = f"{kind}, x{scale:g}" if kind == "dense" else f"sparse 0/1 at the end, x{scale:g}"
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument(
        "--reward-scaling", default=None, help="configure(reward_scaling=...); default: its default"
    )
    parser.add_argument(
        "--scales", type=float, nargs="+", default=None, help="dense scales only (default: all settings)"
    )
    parser.add_argument(
        "--skip", type=int, default=0, help="leave out the first SKIP settings (a resumed run)"
    )
    parser.add_argument("--algos", nargs="+", default=["bc", "iql", "cql"])
    parser.add_argument("--beta", type=float, default=3.0, help="IQL's beta")
    parser.add_argument("--updates", type=int, default=10, help="updates per iteration")
    parser.add_argument(
        "--advantage-norm", default=None, help="configure(advantage_norm=...) for IQL; default: its default"
    )
    parser.add_argument("--json", default=None, help="write the result here")
    args = parser.parse_args(argv)
    settings = (SETTINGS if args.scales is None else tuple(("dense", s) for s in args.scales))[args.skip :]
    result = run(
        args.seeds,
        args.iterations,
        args.episodes,
        scaling=args.reward_scaling,
        settings=settings,
        algos=tuple(args.algos),
        iql={"beta": args.beta, "updates": args.updates, "advantage_norm": args.advantage_norm},
    )
    print(markdown(result))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
