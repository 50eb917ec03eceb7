"""StitchEnv: phases, rewards per node kind, masks, policies, and the stitching property of the
``"stitch"`` behaviour's logs (checked tabularly on episodes run without Ray)."""

from __future__ import annotations

import importlib
import math
import warnings
from fractions import Fraction
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest
from gymnasium.utils.env_checker import check_env

import offline_graph.env as env_pkg
from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import graph_to_dict
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.env import STITCH_ID, StitchConfig, StitchEnv, stitch_expert
from offline_graph.env.stitch import STITCH_FEATURES, stitch_choices

HUB, DOOR, TRAP, GOAL, BLOCKED = range(5)


def _d(obs: Any, info: dict) -> dict:
    d = graph_to_dict(obs, 1)
    d["action_mask"] = info["action_mask"]
    return d


def _kind(x: np.ndarray, a: int) -> str:
    for col, name in ((DOOR, "door"), (TRAP, "trap"), (GOAL, "goal"), (BLOCKED, "blocked")):
        if x[a, col] > 0.5:
            return name
    return "plain"


def _nodes_of(x: np.ndarray, col: int) -> list[int]:
    return np.flatnonzero(x[:, col] > 0.5).tolist()


def _plain(x: np.ndarray) -> int:
    return int(np.flatnonzero(x[:, DOOR : BLOCKED + 1].sum(1) == 0)[0])


def _episode(env: StitchEnv, policy: Any, seed: int) -> tuple[str, str, list[float], int]:
    """(first phase, first node kind, rewards, steps) of one episode."""
    obs, info = env.reset(seed=seed)
    phase = "hub" if obs.nodes[0, HUB] > 0.5 else "start"
    rewards, first = [], None
    while True:
        a = policy(_d(obs, info), info)
        first = first or _kind(obs.nodes, a)
        obs, r, term, trunc, info = env.step(a)
        rewards.append(r)
        assert not trunc
        if term:
            return phase, first, rewards, len(rewards)


def test_spaces_registration_and_layout() -> None:
    importlib.reload(env_pkg)  # the registration guard must tolerate a second import
    env = gym.make(STITCH_ID, max_nodes=12, noise_features=3)
    assert env.unwrapped.config == StitchConfig(max_nodes=12, noise_features=3)
    assert env.action_space == NodeAction(12)
    assert env.observation_space.node_space.shape == (len(STITCH_FEATURES) + 3,)
    assert env.observation_space.edge_space.shape == (1,)
    raw = StitchEnv()
    counts = []
    for seed in range(300):
        obs, info = raw.reset(seed=seed)
        x, n = obs.nodes, info["num_nodes"]
        counts.append(n)
        assert x.shape == (n, 7) and x.dtype == np.float32 and obs.edges.shape == (info["num_edges"], 1)
        assert np.all(obs.edges == 1.0) and not np.any(obs.edge_links[:, 0] == obs.edge_links[:, 1])
        # Default config: every episode starts at the start phase with 1 door, 2 traps, 2 blocked.
        assert np.all(x[:, HUB] == 0) and x[:, DOOR : BLOCKED + 1].sum(0).tolist() == [1, 2, 0, 2]
        assert np.all(x[:, DOOR : BLOCKED + 1].sum(1) <= 1)  # one kind per node
        np.testing.assert_array_equal(info["action_mask"], x[:, BLOCKED] == 0)
        np.testing.assert_array_equal(stitch_choices(graph_to_dict(obs, 1)), info["action_mask"])
        if seed < 10:
            assert raw.observation_space.contains(obs)
    assert min(counts) == 6 and max(counts) == 20  # uniform in [6, 20]: 300 draws hit both ends


def test_rewards_per_node_kind_and_phase_transition() -> None:
    env = StitchEnv()
    for seed in range(20):
        obs, info = env.reset(seed=seed, options={"phase": "start"})
        x = obs.nodes
        for node, reward in ((_nodes_of(x, TRAP)[0], 0.25), (_nodes_of(x, TRAP)[1], 0.25), (_plain(x), 0.0)):
            env.reset(seed=seed, options={"phase": "start"})
            out = env.step(node)
            assert out[1:4] == (reward, True, False) and out[4]["is_success"] is False
            assert not out[4]["illegal_action"]
        env.reset(seed=seed, options={"phase": "start"})
        hub, r, term, trunc, info = env.step(_nodes_of(x, DOOR)[0])
        assert (r, term, trunc) == (0.0, False, False)
        h = hub.nodes
        assert np.all(h[:, HUB] == 1) and h[:, DOOR : BLOCKED + 1].sum(0).tolist() == [0, 0, 1, 2]
        assert h.shape[0] == info["num_nodes"] and 6 <= h.shape[0] <= 20
        np.testing.assert_array_equal(info["action_mask"], h[:, BLOCKED] == 0)
        out = env.step(_plain(h))
        assert out[1:4] == (0.0, True, False) and out[4]["is_success"] is False
        env.reset(seed=seed, options={"phase": "start"})  # same seed: the same hub again
        np.testing.assert_array_equal(env.step(_nodes_of(x, DOOR)[0])[0].nodes, h)
        out = env.step(_nodes_of(h, GOAL)[0])
        assert out[1:4] == (1.0, True, False) and out[4]["is_success"] is True
        with pytest.raises(RuntimeError, match="reset"):
            env.step(0)


@pytest.mark.parametrize("phase", ["start", "hub"])
def test_illegal_actions_end_the_episode_below_every_legal_return(phase: str) -> None:
    env = StitchEnv(illegal_penalty=0.5)
    obs, info = env.reset(seed=3, options={"phase": phase})
    n = obs.nodes.shape[0]
    for a in (_nodes_of(obs.nodes, BLOCKED)[0], n, 25, -1):
        env.reset(seed=3, options={"phase": phase})
        out = env.step(a)
        assert out[1:4] == (-0.5, True, False) and out[4]["illegal_action"] is True
    env.reset(seed=3)
    with pytest.raises(ConfigError, match=r"action must be an integer index \(found 'x'\)"):
        env.step("x")


def test_hub_start_prob_and_hub_observations_look_alike() -> None:
    env = StitchEnv(hub_start_prob=0.5)
    phases = [env.reset(seed=s)[0].nodes[0, HUB] for s in range(400)]
    assert 160 <= sum(phases) <= 240  # Binomial(400, 0.5): mean 200, sd 10
    # A hub reached through the door and a hub the episode starts in: same columns, same kinds.
    start, _ = env.reset(seed=1, options={"phase": "start"})
    via_door = env.step(_nodes_of(start.nodes, DOOR)[0])[0]
    started, _ = StitchEnv().reset(seed=1, options={"phase": "hub"})
    for h in (via_door.nodes, started.nodes):
        assert np.all(h[:, HUB] == 1) and h[:, DOOR : BLOCKED + 1].sum(0).tolist() == [0, 0, 1, 2]


def test_expert_random_and_mixed_returns() -> None:
    env = StitchEnv()
    expert = env.make_policy("expert", 0.0, np.random.default_rng(0))
    for seed in range(50):
        assert _episode(env, expert, seed)[1:] == ("door", [0.0, 1.0], 2)
    # Random: uniform over the N - 2 allowed nodes, N ~ U{6..20} per graph, so with
    # a = E[1 / (N - 2)] = (1/15) * sum_{k=4}^{18} 1/k: E[return] = 2a * 0.25 + a * a * 1.0.
    a = sum(Fraction(1, k) for k in range(4, 19)) / 15
    exact = float(2 * a * Fraction(1, 4) + a * a)
    assert exact == pytest.approx(0.067666, abs=1e-6)
    n = 4000
    rets = [
        sum(_episode(env, env.make_policy("random", 0.0, np.random.default_rng(s)), s)[2]) for s in range(n)
    ]
    # Returns lie in {0, 0.25, 1}: sd <= 0.15 here, so 4 standard errors are < 0.0095.
    se = float(np.std(rets)) / math.sqrt(n)
    assert se < 0.0024 and abs(np.mean(rets) - exact) < 4 * se
    never_random = env.make_policy("mixed", 0.0, np.random.default_rng(0))
    assert [_episode(env, never_random, s)[2] for s in range(5)] == [[0.0, 1.0]] * 5


def test_stitch_behaviour_door_frequency_and_hub_play() -> None:
    env = StitchEnv()
    first = [
        _episode(env, env.make_policy("stitch", 0.15, np.random.default_rng(10_000 + s)), s)[1]
        for s in range(2000)
    ]
    door = first.count("door") / 2000
    # Binomial(2000, 0.15): sd 0.008; the rest are traps, never plain or blocked nodes.
    assert abs(door - 0.15) < 0.032 and first.count("trap") == 2000 - first.count("door")
    obs, info = StitchEnv().reset(seed=2, options={"phase": "hub"})
    goal = _nodes_of(obs.nodes, GOAL)[0]
    fresh = [
        env.make_policy("stitch", 0.15, np.random.default_rng(s))(_d(obs, info), info) for s in range(20)
    ]
    assert fresh == [goal] * 20  # an episode that starts at the hub: the goal
    with pytest.raises(ConfigError, match=r"epsilon must be in \[0, 1\] \(found 1.5\)"):
        env.make_policy("stitch", 1.5, np.random.default_rng(0))
    with pytest.raises(ConfigError, match=r"name must be one of \['expert', 'random', 'mixed', 'stitch'\]"):
        env.make_policy("decoy", 0.1, np.random.default_rng(0))


def test_stitching_property_of_the_behaviour_logs() -> None:
    """Tabular returns of 2000 "stitch" episodes with half of them starting at the hub.

    Measured (seeds 0..1999, policy seeds 1e6 + i): 1007 hub starts, all goal, return 1.0;
    853 trap-first episodes, return 0.25; 140 door-first episodes, mean return 0.107
    (expected E[1 / allowed hub nodes] = 0.111): the door's own episodes look worse than a
    trap, the hub it leads to is worth 1.0 in the other episodes.
    """
    env = StitchEnv(hub_start_prob=0.5)
    groups: dict[tuple[str, str], list[float]] = {}
    for i in range(2000):
        phase, kind, rewards, _ = _episode(
            env, env.make_policy("stitch", 0.15, np.random.default_rng(10**6 + i)), i
        )
        groups.setdefault((phase, kind), []).append(sum(rewards))
    assert set(groups) == {("hub", "goal"), ("start", "trap"), ("start", "door")}
    sizes = {k: len(v) for k, v in groups.items()}
    assert sizes == {("hub", "goal"): 1007, ("start", "trap"): 853, ("start", "door"): 140}
    means = {k: float(np.mean(v)) for k, v in groups.items()}
    assert means[("hub", "goal")] == 1.0 and means[("start", "trap")] == 0.25
    assert means[("start", "door")] == pytest.approx(15 / 140)  # 15 of 140 found the goal
    assert means[("start", "door")] < 0.25 < 0.9 * means[("hub", "goal")]  # stitched: door wins


def test_determinism_and_check_env() -> None:
    def rollout(seed: int) -> list:
        env = StitchEnv(hub_start_prob=0.3)
        out = []
        for i in range(30):
            pol = env.make_policy("random", 0.0, np.random.default_rng(i))
            obs, info = env.reset(seed=seed if i == 0 else None)
            out.append(obs)
            term = False
            while not term:
                obs, r, term, _, info = env.step(pol(_d(obs, info), info))
                out += [obs, r]
        return out

    a, b, c = rollout(7), rollout(7), rollout(8)
    assert len(a) == len(b)
    for oa, ob in zip(a, b, strict=True):
        if isinstance(oa, float):
            assert oa == ob
        else:
            for f in ("nodes", "edges", "edge_links"):
                np.testing.assert_array_equal(getattr(oa, f), getattr(ob, f))
    assert a[0].nodes.shape != c[0].nodes.shape or not np.array_equal(a[0].nodes, c[0].nodes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(gym.make(STITCH_ID).unwrapped)
        check_env(gym.make(STITCH_ID, hub_start_prob=1.0).unwrapped)


def test_config_and_options_validation_messages() -> None:
    with pytest.raises(
        ConfigError, match=r"StitchConfig: min_nodes must be >= num_traps \+ num_blocked \+ 2 = 7"
    ):
        StitchConfig(num_traps=3)
    with pytest.raises(ConfigError, match=r"trap_reward must be in \(0, goal_reward=1.0\) \(found 1.0\)"):
        StitchConfig(trap_reward=1.0)
    with pytest.raises(ConfigError, match=r"hub_start_prob must be in \[0, 1\] \(found -0.1\)"):
        StitchEnv(hub_start_prob=-0.1)
    with pytest.raises(ConfigError, match=r"max_nodes must be >= min_nodes=6 \(found 5\)"):
        StitchConfig(max_nodes=5)
    with pytest.raises(ConfigError, match=r"illegal_penalty must be > 0"):
        StitchConfig(illegal_penalty=0.0)
    with pytest.raises(
        ConfigError, match=r"options must be \{'phase': 'start' \| 'hub'\} \(found \{'phase': 'x'\}"
    ):
        StitchEnv().reset(options={"phase": "x"})
    with pytest.raises(ConfigError, match=r"x\[:, 1\] \(is_door\) must mark exactly one node \(found 0\)"):
        stitch_expert({"x": np.zeros((3, 7), np.float32)})


def test_recorder_and_cli_record_stitch_logs(tmp_path: Any) -> None:
    from offline_graph.cli import record as record_cli
    from offline_graph.data.episodes.codec import decode_state
    from offline_graph.jobs.recording import plan_jobs, record

    argv = ["--env", STITCH_ID, "--policy", "stitch", "--epsilon", "0.15", "--output", str(tmp_path / "o")]
    cfg = record_cli.parse_args([*argv, "--env-config", '{"hub_start_prob": 0.5}'])
    assert (cfg.policy, cfg.env_config) == ("stitch", {"hub_start_prob": 0.5})
    jobs = plan_jobs(
        env=STITCH_ID,
        env_config={"hub_start_prob": 0.5},
        policy="stitch",
        epsilon=0.15,
        seed=3,
        episodes=40,
        episodes_per_file=40,
        output=str(tmp_path / "out"),
    )
    (summary,) = list(record(jobs, workers=1, show_progress=False))
    kinds = set()
    for item, ret in zip(
        pq.read_table(summary["file"]).column("item").to_pylist(), summary["returns"], strict=True
    ):
        ep = decode_state(item)
        x0, a0 = ep.observations[0]["x"], int(ep.actions[0])
        kind = ("hub " if x0[0, HUB] else "start ") + _kind(x0, a0)
        kinds.add(kind)
        assert ep.terminated and len(ep.observations) == len(ep.actions) + 1
        np.testing.assert_array_equal(ep.observations[0]["action_mask"], x0[:, BLOCKED] == 0)
        assert ret == {"hub goal": 1.0, "start trap": 0.25}.get(kind, ret)
        assert len(ep.actions) == (2 if kind == "start door" else 1)
    assert kinds == {"hub goal", "start trap", "start door"}
