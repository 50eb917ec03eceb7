"""Multi-agent evaluation (offline_graph.rllib.evaluation.ma_evaluation) on a tiny deterministic env.

TinyEnv: agents a_0 (2 steps), a_1 (1 step): Discrete(3), F=2, no edge features; reward
{0: 1, 1: 2, 2: 0 with info illegal_action}. Agent b_0 (3 steps): NodeAction(5) on a 4-node
graph (F=1, D=1) with action_mask [1, 1, 0, 1]; reward 10 * action when legal, else 0.
Expert: a -> 1, b -> 3 (returns 4, 2, 90); random: a -> 2, b -> 2 (all 0).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Discrete, Graph, GraphInstance
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.jobs.recording import episode_seeds
from offline_graph.rllib.evaluation import evaluate as evaluation
from offline_graph.rllib.evaluation.acting import normalized_score
from offline_graph.rllib.evaluation.ma_evaluation import (
    EpisodeRef,
    _mapper,
    evaluate_multi_agent_module,
    evaluate_multi_agent_policy,
)

A_SPACE = Graph(node_space=Box(-1.0, 1.0, (2,), np.float32), edge_space=None)
B_SPACE = Graph(node_space=Box(-1.0, 1.0, (1,), np.float32), edge_space=Box(0.0, 1.0, (1,), np.float32))
LIFE = {"a_0": 2, "a_1": 1, "b_0": 3}
MASK = np.array([1, 1, 0, 1], dtype=np.int8)


class TinyEnv(MultiAgentEnv):
    def __init__(self, **config):
        super().__init__()
        self.possible_agents = list(LIFE)
        self.agents = list(LIFE)
        self.observation_spaces = {"a_0": A_SPACE, "a_1": A_SPACE, "b_0": B_SPACE}
        self.action_spaces = {"a_0": Discrete(3), "a_1": Discrete(3), "b_0": NodeAction(5)}
        self.seeds: list[int | None] = []

    def _obs(self, agent):
        if agent.startswith("a"):
            return GraphInstance(np.zeros((2, 2), np.float32), None, None), {}
        links = np.array([[0, 1], [1, 2], [2, 3]], np.int64)
        return GraphInstance(np.zeros((4, 1), np.float32), np.ones((3, 1), np.float32), links), {
            "action_mask": MASK.copy()
        }

    def reset(self, *, seed=None, options=None):
        self.seeds.append(seed)
        self.t = 0
        self.agents = list(LIFE)
        pairs = {a: self._obs(a) for a in self.agents}
        return {a: p[0] for a, p in pairs.items()}, {a: p[1] for a, p in pairs.items()}

    def step(self, action_dict):
        self.t += 1
        obs, rew, term, trunc, info = {}, {}, {}, {}, {}
        for agent, action in action_dict.items():
            info[agent] = {}
            if agent.startswith("a"):
                rew[agent] = {0: 1.0, 1: 2.0, 2: 0.0}[int(action)]
                info[agent]["illegal_action"] = int(action) == 2
            else:
                legal = 0 <= int(action) < 4 and bool(MASK[int(action)])
                rew[agent] = 10.0 * int(action) if legal else 0.0
            term[agent] = self.t >= LIFE[agent]
            trunc[agent] = False
            if not term[agent]:
                obs[agent], extra = self._obs(agent)
                info[agent].update(extra)
        self.agents = [a for a in self.agents if not term.get(a)]
        term["__all__"] = not self.agents
        trunc["__all__"] = False
        return obs, rew, term, trunc, info

    @staticmethod
    def make_policy(name, epsilon, rng):
        table = {"expert": (1, 3), "random": (2, 2)}[name]
        return lambda agent_id, obs, info: table[0] if agent_id.startswith("a") else table[1]


class Fixed(torch.nn.Module):
    """A scripted module: always ``action``; records its batch sizes."""

    def __init__(self, action, obs_space, action_space):
        super().__init__()
        self.action, self.observation_space, self.action_space = action, obs_space, action_space
        self.calls: list[int] = []

    def forward_inference(self, batch):
        b = int(batch[Columns.OBS]["ptr"].shape[0]) - 1
        self.calls.append(b)
        logits = torch.full((b, 5), -1.0)
        logits[:, self.action] = 1.0
        return {Columns.ACTION_DIST_INPUTS: logits}


def mapping(agent_id, episode=None, **kw):
    return "alpha" if agent_id.startswith("a") else "beta"


def modules(a, b):
    return {"alpha": Fixed(a, A_SPACE, Discrete(3)), "beta": Fixed(b, B_SPACE, NodeAction(5))}


def test_returns_per_agent_and_module_and_seeds():
    env, mods = TinyEnv(), modules(0, 1)
    res = evaluate_multi_agent_module(
        mods, env, episodes=3, seed=5, policy_mapping_fn=mapping, baselines=False
    )
    assert res["episodes"] == 3 and res["seed"] == 5
    assert res["mean_return"] == 2 + 1 + 30
    assert res["per_agent"] == {
        "a_0": {"mean_return": 2.0, "episodes": 3},
        "a_1": {"mean_return": 1.0, "episodes": 3},
        "b_0": {"mean_return": 30.0, "episodes": 3},
    }
    alpha, beta = res["per_module"]["alpha"], res["per_module"]["beta"]
    assert (alpha["mean_return"], alpha["agent_episodes"], alpha["actions"]) == (1.5, 6, 9)
    assert (beta["mean_return"], beta["agent_episodes"], beta["actions"]) == (30.0, 3, 9)
    assert alpha["illegal_actions"] == beta["illegal_actions"] == 0
    assert "normalized" not in alpha
    assert env.seeds == [episode_seeds(5, i)[0] for i in range(3)]
    assert mods["alpha"].calls == [2, 1] * 3  # a_0 and a_1 in one forward pass, then a_0
    assert mods["beta"].calls == [1, 1, 1] * 3


@pytest.mark.parametrize("b_action", [2, 4])  # masked out; >= the graph's 4 nodes
def test_illegal_actions_counted_per_module(b_action):
    res = evaluate_multi_agent_module(
        modules(2, b_action), TinyEnv(), episodes=2, seed=0, policy_mapping_fn=mapping, baselines=False
    )
    alpha, beta = res["per_module"]["alpha"], res["per_module"]["beta"]
    assert (alpha["illegal_actions"], alpha["actions"], alpha["illegal_share"]) == (6, 6, 1.0)  # info flag
    assert (beta["illegal_actions"], beta["actions"], beta["illegal_share"]) == (6, 6, 1.0)
    assert res["mean_return"] == 0.0


def test_baselines_and_normalized_score():
    res = evaluate_multi_agent_module(modules(0, 1), TinyEnv(), episodes=2, seed=1, policy_mapping_fn=mapping)
    alpha, beta = res["per_module"]["alpha"], res["per_module"]["beta"]
    assert (alpha["expert_return"], alpha["random_return"]) == (3.0, 0.0)
    assert (beta["expert_return"], beta["random_return"]) == (90.0, 0.0)
    assert alpha["normalized"] == pytest.approx(100 * 1.5 / 3)
    assert beta["normalized"] == pytest.approx(100 * 30 / 90)
    assert res["baselines"]["expert"]["mean_return"] == 96.0
    assert normalized_score(2.0, 1.0, 5.0) == 25.0
    with pytest.raises(ConfigError, match=r"expert and random returns must differ \(found both 3.0\)"):
        normalized_score(1.0, 3.0, 3.0)


def test_mapping_defaults_and_unmapped_agent_error():
    seen = []

    def spy(agent_id, episode, **kw):
        seen.append((agent_id, episode))
        return mapping(agent_id)

    evaluate_multi_agent_module(modules(0, 1), TinyEnv(), episodes=2, seed=3, policy_mapping_fn=spy)
    assert {(a, e.index) for a, e in seen if isinstance(e, EpisodeRef)} == {
        (a, i) for a in LIFE for i in range(2)
    }
    with pytest.raises(ConfigError, match=r"agent 'a_0' must map to one of the modules \['alpha', 'beta'\]"):
        evaluate_multi_agent_module(modules(0, 1), TinyEnv(), episodes=1, seed=0, baselines=False)
    with pytest.raises(ConfigError, match=r"must return one of the modules .* \(found 'gamma'\)"):
        evaluate_multi_agent_module(
            modules(0, 1), TinyEnv(), episodes=1, seed=0, policy_mapping_fn=lambda a, e: "gamma"
        )
    by_id = {"a_0": Fixed(1, A_SPACE, Discrete(3)), "a_1": Fixed(1, A_SPACE, Discrete(3))}
    by_id["b_0"] = Fixed(3, B_SPACE, NodeAction(5))
    res = evaluate_multi_agent_module(by_id, TinyEnv(), episodes=1, seed=0, baselines=False)
    assert res["mean_return"] == 4 + 2 + 90 and set(res["per_module"]) == set(LIFE)
    assert _mapper(None, ["only"])("b_0", EpisodeRef(0, 0, "e0")) == "only"  # the only module


def test_policies_named_and_callable():
    expert = evaluate_multi_agent_policy("expert", TinyEnv(), episodes=2, seed=0, policy_mapping_fn=mapping)
    assert expert["per_module"]["alpha"]["mean_return"] == 3.0 and expert["mean_return"] == 96.0
    rand = evaluate_multi_agent_policy("random", TinyEnv(), episodes=2, seed=0)
    assert set(rand["per_module"]) == set(LIFE)  # no mapping: one group per agent
    assert rand["per_module"]["b_0"]["illegal_actions"] == 6
    calls = evaluate_multi_agent_policy(lambda a, o, i: 0, TinyEnv(), episodes=1, seed=0)
    assert calls["per_agent"]["b_0"]["mean_return"] == 0.0 and calls["per_agent"]["a_0"]["mean_return"] == 2.0


def test_evaluate_module_and_policy_dispatch():
    direct = evaluate_multi_agent_module(
        modules(0, 1), TinyEnv(), episodes=2, seed=4, policy_mapping_fn=mapping, baselines=False
    )
    for env in (TinyEnv(), "tests.test_ma_evaluation:TinyEnv"):
        res = evaluation.evaluate_module(modules(0, 1), env, episodes=2, seed=4, policy_mapping_fn=mapping)
        assert res == direct
    res = evaluation.evaluate_policy("expert", "tests.test_ma_evaluation:TinyEnv", episodes=2, seed=4)
    assert res["mean_return"] == 96.0 and "per_agent" in res


def test_team_env_with_gnn_modules(tmp_path, capsys):
    import offline_graph.env.team as team
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.cli import evaluate as evaluate_cli
    from offline_graph.rllib.evaluation.evaluate import MODULE_SUBDIR
    from offline_graph.rllib.core.gnn_module import GNNModule

    env = team.TeamEnv()
    torch.manual_seed(0)
    mods = {}
    for mid in ("color", "pick"):
        agent = next(a for a in env.possible_agents if team.team_policy_mapping_fn(a) == mid)
        mods[mid] = RLModuleSpec(
            module_class=GNNModule,
            observation_space=env.get_observation_space(agent),
            action_space=env.get_action_space(agent),
        ).build()
    res = evaluate_multi_agent_module(
        mods, env, episodes=2, seed=0, policy_mapping_fn=team.team_policy_mapping_fn
    )
    for m in res["per_module"].values():
        assert m["actions"] > 0
        if m["expert_return"] != m["random_return"]:
            assert m["normalized"] == pytest.approx(
                100 * (m["mean_return"] - m["random_return"]) / (m["expert_return"] - m["random_return"])
            )
    assert res["mean_return"] == pytest.approx(
        sum(a["mean_return"] * a["episodes"] for a in res["per_agent"].values()) / 2
    )
    expert = evaluate_multi_agent_policy("expert", env, 2, 0, policy_mapping_fn=team.team_policy_mapping_fn)
    assert all(m["illegal_actions"] == 0 for m in expert["per_module"].values())

    for mid, module in mods.items():
        module.save_to_path(str(tmp_path / MODULE_SUBDIR / mid))
    argv = ["--checkpoint", str(tmp_path), "--env", "offline_graph/Team-v0", "--episodes", "2", "--seed", "0"]
    argv += ["--policy-mapping", "offline_graph.env.team:team_policy_mapping_fn"]
    assert evaluate_cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "module color: mean return" in out and "module pick: mean return" in out and "agent " in out
    assert f"{res['per_module']['pick']['mean_return']:.2f}" in out
    assert evaluate_cli.main(["--env", "offline_graph/Team-v0", "--policy", "expert", "--episodes", "2"]) == 0
