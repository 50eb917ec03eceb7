"""estimate_value checked from the outside, second round: what tests/test_ope_outside.py does
not cover. Graphs without edges and with one node, a large ``Discrete(20)``, edge actions with
``action_mask`` and edge features, plain TorchRLModules with their own ``_forward_inference``
(stochastic, and deterministic one-hot ``-inf`` logits), the data as a file / list / directory
/ converted rows, long episodes (1 to 50 steps in one file) with rewards of 100 per step,
``horizon=`` given or found, and multi-agent episodes whose agents join late or act once.
Every value is computed by hand here; the call is always
``estimate_value(module, [path], method=m, gamma=1.0)["value"]``, FQE / DR at their defaults.

This file: edgeless graphs and Discrete(20), long episodes, edge actions (shared builders in
tests/ope_outside2_data.py; data forms, multi-agent and RLlib-recorded logs: test_ope_outside2_inputs.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

import offline_graph

from tests.ope_outside2_data import (
    ACT1,
    ACT2,
    GO,
    H,
    K,
    MU2,
    OBS1,
    OBS2,
    PI2,
    chain_value,
    edgeless,
    ev,
    logits1,
    make_chain,
    outside,
    reward1,
    rule1,
    rule1_greedy,
    rule2,
    rule_of,
    softmax,
    wis_pdis_by_hand,
    write,
)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return make_chain(tmp_path_factory)


@pytest.fixture(scope="module")
def bandit20(tmp_path_factory):
    rng = np.random.default_rng(11)
    eps, logs = [], []
    for i in range(400):
        n, a = int(rng.integers(1, 4)), int(rng.integers(0, K))
        ep = SingleAgentEpisode(id_=f"b-{i}", observation_space=OBS1, action_space=ACT1)
        ep.add_env_reset(observation=edgeless(n))
        ep.add_env_step(observation=edgeless(n), action=a, reward=reward1(n, a), terminated=True,
                        extra_model_outputs={"action_logp": np.float32(-math.log(K))})  # fmt: skip
        eps.append(ep)
        logs.append((n, a))
    return logs, write(tmp_path_factory.mktemp("b20"), "logs", eps, OBS1, ACT1)


def test_edgeless_one_node_graphs_discrete20_wis_pdis_exact(bandit20):
    logs, path = bandit20
    pi = [softmax(logits1(n).astype(np.float64))[a] for n, a in logs]
    want = sum(p * K * reward1(n, a) for p, (n, a) in zip(pi, logs)) / sum(p * K for p in pi)
    module = outside(OBS1, ACT1, rule1)
    for method in ("wis", "pdis"):
        res = ev(module, [path], method=method, gamma=1.0, explore=True)
        assert res["value"] == pytest.approx(want, rel=1e-6), method
        assert (res["episodes"], res["transitions"], res["behaviour"]) == (400, 400, "logged")
    # greedy: the episodes whose action is the arg max, each weighted 1 / mu = 20 alike
    greedy = [reward1(n, a) for n, a in logs if a == int(np.argmax(logits1(n)))]
    assert len(greedy) >= 10
    for rule, explore in ((rule1, False), (rule1_greedy, True), (rule1_greedy, False)):
        res = ev(outside(OBS1, ACT1, rule), [path], method="wis", gamma=1.0, explore=explore)
        assert res["value"] == pytest.approx(np.mean(greedy), rel=1e-9), (rule.__name__, explore)
        assert res["ess"] == pytest.approx(len(greedy), rel=1e-9)


def test_edgeless_discrete20_fqe_and_dr_defaults(bandit20):
    """True value: E_{a ~ pi}[r(n, a)] over the logged contexts (what FQE / DR estimate).
    Tolerance 5% of the reward range [0, 3] (the issue's goal: 10% normalized error)."""
    logs, path = bandit20
    true = np.mean(
        [softmax(logits1(n).astype(np.float64)) @ [reward1(n, a) for a in range(K)] for n, _ in logs]
    )
    res = ev(outside(OBS1, ACT1, rule1), [path], method="dr", gamma=1.0, explore=True)
    assert abs(res["fqe"]["value"] - true) <= 0.05 * 3.0, (res["fqe"]["value"], true)
    assert abs(res["value"] - true) <= 0.05 * 3.0, (res["value"], true)


def test_long_episodes_wis_pdis_exact_and_target_equal_to_behaviour(chain):
    logs, path = chain
    wis, pdis = wis_pdis_by_hand(logs, PI2)
    module = outside(OBS2, ACT2, rule2)
    for method, want in (("wis", wis), ("pdis", pdis)):
        res = ev(module, [path], method=method, gamma=1.0, explore=True)
        assert res["value"] == pytest.approx(want, rel=1e-6), method
    assert res["transitions"] == sum(map(len, logs))
    mean_return = GO * np.mean([sum(a) for a in logs])
    for method in ("wis", "pdis"):  # float32 logits and logp: ratios 1 up to ~1e-7 per step
        res = ev(outside(OBS2, ACT2, rule_of(MU2)), [path], method=method, gamma=1.0, explore=True)
        assert res["value"] == pytest.approx(mean_return, rel=1e-5), method


def test_long_episodes_fqe_and_dr_defaults_at_100_per_step(chain):
    """Values in the thousands (the target 2543.3, the behaviour 1087.6), nothing normalized
    by the user. Tolerance 5% of the return range [0, 5000]: measured on 3 recordings
    (seeds 0, 1, 2) FQE 2499.8 / 2453.2 / 2595.2 and DR 2686.0 / 2424.9 / 2514.2."""
    _, path = chain
    true = chain_value(PI2)
    assert true == pytest.approx(sum(GO * 0.8 * 0.98**k for k in range(H)))
    res = ev(outside(OBS2, ACT2, rule2), [path], method="dr", gamma=1.0, explore=True)
    assert (res["fqe_horizon"], res["fqe_iterations"]) == (H, H)  # found from the truncated ones
    assert abs(res["fqe"]["value"] - true) <= 0.05 * GO * H, (res["fqe"]["value"], true)
    assert abs(res["value"] - true) <= 0.05 * GO * H, (res["value"], true)


# --- 3. edge actions with action_mask and edge features -----------------------------------------
# A path of n = 2..5 nodes (n - 1 edges; n = 2: a single edge), edge_attr [E, 1] = the edge's
# weight, the first edge masked when there are 2 or more; the reward is the chosen edge's
# weight; the behaviour is uniform over the allowed edges; the target a softmax of 2 * weight
# over them (-inf on masked edges and past a graph's edges).

OBS3 = offline_graph.graph_space(2, 1)
ACT3 = offline_graph.EdgeAction(8)


def path_graph(weights):
    e = len(weights)
    mask = np.ones(e, bool)
    mask[0] = e == 1
    return {"x": np.ones((e + 1, 2), np.float32),
            "edge_index": np.stack([np.arange(e), np.arange(1, e + 1)]).astype(np.int64),
            "edge_attr": np.asarray(weights, np.float32)[:, None], "action_mask": mask}  # fmt: skip


def rule3(obs):
    src_graph = obs["batch"][obs["edge_index"][0]]
    counts = torch.bincount(src_graph, minlength=len(obs["ptr"]) - 1).tolist()
    out = torch.full((len(counts), max(counts)), float("-inf"))
    start = 0
    for b, e in enumerate(counts):
        w = obs["edge_attr"][start : start + e, 0]
        out[b, :e] = torch.where(obs["action_mask"][start : start + e], 2.0 * w, float("-inf"))
        start += e
    return out


def target3(weights, mask):
    logits = np.where(mask, 2.0 * np.asarray(weights, np.float32).astype(np.float64), -np.inf)
    return softmax(logits)


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    rng = np.random.default_rng(13)
    eps, logs = [], []
    for i in range(300):
        w = rng.choice([0.0, 0.5, 1.0, 1.5], size=int(rng.integers(1, 5))).tolist()
        g = path_graph(w)
        allowed = np.flatnonzero(g["action_mask"])
        a = int(rng.choice(allowed))
        ep = SingleAgentEpisode(id_=f"e-{i}", observation_space=OBS3, action_space=ACT3)
        ep.add_env_reset(observation=g)
        ep.add_env_step(observation=g, action=a, reward=w[a], terminated=True,
                        extra_model_outputs={"action_logp": np.float32(-math.log(len(allowed)))})  # fmt: skip
        eps.append(ep)
        logs.append((w, g["action_mask"], a, len(allowed)))
    return logs, write(tmp_path_factory.mktemp("edges"), "logs", eps, OBS3, ACT3)


def test_edge_actions_masked_wis_exact_greedy_and_fqe_dr(edges):
    logs, path = edges
    assert {len(w) for w, *_ in logs} == {1, 2, 3, 4}
    module = outside(OBS3, ACT3, rule3)
    ratio = [target3(w, m)[a] * k for w, m, a, k in logs]
    want = sum(r * w[a] for r, (w, _, a, _) in zip(ratio, logs)) / sum(ratio)
    res = ev(module, [path], method="wis", gamma=1.0, explore=True)
    assert res["value"] == pytest.approx(want, rel=1e-6)
    # greedy: the first allowed edge of largest weight; the matching episodes weighted by k
    match = [(k, w[a]) for w, m, a, k in logs if a == int(np.argmax(np.where(m, w, -1.0)))]
    greedy = ev(module, [path], method="wis", gamma=1.0)
    assert greedy["value"] == pytest.approx(sum(k * r for k, r in match) / sum(k for k, _ in match), rel=1e-6)
    # FQE / DR with the edge Q head, every default; tolerance 5% of the reward range [0, 1.5]
    true = np.mean([target3(w, m) @ np.asarray(w) for w, m, *_ in logs])
    dr = ev(module, [path], method="dr", gamma=1.0, explore=True)
    assert abs(dr["fqe"]["value"] - true) <= 0.075, (dr["fqe"]["value"], true)
    assert abs(dr["value"] - true) <= 0.075, (dr["value"], true)
