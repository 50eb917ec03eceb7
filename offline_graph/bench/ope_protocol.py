"""The DOPE-style protocol for off-policy evaluation on our envs (``docs/guides/ope.md``).

For one env (or one Team-v0 module, an :data:`~offline_graph.bench.ope_targets.EXPERTS` key):

1. targets: the expert mixtures with ``eps`` in :data:`TARGET_EPS`
   (:mod:`offline_graph.bench.ope_targets`), as RLModules;
2. true values: :func:`true_values` runs each target's numpy twin in the env for
   ``episodes`` episodes (undiscounted return; mean and standard error);
3. behaviour logs: the mixture with ``eps_b`` (none of the targets), recorded with the
   project's recorder, one recording per seed; the estimators get its exact probabilities
   (:func:`~offline_graph.bench.ope_targets.with_mixture_logp`) and, for ``wis_bc``, none
   (``behaviour="bc"``: a cloned behaviour policy);
4. :func:`evaluate_seed`: ``wis``, ``pdis``, ``fqe``, ``dr`` (and ``wis_bc``) with
   ``estimate_value``'s defaults except ``gamma=1.0, explore=True`` (``fqe`` is the FQE model
   of the ``dr`` run, unless ``separate_fqe`` or ``fqe_options``: ``--fqe-option``);
   :func:`metrics`: per method the mean absolute error normalized by the range of the true
   values, Spearman's rank correlation, regret@1 (normalized) and the share of 95% intervals
   that cover the true value.

``--methods wis pdis`` runs only those (the IS family takes seconds, FQE / DR minutes).
``python -m offline_graph.bench.ope_protocol --env offline_graph/Graph-v0 --seeds 0 1 2
--output ope-graph.json`` runs it and prints :func:`markdown`.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from typing import Any, Sequence

import numpy as np

from offline_graph.bench.experiments.results import record_episodes, write_results
from offline_graph.bench.ope_targets import (
    expert_for,
    expert_mixture_module,
    mixture_policy,
    seed_team_mixed,
    team_mixture,
    with_mixture_logp,
)
from offline_graph.env.team_policies import agent_kind

TARGET_EPS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
METHODS = ("wis", "pdis", "fqe", "dr", "wis_bc")
EPS_B = 0.5
LOG_EPISODES = 300
TRUE_EPISODES = 2000


def env_id(key: str) -> str:
    """The env of an EXPERTS key (``"<env>"`` or ``"<env>:<module>"``)."""
    return key.split(":")[0]


def spaces(key: str) -> tuple[Any, Any]:
    """(observation space, action space) of the key's policy (a Team-v0 module: its agents')."""
    from offline_graph.env.making import make_env

    if ":" in key:
        from offline_graph.jobs.ma_recording import agent_spaces, make_ma_env

        obs_spaces, act_spaces = agent_spaces(make_ma_env(env_id(key), {}))
        agent = next(a for a in obs_spaces if agent_kind(a) == key.split(":")[1])
        return obs_spaces[agent], act_spaces[agent]
    env = make_env(env_id(key), {})
    return env.observation_space, env.action_space


def _returns(key: str, eps: float, episodes: int, seed: int) -> list[float]:
    """The undiscounted returns of the ``eps`` mixture: one per episode, or for a Team-v0
    module one per agent-episode of that module's agents (the others act alike)."""
    from offline_graph.data.graphs.graph import space_sizes
    from offline_graph.env.making import episode_seeds, episode_steps, make_env, mask_key_for

    if ":" in key:
        from offline_graph.jobs.ma_recording import agent_spaces, make_ma_env, run_ma_episode

        env = make_ma_env(env_id(key), {})
        obs_spaces, act_spaces = agent_spaces(env)
        edge_dims = {a: space_sizes(sp)[1] for a, sp in obs_spaces.items()}
        mask_keys = {a: mask_key_for_space(sp) for a, sp in act_spaces.items()}
        kind = key.split(":")[1]
        out = []
        for i in range(int(episodes)):
            env_seed, rng = episode_seeds(seed, i)
            policy = team_mixture(eps, rng)
            _, rets, _ = run_ma_episode(env, policy, env_seed, f"e{i}", edge_dims, mask_keys)
            out += [r for aid, r in rets.items() if agent_kind(aid) == kind]
        return out
    env = make_env(env_id(key), {})
    _, edge_dim = space_sizes(env.observation_space)
    mask_key = mask_key_for(env)
    expert = expert_for(key)
    out = []
    for i in range(int(episodes)):
        env_seed, rng = episode_seeds(seed, i)
        steps = episode_steps(env, mixture_policy(expert, eps, rng), env_seed, edge_dim, mask_key)
        out.append(sum(s.reward for s in steps))
    return out


def mask_key_for_space(space: Any) -> str | None:
    """The recorder's mask key for an agent's action space (None for Discrete)."""
    from offline_graph.data.graphs.spaces import selection_level
    from offline_graph.env.making import DEFAULT_MASK_KEY

    return DEFAULT_MASK_KEY if selection_level(space) is not None else None


def true_values(
    key: str, targets: Sequence[float], episodes: int = TRUE_EPISODES, seed: int = 12345
) -> list[dict]:
    """Per target, ``{"eps", "mean", "se", "episodes"}`` of the undiscounted return of its
    mixture over ``episodes`` env episodes (episode ``i`` seeded by ``episode_seeds(seed, i)``;
    for a Team-v0 module, ``episodes`` counts that module's agent-episodes)."""
    out = []
    for eps in targets:
        r = np.asarray(_returns(key, float(eps), episodes, seed))
        se = float(r.std(ddof=1) / np.sqrt(len(r)))
        out.append({"eps": float(eps), "mean": float(r.mean()), "se": se, "episodes": len(r)})
    return out


def record_logs(key: str, eps_b: float, seed: int, episodes: int, output: str) -> str:
    """Record ``episodes`` of the ``eps_b`` mixture into ``output`` (the env's ``"mixed"``);
    returns the equivalent ``offline-graph record`` command line."""
    policy = "mixed"
    if ":" in key:  # Team-v0's own "mixed" is its decoy heuristic: the uniform mixture instead
        seed_team_mixed(seed, eps_b)
        policy = "offline_graph.bench.ope_targets:team_mixed"
    return record_episodes(output, policy, eps_b, episodes, seed, env_id(key), episodes_per_file=100)[1]


def evaluate_seed(
    key: str,
    logs: str,
    targets: Sequence[float],
    eps_b: float = EPS_B,
    *,
    seed: int = 0,
    separate_fqe: bool = False,
    fqe_options: dict[str, Any] | None = None,
    methods: Sequence[str] = METHODS,
    **options: Any,
) -> dict[str, list[dict]]:
    """The ``estimate_value`` result per target of each of ``methods`` (of :data:`METHODS`)
    on the recording ``logs``.

    ``options`` go to every ``estimate_value`` call (none: its defaults); ``fqe_options``
    (given: ``fqe`` runs on its own, as it does without ``dr``) also to the ``fqe`` one."""
    from offline_graph.rllib.ope.estimate import estimate_value

    obs_space, act_space = spaces(key)
    behaviour = expert_mixture_module(key, eps_b, obs_space, act_space)
    common: dict[str, Any] = dict(gamma=1.0, explore=True, seed=seed, **options)
    bc: dict[str, Any] = {}
    data: Any = logs
    if ":" in key:  # one Team-v0 module: its agents' steps, each agent one logged episode
        from offline_graph.data.episodes.logged import load_agents
        from offline_graph.data.episodes.reader import spec_from_spaces
        from offline_graph.rllib.ope.estimate import module_route

        bc["module_id"] = key.split(":")[1]
        data = load_agents(logs, module_route(spec_from_spaces(obs_space, act_space), None), bc["module_id"])
    logged = with_mixture_logp(data, behaviour)
    wanted = check_methods(methods)
    rows: dict[str, list[dict]] = {m: [] for m in METHODS if m in wanted}
    for eps in targets:
        module = expert_mixture_module(key, eps, obs_space, act_space)
        for m in ("wis", "pdis", "dr"):
            if m in rows:
                rows[m].append(estimate_value(module, logged, method=m, **common))
        if "fqe" in rows and (separate_fqe or fqe_options or "dr" not in rows):
            rows["fqe"].append(estimate_value(module, logged, method="fqe", **common, **(fqe_options or {})))
        elif "fqe" in rows:
            rows["fqe"].append({**rows["dr"][-1]["fqe"], "seconds": rows["dr"][-1]["seconds"]})
        if "wis_bc" in rows:
            rows["wis_bc"].append(estimate_value(module, logs, method="wis", behaviour="bc", **bc, **common))
    return rows


def check_methods(methods: Sequence[str]) -> list[str]:
    """``methods`` when each is one of :data:`METHODS` and there is one, else a ConfigError."""
    from offline_graph.data.errors import ConfigError

    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ConfigError(
            f"ope_protocol: methods must be some of {list(METHODS)} (found {list(methods)!r}). "
            "wis_bc is WIS with a cloned behaviour; fqe alone runs its own FQE fit."
        )
    return list(methods)


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


def metrics(results: Sequence[dict], truth: Sequence[float]) -> dict[str, Any]:
    """DOPE's metrics of one method's results (one per target) against the true values."""
    est = np.array([r["value"] for r in results], np.float64)
    t = np.asarray(truth, np.float64)
    span = float(t.max() - t.min())
    return {
        "estimates": est.tolist(),
        "abs_error": float(np.mean(np.abs(est - t)) / span),
        "spearman": spearman(est.tolist(), t.tolist()),
        "regret_at_1": float((t.max() - t[int(np.argmax(est))]) / span),
        "coverage": float(np.mean([r["ci_low"] <= v <= r["ci_high"] for r, v in zip(results, t)])),
        "seconds": float(sum(r["seconds"] for r in results)),
    }


def run(
    key: str,
    seeds: Sequence[int],
    targets: Sequence[float] = TARGET_EPS,
    *,
    eps_b: float = EPS_B,
    log_episodes: int = LOG_EPISODES,
    true_episodes: int = TRUE_EPISODES,
    **options: Any,
) -> dict[str, Any]:
    """The whole protocol for ``key`` (module doc); JSON-ready. ``options`` go to
    :func:`evaluate_seed` (``methods=``: some of :data:`METHODS`)."""
    check_methods(options.get("methods", METHODS))
    t0 = time.perf_counter()
    truth = true_values(key, targets, true_episodes)
    out: dict[str, Any] = {"key": key, "eps_b": eps_b, "targets": list(targets), "truth": truth, "seeds": {}}
    out["truth_seconds"] = time.perf_counter() - t0
    means = [t["mean"] for t in truth]
    for seed in seeds:
        with tempfile.TemporaryDirectory() as logs:
            record_logs(key, eps_b, int(seed), log_episodes, logs)
            rows = evaluate_seed(key, logs, targets, eps_b, seed=int(seed), **options)
        print(f"{key} seed {seed}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        first = next(iter(rows.values()))[0]
        out["seeds"][str(seed)] = {
            "episodes": first["episodes"],
            "transitions": first["transitions"],
            "ess": [r["ess"] for r in rows["wis"]] if "wis" in rows else None,
            **{m: metrics(res, means) for m, res in rows.items()},
        }
    out["seconds"] = time.perf_counter() - t0
    return out


def markdown(res: dict[str, Any]) -> str:
    """The result of :func:`run` as a markdown table (a row per method and seed, then the mean)."""
    head = (
        "| method | seed | norm. abs error | Spearman | regret@1 | CI coverage | estimates (eps "
        + " ".join(f"{e:g}" for e in res["targets"])
    )
    lines = [head + ") |", "|---|---|---|---|---|---|---|"]
    seeds = res["seeds"]
    for m in [m for m in METHODS if m in next(iter(seeds.values()))]:
        for s, r in seeds.items():
            lines.append(
                f"| {m} | {s} | {100 * r[m]['abs_error']:.1f}% | {r[m]['spearman']:.2f} | "
                f"{r[m]['regret_at_1']:.2f} | {r[m]['coverage']:.2f} | "
                + " ".join(f"{v:.2f}" for v in r[m]["estimates"])
                + " |"
            )
        avg = {
            k: np.mean([r[m][k] for r in seeds.values()])
            for k in ("abs_error", "spearman", "regret_at_1", "coverage")
        }
        lines.append(
            f"| **{m}** | mean | **{100 * avg['abs_error']:.1f}%** | **{avg['spearman']:.2f}** | "
            f"**{avg['regret_at_1']:.2f}** | **{avg['coverage']:.2f}** | |"
        )
    truth = " ".join(f"{t['mean']:.2f} ± {t['se']:.2f}" for t in res["truth"])
    lines.append(f"\nTrue values ({res['truth'][0]['episodes']} episodes each, mean ± s.e.): {truth}")
    return "\n".join(lines)


def table(res: dict[str, Any]) -> str:
    """results.md of the protocol: :func:`markdown` and its seconds."""
    return markdown(res) + f"\n\n{res['seconds']:.0f} s (true values {res['truth_seconds']:.0f} s)\n"


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m offline_graph.bench.ope_protocol --env KEY [--seeds 0 1 2] [--output F]``."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", required=True, help="an EXPERTS key, e.g. offline_graph/NextHop-v0")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--targets", type=float, nargs="+", default=list(TARGET_EPS), help="their eps")
    parser.add_argument("--eps-b", type=float, default=EPS_B)
    parser.add_argument("--log-episodes", type=int, default=LOG_EPISODES)
    parser.add_argument("--true-episodes", type=int, default=TRUE_EPISODES)
    parser.add_argument("--separate-fqe", action="store_true", help="run method='fqe' on its own")
    parser.add_argument(
        "--methods", nargs="+", choices=METHODS, default=list(METHODS), help="those to run (default: all)"
    )
    parser.add_argument("--option", action="append", default=[], help="estimate_value KEY=JSON")
    parser.add_argument(
        "--fqe-option", action="append", default=[], help="estimate_value KEY=JSON of method='fqe' alone"
    )
    parser.add_argument("--output", help="write the JSON result here (and its table next to it, .md)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    options, fqe_options = (
        {k: json.loads(v) for k, v in (o.split("=", 1) for o in opts)}
        for opts in (args.option, args.fqe_option)
    )
    res = run(
        args.env, args.seeds, args.targets, eps_b=args.eps_b, log_episodes=args.log_episodes,
        true_episodes=args.true_episodes, separate_fqe=args.separate_fqe, fqe_options=fqe_options,
        methods=args.methods, **options,
    )  # fmt: skip
    if args.output:
        write_results(args.output, res, t0, table)
    else:
        print(table(res))


if __name__ == "__main__":
    main()
