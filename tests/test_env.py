"""GraphEnv, correct_action and the behaviour policies."""

from __future__ import annotations

import importlib
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import GraphInstance
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import offline_graph.env as env_pkg
from offline_graph.env import (
    ENV_ID,
    EnvConfig,
    GraphEnv,
    correct_action,
    epsilon_policy,
    expert_policy,
    make_policy,
    random_policy,
)
from offline_graph.data.graphs.graph import graph_to_dict


def _graph(colors: list[int], edges: list[tuple[int, int]], k: int, noise: float = 0.0):
    """Dict-layout graph with one-hot colors in x[:, :k] and two constant noise columns."""
    n = len(colors)
    x = np.full((n, k + 2), noise, dtype=np.float32)
    x[:, :k] = 0.0
    x[np.arange(n), colors] = 1.0
    edge_index = np.array(edges, dtype=np.int64).reshape(-1, 2).T
    return {"x": x, "edge_index": edge_index, "edge_attr": np.zeros((edge_index.shape[1], 2))}


# ----------------------------------------------------------------- correct_action
@pytest.mark.parametrize(
    ("colors", "edges", "k", "expected"),
    [
        # color 1: one same-colored edge (1->2); color 2: two (3->4, 4->3); 0->1 is mixed.
        ([0, 1, 1, 2, 2], [(1, 2), (3, 4), (4, 3), (0, 1)], 3, 2),
        # tie between colors 1 and 2 (one edge each), color 0 has none -> lowest tied: 1.
        ([1, 2, 1, 2, 0], [(0, 2), (1, 3), (4, 0)], 3, 1),
        # many mixed-color edges but no same-colored one -> all counts 0 -> color 0.
        ([1, 2, 3, 1], [(0, 1), (1, 2), (2, 3), (3, 1)], 4, 0),
        # no edges at all -> color 0.
        ([3, 3, 3], [], 4, 0),
        # a self-loop counts; color 3 (one edge) beats color 0 (none).
        ([0, 3], [(1, 1), (0, 1)], 4, 3),
    ],
)
def test_correct_action_hand_built(colors, edges, k, expected):
    # Noise columns are larger than 1 so reading colors from all of x would go wrong.
    assert correct_action(_graph(colors, edges, k, noise=5.0), k) == expected


def test_correct_action_accepts_graph_instance():
    obs = _graph([0, 1, 1, 2, 2], [(1, 2), (3, 4), (4, 3), (0, 1)], 3)
    gi = GraphInstance(obs["x"], None, np.ascontiguousarray(obs["edge_index"].T))
    assert correct_action(gi, 3) == 2


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_correct_action_matches_brute_force(data):
    k = data.draw(st.integers(1, 5))
    n = data.draw(st.integers(1, 8))
    colors = data.draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
    edges = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))))
    counts = [0] * k
    for s, d in edges:
        if colors[s] == colors[d]:
            counts[colors[s]] += 1
    expected = max(range(k), key=lambda c: (counts[c], -c))
    assert correct_action(_graph(colors, edges, k), k) == expected


# ----------------------------------------------------------------- API, spaces, seeding
def test_check_env_passes_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(gym.make(ENV_ID).unwrapped)


def test_registration_and_overrides():
    importlib.reload(env_pkg)  # the registration guard must tolerate a second import
    env = gym.make(ENV_ID, num_actions=3, num_features=5, edge_dim=1)
    assert env.action_space == gym.spaces.Discrete(3)
    assert env.observation_space.node_space.shape == (5,)
    assert env.observation_space.edge_space.shape == (1,)
    from_mapping = GraphEnv({"num_actions": 3, "num_features": 5}, max_steps=9)
    assert from_mapping.config == EnvConfig(num_actions=3, num_features=5, max_steps=9)


def test_config_validation_messages():
    with pytest.raises(ValueError, match=r"num_features must be > num_actions=4 \(found 4\)"):
        GraphEnv(num_features=4)
    with pytest.raises(ValueError, match=r"hazard must be in \[0, 1\] \(found 1.5\)"):
        EnvConfig(hazard=1.5)
    with pytest.raises(ValueError, match="unknown \\['bogus'\\]"):
        GraphEnv(bogus=1)
    with pytest.raises(ValueError, match="render_mode must be None"):
        GraphEnv(render_mode="human")


def _rollout(env: GraphEnv, seed: int, steps: int):
    obs, info = env.reset(seed=seed)
    out = [(obs, 0.0, False, False, info)]
    for t in range(steps):
        obs, r, term, trunc, info = env.step(t % env.num_actions)
        out.append((obs, r, term, trunc, info))
        if term or trunc:
            obs, info = env.reset()
            out.append((obs, 0.0, False, False, info))
    return out


def test_same_seed_same_episodes_different_seed_differs():
    a = _rollout(GraphEnv(), seed=42, steps=120)
    b = _rollout(GraphEnv(), seed=42, steps=120)
    assert len(a) == len(b)
    for (oa, ra, ta, ua, ia), (ob, rb, tb, ub, ib) in zip(a, b, strict=True):
        np.testing.assert_array_equal(oa.nodes, ob.nodes)
        np.testing.assert_array_equal(oa.edges, ob.edges)
        np.testing.assert_array_equal(oa.edge_links, ob.edge_links)
        assert (ra, ta, ua, ia) == (rb, tb, ub, ib)
    c = _rollout(GraphEnv(), seed=43, steps=5)
    assert any(
        x[0].nodes.shape != y[0].nodes.shape or not np.array_equal(x[0].nodes, y[0].nodes)
        for x, y in zip(a, c)
    )


def test_observation_shapes_dtypes_and_ranges():
    env = GraphEnv(num_features=7, num_actions=3, edge_dim=2)
    obs, info = env.reset(seed=0)
    for t in range(400):
        n, e = info["num_nodes"], info["num_edges"]
        assert obs.nodes.dtype == np.float32 and obs.nodes.shape == (n, 7)
        assert obs.edges.dtype == np.float32 and obs.edges.shape == (e, 2)
        assert obs.edge_links.dtype == np.int64 and obs.edge_links.shape == (e, 2)
        assert e == (round(4.0 * n) if n > 1 else 0)
        assert np.all((obs.edge_links >= 0) & (obs.edge_links < n))
        assert not np.any(obs.edge_links[:, 0] == obs.edge_links[:, 1])  # no self-loops
        np.testing.assert_array_equal(obs.nodes[:, :3].sum(axis=1), np.ones(n))  # one-hot
        assert set(np.unique(obs.nodes[:, :3])) <= {0.0, 1.0}
        d = graph_to_dict(obs, env.edge_dim)
        assert d["edge_index"].shape == (2, e) and d["edge_attr"].shape == (e, 2)
        assert info["correct_action"] == correct_action(d, 3)
        if t < 20:
            assert env.observation_space.contains(obs)
        obs, _, _, _, info = env.step(0)
    env2 = GraphEnv(poisson_lambda=0.0, tail_prob=0.0)  # always N == 1: no edges
    obs, info = env2.reset(seed=0)
    assert obs.nodes.shape == (1, 16) and obs.edge_links.shape == (0, 2)
    assert info == {"correct_action": 0, "num_nodes": 1, "num_edges": 0}


def test_edge_dim_zero_has_no_edge_features():
    env = GraphEnv(edge_dim=0)
    assert env.observation_space.edge_space is None and env.edge_dim is None
    obs, info = env.reset(seed=3)
    assert obs.edges is None and obs.edge_links.shape == (info["num_edges"], 2)
    assert "edge_attr" not in graph_to_dict(obs, env.edge_dim)


def test_node_count_distribution():
    env = GraphEnv()
    env.reset(seed=1)
    counts = np.array([env.step(0)[4]["num_nodes"] for _ in range(3000)])
    assert 20 <= counts.mean() <= 35
    assert (counts > 100).sum() >= 10
    assert counts.min() >= 1 and counts.max() <= 512


# ----------------------------------------------------------------- rewards and episodes
def _episode(env: GraphEnv, policy, seed: int):
    obs, info = env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        obs, r, term, trunc, info = env.step(policy(graph_to_dict(obs, env.edge_dim), info))
        total, steps = total + r, steps + 1
        if term or trunc:
            return total, steps, term, trunc


def test_reward_and_termination_exact():
    env = GraphEnv(hazard=0.0, max_mistakes=3, max_steps=50)

    def always_wrong(obs, info):
        return (correct_action(obs, 4) + 1) % 4

    assert _episode(env, always_wrong, seed=0) == (0.0, 3, True, False)
    env = GraphEnv(hazard=0.0, max_steps=7)
    assert _episode(env, expert_policy(4), seed=0) == (7.0, 7, False, True)
    env = GraphEnv(hazard=1.0)
    assert _episode(env, expert_policy(4), seed=0) == (1.0, 1, True, False)


def test_expert_beats_random_and_both_endings_occur():
    env = GraphEnv()
    expert = [_episode(env, expert_policy(4), seed=s) for s in range(40)]
    rand = [_episode(env, random_policy(4, np.random.default_rng(7)), seed=s) for s in range(30)]
    expert_mean = np.mean([e[0] for e in expert[:30]])  # 32.9 measured
    random_mean = np.mean([e[0] for e in rand])  # 0.87 measured
    assert expert_mean >= 2 * random_mean and expert_mean > 20
    assert any(e[2] for e in expert) and any(e[3] for e in expert)  # 24 / 16 measured
    assert all(steps == 50 for _, steps, _, trunc in expert if trunc)


def test_bag_of_nodes_cannot_find_the_answer():
    # The most frequent color is all that mean-pooled node features reveal about the answer.
    env = GraphEnv()
    obs, info = env.reset(seed=7)
    agree = 0
    for _ in range(2000):
        agree += int(np.argmax(obs.nodes[:, :4].sum(axis=0))) == info["correct_action"]
        obs, _, _, _, info = env.step(0)
    # Measured 0.256-0.271 over 6 seeds (chance is 0.25); the expert agrees 100%.
    assert agree / 2000 < 0.35


# ----------------------------------------------------------------- policies
def test_policies():
    obs = _graph([0, 1, 1, 2, 2], [(1, 2), (3, 4), (4, 3), (0, 1)], 3)
    assert expert_policy(3)(obs, {}) == 2
    rng = np.random.default_rng(0)
    acts = np.array([random_policy(3, rng)(obs, {}) for _ in range(3000)])
    np.testing.assert_allclose(np.bincount(acts, minlength=3) / 3000, 1 / 3, atol=0.04)
    mixed = make_policy("mixed", 3, 0.3, np.random.default_rng(1))
    rate = np.mean([mixed(obs, {}) == 2 for _ in range(3000)])
    assert abs(rate - (0.7 + 0.3 / 3)) < 0.03  # 0.8 expected
    assert all(epsilon_policy(3, 0.0, rng)(obs, {}) == 2 for _ in range(50))
    assert make_policy("expert", 3, 0.0, rng)(obs, {}) == 2
    assert make_policy("random", 3, 0.0, rng)(obs, {}) in (0, 1, 2)
    with pytest.raises(ValueError, match=r"name must be one of .* \(found 'greedy'\)"):
        make_policy("greedy", 3, 0.1, rng)
    with pytest.raises(ValueError, match=r"epsilon must be in \[0, 1\]"):
        make_policy("mixed", 3, 1.5, rng)


def test_decoy_policy_takes_the_majority_color():
    from offline_graph.env.policies import majority_color

    # colors 0,0,0,1,1: majority 0; the only same-colored edge is 1-1, so the expert says 1
    obs = _graph([0, 0, 0, 1, 1], [(3, 4), (0, 3), (1, 4)], 2)
    assert majority_color(obs, 2) == 0 and expert_policy(2)(obs, {}) == 1
    assert majority_color({"x": np.zeros((0, 4), np.float32)}, 2) == 0
    decoy = make_policy("decoy", 2, 0.6, np.random.default_rng(3))
    rate = np.mean([decoy(obs, {}) == 0 for _ in range(3000)])
    assert abs(rate - 0.6) < 0.03
    a, b = (make_policy("decoy", 2, 0.6, np.random.default_rng(3)) for _ in range(2))
    assert [a(obs, {}) for _ in range(50)] == [b(obs, {}) for _ in range(50)]  # seeded
    with pytest.raises(ValueError, match=r"decoy_policy: epsilon must be in \[0, 1\]"):
        make_policy("decoy", 2, -0.1, np.random.default_rng(0))
