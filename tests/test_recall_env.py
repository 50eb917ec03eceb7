"""The memory task RecallEnv (offline_graph/Recall-v0): spaces, the cue / flag layout, the
episode length, the expert / random / memoryless returns, recording and determinism."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest

from offline_graph.data.episodes.codec import decode_state
from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import graph_to_dict
from offline_graph.env import RECALL_ID, RecallConfig, RecallEnv, recall_expert

K = 4
F = K + 2 + 2


def rollout(env: RecallEnv, policy: Any, seed: int) -> tuple[list[Any], list[dict], list[float]]:
    """Observations (dict layout, the acted-on ones), infos and rewards of one episode."""
    obs, info = env.reset(seed=seed)
    observations, infos, rewards = [], [], []
    while True:
        o = graph_to_dict(obs, env.edge_dim)
        observations.append(o)
        infos.append(info)
        obs, reward, terminated, truncated, info = env.step(policy(o, info))
        rewards.append(float(reward))
        assert not truncated
        if terminated:
            return observations, infos, rewards


def mean_return(name: str, episodes: int, epsilon: float = 0.0) -> float:
    env = RecallEnv()
    total = 0.0
    for s in range(episodes):
        policy = env.make_policy(name, epsilon, np.random.default_rng([99, s]))
        total += sum(rollout(env, policy, s)[2])
    return total / episodes


def test_spaces_and_registration() -> None:
    env = gym.make(RECALL_ID)
    inner = env.unwrapped
    assert isinstance(inner, RecallEnv)
    space = inner.observation_space
    assert isinstance(space, gym.spaces.Graph)
    assert space.node_space.shape == (F,)
    assert space.edge_space is not None and space.edge_space.shape == (1,)
    assert inner.action_space == gym.spaces.Discrete(K)
    obs, _ = env.reset(seed=0)
    assert space.contains(obs)
    assert np.all(obs.edges == 1.0)
    assert RecallEnv(num_actions=3, noise_features=0).observation_space.node_space.shape == (5,)
    with pytest.raises(ConfigError):
        RecallConfig(min_delay=3, max_delay=2)


def test_nodes_fixed_edges_redrawn() -> None:
    env = RecallEnv()
    for seed in range(20):
        observations, infos, _ = rollout(env, recall_expert(K), seed)
        n = observations[0]["x"].shape[0]
        assert 4 <= n <= 32
        assert all(o["x"].shape == (n, F) for o in observations)
        assert all(i["num_nodes"] == n for i in infos)
        for o, i in zip(observations, infos):
            ei = o["edge_index"]
            assert ei.shape[1] == i["num_edges"]
            assert np.all(ei[0] != ei[1]) and ei.max() < n
            pairs = set(map(tuple, ei.T.tolist()))
            assert all((b, a) in pairs for a, b in pairs)  # both directions
        edge_sets = [set(map(tuple, o["edge_index"].T.tolist())) for o in observations]
        assert any(a != b for a, b in zip(edge_sets, edge_sets[1:]))
        noise = [o["x"][:, K + 2 :] for o in observations]
        assert not np.array_equal(noise[0], noise[1])


def test_cue_only_at_step_0_and_flag_only_at_last_step() -> None:
    env = RecallEnv()
    for seed in range(30):
        observations, infos, _ = rollout(env, recall_expert(K), seed)
        last = len(observations) - 1
        for t, (o, info) in enumerate(zip(observations, infos)):
            x = o["x"]
            if t == 0:
                assert np.all(x[:, :K].sum(axis=1) == 1.0)
                assert len(set(np.argmax(x[:, :K], axis=1).tolist())) == 1  # the same cue on every node
            else:
                assert np.all(x[:, :K] == 0.0)
            assert np.all(x[:, K] == (1.0 if t == last else 0.0))
            assert np.all(x[:, K + 1] == 0.0)
            assert info["cue_step"] == (t == 0) and info["answer_step"] == (t == last)


def test_episode_length_in_delay_range() -> None:
    env = RecallEnv()
    lengths = {len(rollout(env, recall_expert(K), s)[2]) for s in range(200)}
    assert lengths == {3, 4, 5, 6}  # D + 1 for D in [2, 5]
    env = RecallEnv(min_delay=1, max_delay=1)
    assert len(rollout(env, recall_expert(K), 0)[2]) == 2
    _, info = env.reset(seed=0, options={"cue": 2, "delay": 1, "num_nodes": 5})
    assert info["num_nodes"] == 5


def test_expert_random_and_memoryless() -> None:
    env = RecallEnv()
    for s in range(50):
        rewards = rollout(env, env.make_policy("expert", 0.0, np.random.default_rng(s)), s)[2]
        assert sum(rewards) == 1.0 and rewards[-1] == 1.0 and all(r == 0.0 for r in rewards[:-1])
    band = 3 * math.sqrt(0.25 * 0.75 / 200)
    assert abs(mean_return("random", 200) - 0.25) < band
    # The best memoryless policy: the most frequent cue of 200 episodes, always answered.
    cues = [int(np.argmax(rollout(env, recall_expert(K), s)[0][0]["x"][0, :K])) for s in range(200)]
    best = int(np.argmax(np.bincount(cues, minlength=K)))
    score = np.mean([sum(rollout(env, lambda o, i: best, s)[2]) for s in range(200, 400)])
    assert abs(score - 0.25) < band
    # mixed: expert with probability 0.7, else random: 0.7 + 0.3 / 4 = 0.775
    assert abs(mean_return("mixed", 400, 0.3) - 0.775) < 3 * math.sqrt(0.775 * 0.225 / 400)


def test_mixed_keeps_the_cue_after_a_random_first_step() -> None:
    env = RecallEnv(min_delay=2, max_delay=2)
    policy = env.make_policy("mixed", 0.0, np.random.default_rng(0))
    assert sum(rollout(env, policy, 3)[2]) == 1.0
    with pytest.raises(ConfigError):
        env.make_policy("decoy", 0.1, np.random.default_rng(0))


def test_determinism() -> None:
    a, b = RecallEnv(), RecallEnv()
    for seed in (0, 7):
        ra = rollout(a, recall_expert(K), seed)
        rb = rollout(b, recall_expert(K), seed)
        assert len(ra[0]) == len(rb[0])
        for oa, ob in zip(ra[0], rb[0]):
            for key in ("x", "edge_index", "edge_attr"):
                np.testing.assert_array_equal(oa[key], ob[key])
    assert any(
        rollout(a, recall_expert(K), 0)[0][0]["x"].shape != rollout(a, recall_expert(K), s)[0][0]["x"].shape
        for s in range(1, 10)
    )


@pytest.mark.parametrize("policy", ["expert", "random", "mixed"])
def test_recorder(tmp_path: Any, policy: str) -> None:
    from offline_graph.jobs.recording import plan_jobs, record

    jobs = plan_jobs(
        env=RECALL_ID,
        env_config=None,
        policy=policy,
        epsilon=0.3,
        seed=5,
        episodes=6,
        episodes_per_file=6,
        output=str(tmp_path / "out"),
    )
    (summary,) = list(record(jobs, workers=1, show_progress=False))
    if policy == "expert":
        assert summary["returns"] == [1.0] * 6
    items = pq.read_table(summary["file"]).column("item").to_pylist()
    assert len(items) == 6
    for item in items:
        ep = decode_state(item)
        T = len(ep.actions)
        assert 3 <= T <= 6 and len(ep.observations) == T + 1 and ep.terminated
        n = ep.observations[0]["x"].shape[0]
        for o in ep.observations:
            E = o["edge_index"].shape[1]
            assert o["x"].shape == (n, F) and o["edge_attr"].shape == (E, 1)
        if policy == "expert":
            cue = int(np.argmax(ep.observations[0]["x"][0, :K]))
            assert list(ep.actions) == [cue] * T
            assert list(ep.rewards) == [0.0] * (T - 1) + [1.0]
