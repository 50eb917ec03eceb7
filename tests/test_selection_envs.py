"""NextHopEnv / GrowTreeEnv: hand-built graphs, experts against brute force, masks, seeding."""

from __future__ import annotations

import importlib
import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import offline_graph.env as env_pkg
from offline_graph.env import (
    GROW_TREE_ID,
    NEXT_HOP_ID,
    GrowTreeConfig,
    GrowTreeEnv,
    NextHopConfig,
    NextHopEnv,
)
from offline_graph.env.grow_tree import grow_tree_choices, grow_tree_expert
from offline_graph.env.next_hop import next_hop_choices, next_hop_expert
from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import graph_to_dict
from offline_graph.data.graphs.spaces import EdgeAction, NodeAction

R2 = float(np.float32(math.sqrt(0.5)))  # length of a (0.5, 0.5) diagonal, as stored (float32)

# Detour: 0 (0,0) start, 1 (.5,0), 2 (1,0) target, 3 (.5,.5); no edge 1-2.
# Directed edges, sorted: (0,1) (0,3) (1,0) (1,3) (2,3) (3,0) (3,1) (3,2).
DETOUR = {
    "positions": [[0, 0], [0.5, 0], [1, 0], [0.5, 0.5]],
    "edges": [(0, 1), (1, 3), (3, 2), (0, 3)],
    "start": 0,
    "target": 2,
}
# Square with two equally short paths 0-1-3 and 0-2-3.
SQUARE = {
    "positions": [[0, 0], [0.5, 0], [0, 0.5], [0.5, 0.5]],
    "edges": [(0, 1), (0, 2), (1, 3), (2, 3)],
    "start": 0,
    "target": 3,
}
# Tree graph, root 0. Directed edges, sorted, with weights:
# 0:(0,1).5 1:(0,2).9 2:(1,0).5 3:(1,2).2 4:(1,3).1 5:(2,0).9 6:(2,1).2 7:(2,3).4 8:(3,1).1 9:(3,2).4
TREE = {
    "num_nodes": 4,
    "edges": [(0, 1), (1, 2), (0, 2), (2, 3), (1, 3)],
    "weights": [0.5, 0.2, 0.9, 0.4, 0.1],
    "root": 0,
}


def _d(obs):
    return graph_to_dict(obs, 1)


def _episode(env, policy, seed, options=None):
    obs, info = env.reset(seed=seed, options=options)
    total, steps = 0.0, 0
    while True:
        obs, r, term, trunc, info = env.step(policy(_d(obs), info))
        total, steps = total + r, steps + 1
        if term or trunc:
            return total, steps, term, trunc


# ----------------------------------------------------------------- NextHop, hand-built
def test_next_hop_hand_built_detour():
    env = NextHopEnv()
    obs, info = env.reset(options=DETOUR)
    np.testing.assert_array_equal(obs.edge_links[:, 0], [0, 0, 1, 1, 2, 3, 3, 3])
    np.testing.assert_array_equal(obs.edge_links[:, 1], [1, 3, 0, 3, 3, 0, 1, 2])
    np.testing.assert_allclose(obs.edges[:, 0], [0.5, R2, 0.5, 0.5, R2, R2, 0.5, R2])
    np.testing.assert_allclose(obs.nodes[0], [1, 0, 1, 0, 0, 1, 0, 1])
    np.testing.assert_allclose(obs.nodes[2], [0, 1, 0, 1, 0, 0, 0, 0])
    np.testing.assert_allclose(obs.nodes[3], [0, 0, 0, 0.5, 0.5, 0.5, -0.5, R2], rtol=1e-6)
    np.testing.assert_array_equal(info["action_mask"], [False, True, False, True])
    np.testing.assert_array_equal(next_hop_choices(_d(obs)), info["action_mask"])
    # Node 1 is nearer the target (greedy on len + distance-to-target picks it: 0.5 + 0.5), but
    # the shortest path is 0-3-2 (2 * 0.707 < 0.5 + 0.5 + 0.707).
    assert next_hop_expert(_d(obs), info) == 3
    obs, r, term, trunc, info = env.step(3)
    assert r == pytest.approx(-R2) and not term and not trunc and not info["illegal_action"]
    np.testing.assert_array_equal(obs.nodes[:, 2], [1, 0, 0, 1])  # visited
    np.testing.assert_array_equal(obs.nodes[:, 0], [0, 0, 0, 1])  # current
    np.testing.assert_array_equal(info["action_mask"], [True, True, True, False])
    assert next_hop_expert(_d(obs), info) == 2
    obs, r, term, trunc, info = env.step(2)
    assert r == pytest.approx(1.0 - R2) and term and not trunc
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_next_hop_tie_goes_to_lowest_index_and_truncation():
    env = NextHopEnv()
    obs, info = env.reset(options=SQUARE)
    assert next_hop_expert(_d(obs), info) == 1  # via 1 and via 2 both cost exactly 1.0
    env = NextHopEnv(max_steps_per_node=0.5)  # horizon ceil(0.5 * 4) = 2
    env.reset(options=SQUARE)
    assert env.step(1)[1:4] == (-0.5, False, False)
    assert env.step(0)[1:4] == (-0.5, False, True)


@pytest.mark.parametrize("action", [2, 0, 4, 63, 1000, -1])
def test_next_hop_illegal_action(action):
    env = NextHopEnv()
    obs0, _ = env.reset(options=DETOUR)
    obs, r, term, trunc, info = env.step(action)
    # horizon 8 steps left, longest edge R2, illegal_penalty 1.
    assert r == pytest.approx(-(1.0 + 8 * R2)) and term and not trunc and info["illegal_action"]
    np.testing.assert_array_equal(obs.nodes, obs0.nodes)


def test_non_integer_action_is_an_error():
    env = NextHopEnv()
    env.reset(options=DETOUR)
    with pytest.raises(ConfigError, match="action must be an integer index"):
        env.step("left")


# ----------------------------------------------------------------- GrowTree, hand-built
def test_grow_tree_hand_built_prim():
    env = GrowTreeEnv()
    obs, info = env.reset(options=TREE)
    np.testing.assert_allclose(obs.edges[:, 0], [0.5, 0.9, 0.5, 0.2, 0.1, 0.9, 0.2, 0.4, 0.1, 0.4])
    np.testing.assert_array_equal(obs.nodes, [[1, 1], [0, 0], [0, 0], [0, 0]])
    expected = [([0, 1], 0, 0.5), ([1, 3, 4], 4, 0.1), ([1, 3, 9], 3, 0.2)]
    for t, (allowed, choice, weight) in enumerate(expected):
        np.testing.assert_array_equal(np.flatnonzero(info["action_mask"]), allowed)
        np.testing.assert_array_equal(grow_tree_choices(_d(obs)), info["action_mask"])
        assert grow_tree_expert(_d(obs), info) == choice
        obs, r, term, trunc, info = env.step(choice)
        assert r == pytest.approx(-weight) and term == (t == 2) and not trunc
    np.testing.assert_array_equal(obs.nodes[:, 0], [1, 1, 1, 1])
    assert not info["action_mask"].any()


def test_grow_tree_tie_and_illegal_actions():
    env = GrowTreeEnv()
    obs, info = env.reset(options={**TREE, "weights": [0.5, 0.2, 0.5, 0.4, 0.1]})
    assert grow_tree_expert(_d(obs), info) == 0  # edges 0 (0->1) and 1 (0->2) both weigh 0.5
    for action in (3, 10, env.action_space.n + 5, -1):  # 3: 1->2 does not leave the tree
        env.reset(options=TREE)
        obs, r, term, trunc, info = env.step(action)
        assert r == pytest.approx(-(1.0 + 3 * 0.9)) and term and info["illegal_action"]
    env.reset(options=TREE)
    env.step(0)
    _, r, term, _, info = env.step(2)  # 1->0: both ends already in the tree
    assert r == pytest.approx(-(1.0 + 2 * 0.9)) and term and info["illegal_action"]


# ----------------------------------------------------------------- experts vs brute force
def _floyd(d):
    n = d["x"].shape[0]
    dist = np.full((n, n), np.inf)
    np.fill_diagonal(dist, 0.0)
    dist[d["edge_index"][0], d["edge_index"][1]] = d["edge_attr"][:, 0]
    for k in range(n):
        dist = np.minimum(dist, dist[:, k : k + 1] + dist[k : k + 1, :])
    return dist


def _kruskal(d):
    n = d["x"].shape[0]
    parent = list(range(n))

    def find(a):
        while parent[a] != a:
            a = parent[a]
        return a

    total = 0.0
    for j in np.argsort(d["edge_attr"][:, 0], kind="stable"):
        ra, rb = find(int(d["edge_index"][0, j])), find(int(d["edge_index"][1, j]))
        if ra != rb:
            parent[ra] = rb
            total += float(d["edge_attr"][j, 0])
    return total


def test_next_hop_expert_follows_shortest_paths():
    env = NextHopEnv()
    for seed in range(15):
        obs, info = env.reset(seed=seed)
        d = _d(obs)
        dist = _floyd(d)
        target = int(np.argmax(d["x"][:, 1]))
        path = 0.0
        while True:
            cur = int(np.argmax(_d(obs)["x"][:, 0]))
            a = next_hop_expert(_d(obs), info)
            assert info["action_mask"][a]
            np.testing.assert_array_equal(next_hop_choices(_d(obs)), info["action_mask"])
            step_len = float(d["edge_attr"][(d["edge_index"][0] == cur) & (d["edge_index"][1] == a), 0][0])
            assert step_len + dist[a, target] == pytest.approx(dist[cur, target])
            obs, r, term, trunc, info = env.step(a)
            path += step_len
            assert r == pytest.approx(-step_len + (env.config.goal_reward if term else 0.0))
            if term or trunc:
                break
        assert term and path == pytest.approx(dist[int(np.flatnonzero(d["x"][:, 0])[0]), target])


def test_grow_tree_expert_builds_a_minimum_spanning_tree():
    env = GrowTreeEnv()
    for seed in range(15):
        obs, info = env.reset(seed=seed)
        mst = _kruskal(_d(obs))
        total, steps, term, _ = _episode(env, grow_tree_expert, seed)
        assert term and steps == info["num_nodes"] - 1
        assert -total == pytest.approx(mst, rel=1e-5)


# ----------------------------------------------------------------- returns
@pytest.mark.parametrize("env_id", [NEXT_HOP_ID, GROW_TREE_ID])
def test_expert_beats_random_and_illegal_is_worst(env_id):
    env = gym.make(env_id).unwrapped
    expert = env.make_policy("expert", 0.0, np.random.default_rng(0))
    rand = env.make_policy("random", 0.0, np.random.default_rng(1))
    e = np.array([_episode(env, expert, s)[0] for s in range(20)])
    rand_eps = [_episode(env, rand, s) for s in range(20)]
    r = np.array([ep[0] for ep in rand_eps])
    # Same seed, same graph: the expert is never worse than a random episode that finishes
    # (GrowTree: an MST is the lightest spanning tree; NextHop: a shortest path is no longer
    # than any walk that reaches the target). Truncated random walks get no goal reward.
    assert all(e[i] >= r[i] - 1e-6 for i in range(20) if rand_eps[i][2])
    assert env_id == NEXT_HOP_ID or all(ep[2] for ep in rand_eps)
    # The gap is large against the episode-to-episode spread: normalized score well defined.
    spread = math.sqrt((e.var(ddof=1) + r.var(ddof=1)) / 20)
    assert e.mean() - r.mean() > 4 * spread
    # An illegal first action scores below every legal episode on the same graph.
    for s in range(20):
        env.reset(seed=s)
        illegal = env.step(env.action_space.n - 1 + 10)[1]
        assert illegal < min(e[s], r[s])


def test_mixed_policy_and_make_policy_errors():
    env = NextHopEnv()
    obs, info = env.reset(options=DETOUR)
    always_random = env.make_policy("mixed", 1.0, np.random.default_rng(0))
    picks = {always_random(_d(obs), info) for _ in range(50)}
    assert picks == {1, 3}  # both allowed neighbours, nothing else
    assert env.make_policy("mixed", 0.0, np.random.default_rng(0))(_d(obs), info) == 3
    with pytest.raises(ConfigError, match=r"name must be one of \['expert', 'random', 'mixed'\]"):
        env.make_policy("greedy", 0.1, np.random.default_rng(0))
    with pytest.raises(ConfigError, match=r"epsilon must be in \[0, 1\] \(found 2\)"):
        GrowTreeEnv().make_policy("mixed", 2, np.random.default_rng(0))
    # The old module path (in README commands and recorded episode-file metadata) still resolves.
    old = importlib.import_module("offline_graph.env.selection_envs")
    assert old.next_hop_expert is next_hop_expert and old.grow_tree_expert is grow_tree_expert
    assert old.NextHopEnv is NextHopEnv and old.GrowTreeEnv is GrowTreeEnv


# ----------------------------------------------------------------- API, spaces, seeding
@pytest.mark.parametrize("env_id", [NEXT_HOP_ID, GROW_TREE_ID])
def test_check_env_passes_without_warnings(env_id):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(gym.make(env_id).unwrapped)


def test_registration_kwargs_and_spaces():
    importlib.reload(env_pkg)  # the registration guard must tolerate a second import
    env = gym.make(NEXT_HOP_ID, max_nodes=30, goal_reward=2.0)
    assert env.unwrapped.config == NextHopConfig(max_nodes=30, goal_reward=2.0)
    assert env.action_space == NodeAction(30)
    assert env.observation_space.node_space.shape == (8,)
    env = gym.make(GROW_TREE_ID, max_nodes=10, k_neighbors=2)
    assert (
        env.action_space
        == EdgeAction(2 * 3 * 10)
        == EdgeAction(GrowTreeConfig(max_nodes=10, k_neighbors=2).max_edges)
    )
    assert GrowTreeEnv({"min_nodes": 3}, max_nodes=3).config == GrowTreeConfig(min_nodes=3, max_nodes=3)


def test_config_and_options_validation_messages():
    with pytest.raises(ConfigError, match=r"NextHopConfig: min_nodes must be >= 2 \(found 1\)"):
        NextHopEnv(min_nodes=1)
    with pytest.raises(ConfigError, match=r"max_nodes must be >= min_nodes=5 \(found 4\)"):
        GrowTreeConfig(max_nodes=4)
    with pytest.raises(ConfigError, match=r"max_steps_per_node must be > 0 \(found 0\)"):
        NextHopConfig(max_steps_per_node=0)
    with pytest.raises(ConfigError, match=r"unknown \['bogus'\]"):
        GrowTreeEnv(bogus=1)
    with pytest.raises(ConfigError, match="render_mode must be None"):
        NextHopEnv(render_mode="human")
    with pytest.raises(ConfigError, match=r"options\['edges'\] must connect all 4 nodes \(found 2"):
        NextHopEnv().reset(options={**DETOUR, "edges": [(0, 1), (2, 3)]})
    with pytest.raises(ConfigError, match=r"options\['target'\] must differ from start"):
        NextHopEnv().reset(options={**DETOUR, "target": 0})
    with pytest.raises(ConfigError, match=r"options\['positions'\] must be \[N, 2\] in \[0, 1\]"):
        NextHopEnv().reset(options={**DETOUR, "positions": [[0, 0], [2, 0], [1, 0], [0, 1]]})
    with pytest.raises(ConfigError, match=r"options\['weights'\] must be 5 finite values >= 0"):
        GrowTreeEnv().reset(options={**TREE, "weights": [1.0]})
    with pytest.raises(ConfigError, match=r"options\['root'\] must be a node index in \[0, 4\)"):
        GrowTreeEnv().reset(options={**TREE, "root": 4})


@pytest.mark.parametrize("cls", [NextHopEnv, GrowTreeEnv])
def test_same_seed_same_episode_different_seed_differs(cls):
    def rollout(seed):
        env = cls()
        pol = env.make_policy("random", 0.0, np.random.default_rng(5))
        obs, info = env.reset(seed=seed)
        out = [(obs, 0.0, info)]
        for _ in range(200):
            obs, r, term, trunc, info = env.step(pol(_d(obs), info))
            out.append((obs, r, info))
            if term or trunc:
                obs, info = env.reset()  # continues the seeded RNG
                out.append((obs, 0.0, info))
        return out

    a, b, c = rollout(3), rollout(3), rollout(4)
    for (oa, ra, ia), (ob, rb, ib) in zip(a, b, strict=True):
        for f in ("nodes", "edges", "edge_links"):
            np.testing.assert_array_equal(getattr(oa, f), getattr(ob, f))
        np.testing.assert_array_equal(ia["action_mask"], ib["action_mask"])
        assert ra == rb
    assert a[0][0].nodes.shape != c[0][0].nodes.shape or not np.array_equal(a[0][0].nodes, c[0][0].nodes)


@pytest.mark.parametrize("cls", [NextHopEnv, GrowTreeEnv])
def test_generated_graphs(cls):
    env = cls()
    cfg = env.config
    counts, edges = [], []
    for seed in range(400):
        obs, info = env.reset(seed=seed)
        n, e = info["num_nodes"], info["num_edges"]
        counts.append(n)
        edges.append(e)
        links = obs.edge_links
        assert (
            obs.nodes.shape == (n, env.observation_space.node_space.shape[0])
            and obs.nodes.dtype == np.float32
        )
        assert obs.edges.shape == (e, 1) and obs.edges.dtype == np.float32 and links.dtype == np.int64
        # Symmetric, no self-loops, sorted by (source, target), both directions equally long.
        assert not np.any(links[:, 0] == links[:, 1])
        assert np.all(np.diff(links[:, 0] * n + links[:, 1]) > 0)
        rev = {(u, v): w for (u, v), w in zip(links.tolist(), obs.edges[:, 0].tolist())}
        assert all(rev[(v, u)] == w for (u, v), w in rev.items())
        assert e <= (cfg.max_edges if cls is GrowTreeEnv else 2 * (cfg.k_neighbors + 1) * n)
        if seed < 10:
            assert env.observation_space.contains(obs)
    counts_a = np.array(counts)
    assert counts_a.min() >= cfg.min_nodes and counts_a.max() <= cfg.max_nodes
    mean = cfg.min_nodes + cfg.poisson_lambda
    assert mean - 1 <= np.median(counts_a) <= mean + 2  # bulk: min_nodes + Poisson(lambda)
    assert (counts_a >= 2 * mean).sum() >= 5  # the heavy tail
