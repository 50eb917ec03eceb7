"""The DOPE protocol's pieces: exact values, expert-mixture modules, rollout truth, metrics."""

from __future__ import annotations

import numpy as np
import pytest

from offline_graph.bench.case_ope import true_value
from offline_graph.bench.ope_protocol import metrics, spearman, true_values
from offline_graph.bench.ope_targets import expert_mixture_module
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.graphs.graph import graph_to_dict
from offline_graph.env.making import make_env
from offline_graph.env.next_hop import next_hop_expert
from offline_graph.rllib.ope.ope_policy import target_choices


def test_true_value_by_hand() -> None:
    p = 1 - 0.5 + 0.5 / 4  # right with probability 0.625
    # two steps, the first miss ends the episode, no hazard: p + p * p
    assert true_value(0.5, 4, 2, 1, 0.0) == pytest.approx(p + p * p)
    # three steps, two misses allowed, hazard h: p + (1-h) p + (1-h)^2 p (1 - q^2)
    h, q = 0.1, 1 - p
    assert true_value(0.5, 4, 3, 2, h) == pytest.approx(p + (1 - h) * p + (1 - h) ** 2 * p * (1 - q * q))
    assert true_value(0.0, 4, 50, 3, 0.02) == pytest.approx((1 - 0.98**50) / 0.02)  # the expert


def _graph_obs(colors: list[int], edges: list[tuple[int, int]]) -> dict:
    x = np.zeros((len(colors), 16), np.float32)
    x[np.arange(len(colors)), colors] = 1.0
    return {
        "x": x,
        "edge_index": np.array(edges, np.int64).T.reshape(2, -1),
        "edge_attr": np.zeros((len(edges), 2), np.float32),
    }


def test_mixture_module_probabilities_on_hand_built_graphs() -> None:
    env = make_env("offline_graph/Graph-v0", {})
    module = expert_mixture_module("offline_graph/Graph-v0", 0.4, env.observation_space, env.action_space)
    # correct colors: 2 (two 2-2 edges), 1 (one 1-1 edge), 0 (no same-colored edge)
    graphs = [
        _graph_obs([2, 2, 2, 0], [(0, 1), (1, 2), (2, 3)]),
        _graph_obs([1, 1, 3], [(0, 1)]),
        _graph_obs([3, 0], [(0, 1)]),
    ]
    probs = target_choices(module, GraphColumns.from_graphs(graphs, 2), explore=True)
    expected = np.full((3, 4), 0.1)  # eps / k
    expected[[0, 1, 2], [2, 1, 0]] += 0.6  # 1 - eps on the correct color
    np.testing.assert_allclose(probs.probs.reshape(3, 4), expected, rtol=1e-6)

    # NextHop: a square 0-1-3, 0-2-3 where the way through node 1 is shorter; from node 0 to 3
    # the allowed choices are nodes 1 and 2, the expert's is 1: pi = (0, 0.25 + 0.5, 0.25, 0).
    nh = make_env("offline_graph/NextHop-v0", {})
    pos = np.array([[0.1, 0.1], [0.2, 0.5], [0.8, 0.1], [0.3, 0.9]])
    nh.reset(options={"positions": pos, "edges": [(0, 1), (0, 2), (1, 3), (2, 3)], "start": 0, "target": 3})
    obs = graph_to_dict(nh.unwrapped._obs(), 1)
    assert next_hop_expert(obs) == 1
    mix = expert_mixture_module("offline_graph/NextHop-v0", 0.5, nh.observation_space, nh.action_space)
    got = target_choices(mix, GraphColumns.from_graphs([obs, obs], 1), explore=True)
    np.testing.assert_allclose(got.probs, [0, 0.75, 0.25, 0] * 2, atol=1e-6)
    # the recorded behaviour's log-probabilities are the mixture's at the logged actions
    assert got.at(np.array([1, 2])).tolist() == pytest.approx([0.75, 0.25])


def test_rollout_true_value_matches_the_exact_formula() -> None:
    (res,) = true_values("offline_graph/Graph-v0", [0.8], episodes=400, seed=3)
    exact = true_value(0.8, 4, 50, 3, 0.02)  # 1.909
    assert res["episodes"] == 400 and 0.03 < res["se"] < 0.15
    assert abs(res["mean"] - exact) < 3 * res["se"]
    m = metrics(
        [{"value": v, "ci_low": v - 1, "ci_high": v + 1, "seconds": 1.0} for v in (3.0, 1.0, 3.5)],
        [2.0, 1.0, 5.0],
    )
    # errors 1, 0, 1.5 over the range 4; ranks agree; the chosen (3.5) is the best; 3.5 +- 1 misses 5
    assert m["abs_error"] == pytest.approx(2.5 / 3 / 4) and m["spearman"] == 1.0
    assert m["regret_at_1"] == 0.0 and m["coverage"] == pytest.approx(2 / 3)


def test_spearman() -> None:
    assert spearman([1, 2, 3], [10, 20, 30]) == 1.0
    assert spearman([3, 2, 1], [10, 20, 30]) == -1.0
    assert spearman([1, 3, 2], [1, 2, 3]) == pytest.approx(0.5)
    assert np.isfinite(spearman([1, 1, 1], [1, 2, 3]))


def test_protocol_runs_only_the_methods_asked_for(tmp_path) -> None:
    from offline_graph.bench.ope_protocol import evaluate_seed, record_logs, run
    from offline_graph.data.errors import ConfigError
    from offline_graph.data.episodes.logged import load_logged
    from offline_graph.data.episodes.reader import spec_from_spaces

    key = "offline_graph/Graph-v0"
    record_logs(key, 0.5, 7, 20, str(tmp_path))
    rows = evaluate_seed(key, str(tmp_path), [0.5], 0.5, seed=7, methods=["pdis", "wis"])
    assert list(rows) == ["wis", "pdis"]  # METHODS' order, nothing else run
    # the target is the behaviour: every ratio is 1, so both are the mean logged return
    env = make_env(key, {})
    logged = load_logged(str(tmp_path), spec_from_spaces(env.observation_space, env.action_space))
    returns = np.add.reduceat(logged.trans.rewards.astype(np.float64), logged.ptr[:-1])
    assert len(returns) == 20
    for m in ("wis", "pdis"):
        assert rows[m][0]["value"] == pytest.approx(float(returns.mean()), rel=1e-9)
        assert rows[m][0]["ess"] == pytest.approx(20.0)
    with pytest.raises(ConfigError, match=r"methods must be some of .*found \['wis', 'mc'\]"):
        run(key, [0], [0.5], methods=["wis", "mc"])
