"""TeamEnv: the multi-agent env (color and pick agents), its experts, policies and RLlib conventions."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import graph_to_dict
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.env.team import TeamConfig, TeamEnv
from offline_graph.env.team_policies import (
    pick_correct_action,
    pick_decoy_action,
    team_expert,
    team_policy_mapping_fn,
)


def run_episode(env: TeamEnv, policy: Any, seed: int) -> dict[str, Any]:
    """One episode; per agent: return, steps, step of the first obs, env step it ended, how."""
    obs, infos = env.reset(seed=seed)
    out: dict[str, Any] = {a: {"ret": 0.0, "steps": 0, "joined": 0, "ended": None, "illegal": 0} for a in obs}
    t = 0
    while True:
        acting = {a: o for a, o in obs.items() if out[a]["ended"] is None}
        actions = {a: policy(a, graph_to_dict(o, env.edge_dim_of(a)), infos[a]) for a, o in acting.items()}
        obs, rew, term, trunc, infos = env.step(actions)
        t += 1
        assert set(rew) == set(actions), "a reward for exactly the agents that acted"
        for a in obs:
            out.setdefault(a, {"ret": 0.0, "steps": 0, "joined": t, "ended": None, "illegal": 0})
        for a, r in rew.items():
            out[a]["ret"] += r
            out[a]["steps"] += 1
            out[a]["illegal"] += bool(infos[a]["illegal_action"])
            assert isinstance(term[a], bool) and isinstance(trunc[a], bool)
            assert not (term[a] and trunc[a])
            if term[a] or trunc[a]:
                out[a]["ended"] = (t, "terminated" if term[a] else "truncated")
        alive = [a for a, v in out.items() if v["ended"] is None]
        if term["__all__"] or trunc["__all__"]:
            assert not alive and not (term["__all__"] and trunc["__all__"])
            assert term["__all__"] == all(v["ended"][1] == "terminated" for v in out.values())
            return out
        assert alive and set(alive) <= set(obs)


def test_pick_correct_action_on_a_hand_built_graph() -> None:
    # 0-1, 0-2, 0-3, 3-4, 3-5 (both directions, one duplicate): degrees 3, 1, 1, 3, 1, 1.
    pairs = [(0, 1), (0, 2), (0, 3), (3, 4), (3, 5), (1, 0)]
    src, dst = [u for u, _ in pairs], [v for _, v in pairs]
    ei = np.array([src + dst, dst + src])
    obs = {"x": np.array([[5.0], [9.0], [0.0], [0.0], [0.0], [1.0]], np.float32), "edge_index": ei}
    assert pick_correct_action(obs) == 0  # tie 0 / 3 goes to the lowest index
    assert pick_correct_action(obs, np.array([0, 1, 1, 1, 1, 0], bool)) == 3
    assert pick_correct_action(obs, np.array([0, 1, 1, 0, 1, 0], bool)) == 1
    assert pick_decoy_action(obs, np.array([1, 1, 0, 0, 0, 0], bool)) == 1  # largest x[:, 0]
    assert team_expert("pick_0", obs, {"action_mask": np.array([0, 0, 1, 1, 0, 1], bool)}) == 3
    with pytest.raises(ConfigError, match="pick_correct_action: mask must be bool"):
        pick_correct_action(obs, np.zeros(6, bool))


def test_spaces_differ_per_kind_and_ids() -> None:
    env = TeamEnv(max_color=3, max_pick=2, pick_max_nodes=40)
    assert env.possible_agents == ["color_0", "color_1", "color_2", "pick_0", "pick_1"]
    assert set(env.observation_spaces) == set(env.action_spaces) == set(env.possible_agents)
    color_obs, pick_obs = env.observation_spaces["color_0"], env.observation_spaces["pick_0"]
    assert isinstance(color_obs, gym.spaces.Graph) and isinstance(pick_obs, gym.spaces.Graph)
    assert color_obs.node_space.shape == (8,) and color_obs.edge_space.shape == (2,)
    assert pick_obs.node_space.shape == (3,) and pick_obs.edge_space.shape == (1,)
    assert env.action_spaces["color_2"] == gym.spaces.Discrete(4)
    assert env.action_spaces["pick_1"] == NodeAction(40) and env.get_action_space("pick_0") == NodeAction(40)
    assert [TeamEnv.module_of(a) for a in env.possible_agents] == ["color"] * 3 + ["pick"] * 2
    assert team_policy_mapping_fn("pick_1", episode=None, worker=None) == "pick"
    with pytest.raises(ConfigError, match="agent_id must be '<kind>_<index>'"):
        TeamEnv.module_of("agent_0")


def test_config_dict_overrides_errors_and_registration() -> None:
    assert TeamEnv({"max_pick": 3}, max_steps=4).config == TeamConfig(max_pick=3, max_steps=4)
    with pytest.raises(ConfigError, match=r"TeamConfig: max_color must be >= 1 \(found 0\)"):
        TeamEnv(max_color=0)
    with pytest.raises(ConfigError, match="config keys must be TeamConfig fields"):
        TeamEnv({"num_agents": 2})
    env = gym.make("offline_graph/Team-v0", config={"max_color": 1}).unwrapped
    assert isinstance(env, TeamEnv) and env.possible_agents == ["color_0", "pick_0", "pick_1"]


def test_import_offline_graph_env_stays_light() -> None:
    code = (
        "import sys, offline_graph.env as e; print('ray' in sys.modules); "
        "e.TeamEnv; print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_agent_counts_vary_within_bounds_and_reset_is_deterministic() -> None:
    env = TeamEnv(max_color=3, max_pick=2)
    counts = set()
    for seed in range(40):
        obs, infos = env.reset(seed=seed)
        color = [a for a in obs if a.startswith("color_")]
        pick = [a for a in obs if a.startswith("pick_")]
        assert 1 <= len(color) <= 3 and 1 <= len(pick) <= 2 and env.agents == list(obs)
        assert color == [f"color_{i}" for i in range(len(color))]
        counts.add((len(color), len(pick)))
        for a, o in obs.items():
            assert env.observation_spaces[a].contains(o)
            assert infos[a]["num_nodes"] == o.nodes.shape[0]
            assert infos[a]["num_edges"] == o.edge_links.shape[0]
            assert infos[a]["illegal_action"] is False
            if a.startswith("pick_"):
                mask = infos[a]["action_mask"]
                assert mask.dtype == bool and mask.shape == (o.nodes.shape[0],) and mask.sum() >= 2
    assert len({c for c, _ in counts}) == 3 and len({p for _, p in counts}) == 2
    a, b = TeamEnv(), TeamEnv()
    for (oa, _), (ob, _) in zip((a.reset(seed=7), a.reset(seed=7)), (b.reset(seed=7), b.reset(seed=7))):
        assert list(oa) == list(ob)
        for k in oa:
            np.testing.assert_array_equal(oa[k].nodes, ob[k].nodes)
            np.testing.assert_array_equal(oa[k].edge_links, ob[k].edge_links)


def test_expert_is_always_right_and_agents_join_and_finish_at_different_times() -> None:
    env = TeamEnv()
    late, staggered = 0, 0
    for seed in range(12):
        out = run_episode(env, team_expert, seed)
        for a, v in out.items():
            assert v["ret"] == v["steps"] == 10 and v["ended"][1] == "truncated", (seed, a, v)
        late += any(v["joined"] > 0 for v in out.values())
        staggered += len({v["ended"][0] for v in out.values()}) > 1
    assert late and staggered


def test_random_policy_only_picks_allowed_candidates() -> None:
    env = TeamEnv()
    policy = TeamEnv.make_policy("random", 0.6, np.random.default_rng(0))
    obs, infos = env.reset(seed=3)
    seen: set[int] = set()
    for _ in range(200):
        for a, o in obs.items():
            act = policy(a, graph_to_dict(o, env.edge_dim_of(a)), infos[a])
            if a.startswith("pick_"):
                assert infos[a]["action_mask"][act]
            else:
                seen.add(act)
    assert seen == {0, 1, 2, 3}
    ends = [v["ended"] for s in range(10) for v in run_episode(env, policy, s).values()]
    assert any(e[1] == "terminated" for e in ends)


def test_mixed_decoy_policy_is_right_less_often_than_expert() -> None:
    env = TeamEnv()
    rng = np.random.default_rng(1)
    means = {}
    for name in ("expert", "mixed", "random"):
        policy = TeamEnv.make_policy(name, 0.6, rng)
        rets: dict[str, list[float]] = {"color": [], "pick": []}
        for seed in range(30):
            for a, v in run_episode(env, policy, seed).items():
                rets[TeamEnv.module_of(a)].append(v["ret"])
        means[name] = {k: float(np.mean(v)) for k, v in rets.items()}
    for kind in ("color", "pick"):
        assert means["expert"][kind] == 10.0
        assert means["random"][kind] < means["mixed"][kind] < 0.7 * means["expert"][kind], means
    with pytest.raises(ConfigError, match="TeamEnv.make_policy: name must be one of"):
        TeamEnv.make_policy("greedy", 0.6, rng)
    with pytest.raises(ConfigError, match="epsilon must be in"):
        TeamEnv.make_policy("mixed", 1.5, rng)


def test_illegal_actions_and_step_errors() -> None:
    env = TeamEnv(max_color=1, max_pick=1)
    obs, infos = env.reset(seed=0)
    mask = infos["pick_0"]["action_mask"]
    bad = int(np.flatnonzero(~mask)[0]) if (~mask).any() else 63
    obs, rew, term, trunc, infos = env.step({"color_0": 7, "pick_0": bad})
    assert rew == {"color_0": 0.0, "pick_0": 0.0}
    assert infos["color_0"]["illegal_action"] and infos["pick_0"]["illegal_action"]
    assert term == {"color_0": False, "pick_0": False, "__all__": False}
    with pytest.raises(ConfigError, match="action_dict keys must be the agents that got an observation"):
        env.step({"color_0": 0})
    for _ in range(2):
        obs, rew, term, trunc, infos = env.step({"color_0": 9, "pick_0": 99})
    assert term == {"color_0": True, "pick_0": True, "__all__": True} and trunc["__all__"] is False
    with pytest.raises(RuntimeError, match="reset"):
        env.step({})


def test_rllib_conformance() -> None:
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    env = TeamEnv()
    check_multiagent_environments(env)
    expert = TeamEnv.make_policy("expert", 0.0)
    for seed in range(4):  # RLlib's episode accepts late joiners and staggered ends
        ep = MultiAgentEpisode(
            observation_space=env.observation_spaces,
            action_space=env.action_spaces,
            agent_to_module_mapping_fn=team_policy_mapping_fn,
        )
        obs, infos = env.reset(seed=seed)
        ep.add_env_reset(observations=obs, infos=infos)
        done: set[str] = set()
        while not ep.is_done:
            live = {a: o for a, o in obs.items() if a not in done}
            acts = {a: expert(a, graph_to_dict(o, env.edge_dim_of(a)), infos[a]) for a, o in live.items()}
            obs, rew, term, trunc, infos = env.step(acts)
            done |= {a for a in rew if term[a] or trunc[a]}
            ep.add_env_step(obs, acts, rew, infos, terminateds=term, truncateds=trunc)
        assert ep.get_return() == 10.0 * len(ep.agent_episodes)
