"""`offline-graph record` of RLlib MultiAgentEnvs (TeamEnv, a PettingZoo parallel env):
rows checked per agent against a hand re-run of the env, metadata, determinism, Ray parity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq

import offline_graph
from offline_graph.data.store.format import read_file_metadata
from offline_graph.data.graphs.graph import graph_to_dict
from offline_graph.data.episodes.multi_agent import decode_multi_agent, unpack
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.env.team import TeamEnv, team_expert
from offline_graph.jobs.recording import RecordJob, episode_seeds, record_file
from offline_graph.cli import record as record_cli

TEAM = "offline_graph/Team-v0"


def rows(path: Path | str) -> list[bytes]:
    return [r.as_py() for r in pq.read_table(str(path)).column("item")]


def files_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.parquet"))}


def rec(out: Path, *extra: str) -> int:
    return record_cli.main(["--output", str(out), "--no-progress", *extra])


def by_hand(seed: int, index: int) -> dict[str, dict[str, list]]:
    """TeamEnv episode ``index`` of run ``seed`` with the expert, re-run here: per agent its
    observations (dicts), masks (None for color agents), actions and rewards."""
    env = TeamEnv()
    obs, infos = env.reset(seed=episode_seeds(seed, index)[0])
    out: dict[str, dict[str, list]] = {}

    def see(o: dict, i: dict) -> dict:
        cur = {}
        for aid, g in o.items():
            d = graph_to_dict(g, TeamEnv.edge_dim_of(aid))
            a = out.setdefault(aid, {"obs": [], "masks": [], "actions": [], "rewards": []})
            a["obs"].append(d)
            a["masks"].append(
                None if "action_mask" not in (i.get(aid) or {}) else np.asarray(i[aid]["action_mask"], bool)
            )
            cur[aid] = d
        return cur

    current = see(obs, infos)
    while True:
        acts = {aid: team_expert(aid, d, infos.get(aid) or {}) for aid, d in current.items()}
        obs, rew, term, trunc, infos = env.step(acts)
        for aid, a in acts.items():
            out[aid]["actions"].append(a)
        for aid, r in rew.items():
            out[aid]["rewards"].append(r)
        nxt = see(obs, infos)
        if term.get("__all__") or trunc.get("__all__"):
            return out
        current = {a: d for a, d in nxt.items() if not (term.get(a) or trunc.get(a))}


def test_team_expert_rows_match_env_by_hand(tmp_path):
    out = tmp_path / "episodes-0000000-0000002.parquet"
    summary = record_file(RecordJob(TEAM, {}, "expert", 0.3, 7, 0, 3, str(out)))
    assert summary["episodes"] == 3 and summary["file"] == str(out)
    items = rows(out)
    assert len(items) == 3
    steps: dict[str, int] = {}
    for i, item in enumerate(items):
        ep = decode_multi_agent(unpack(item))
        assert ep.id == f"s7-e{i:07d}" and (ep.terminated or ep.truncated)
        want = by_hand(7, i)
        assert [a.agent_id for a in ep.agents] == list(want)  # the agents of this episode, in order
        for a in ep.agents:
            w, raw = want[a.agent_id], a.raw
            actions = [int(x) for x in raw.actions]
            assert len(raw.observations) == len(actions) + 1 == len(w["obs"])
            assert actions == w["actions"] and len(actions) >= 1
            assert [float(r) for r in raw.rewards] == [1.0] * len(actions)  # the expert is always right
            assert np.all(np.diff(a.env_t) > 0) and len(a.env_t) == len(raw.observations)
            assert a.module_id == a.agent_id.rpartition("_")[0]  # TeamEnv.module_of
            for got, exp, mask in zip(raw.observations, w["obs"], w["masks"]):
                np.testing.assert_array_equal(got["x"], exp["x"])
                np.testing.assert_array_equal(got["edge_index"], exp["edge_index"])
                assert got["edge_attr"].shape[1] == TeamEnv.edge_dim_of(a.agent_id)
                if a.agent_id.startswith("pick"):
                    assert mask is not None and got["action_mask"].dtype == bool
                    np.testing.assert_array_equal(got["action_mask"], mask)
                else:
                    assert mask is None and "action_mask" not in got
            steps[a.agent_id] = steps.get(a.agent_id, 0) + len(actions)
        # RLlib rebuilds the episode with the recorded actions per agent
        rebuilt = offline_graph.to_multi_agent_episode(item)
        assert sorted(rebuilt.agent_episodes) == sorted(want)
        for aid, sa in rebuilt.agent_episodes.items():
            assert [int(x) for x in sa.get_actions()] == want[aid]["actions"]
    assert summary["agent_transitions"] == dict(sorted(steps.items()))
    assert summary["transitions"] == sum(steps.values())
    assert {aid: sum(r) for aid, r in summary["agent_returns"].items()} == {
        a: float(n) for a, n in steps.items()
    }
    meta = read_file_metadata(str(out))
    assert meta["multi_agent"] is True and meta["env"] == TEAM and meta["policy"] == "expert"
    assert meta["seed"] == 7 and meta["mask_key"] == "action_mask"
    assert meta["agent_spaces"] == {
        "color_0": {"observation_space": "graph:F=8,D=2", "action_space": "discrete:4"},
        "color_1": {"observation_space": "graph:F=8,D=2", "action_space": "discrete:4"},
        "pick_0": {"observation_space": "graph:F=3,D=1", "action_space": "node:64"},
        "pick_1": {"observation_space": "graph:F=3,D=1", "action_space": "node:64"},
    }


CALLS: list[tuple[Any, dict, dict]] = []


def spy_policy(agent_id: Any, obs: dict, info: dict) -> int:
    """A user policy (module:function): the expert, remembering its arguments."""
    CALLS.append((agent_id, obs, info))
    return team_expert(agent_id, obs, info)


def test_user_policy_called_with_agent_obs_info(tmp_path):
    CALLS.clear()
    out = tmp_path / "f.parquet"
    summary = record_file(
        RecordJob(TEAM, {"max_pick": 1}, "tests.test_ma_record:spy_policy", 0.3, 1, 0, 2, str(out))
    )
    assert len(CALLS) == summary["transitions"] > 0
    assert {c[0] for c in CALLS} <= {"color_0", "color_1", "pick_0"}
    for aid, obs, info in CALLS:
        assert isinstance(obs["x"], np.ndarray) and isinstance(info, dict)
        if aid == "pick_0":  # the pick agent's mask: in info and in the observation dict
            np.testing.assert_array_equal(obs["action_mask"], np.asarray(info["action_mask"], bool))
    assert read_file_metadata(str(out))["env_config"] == {"max_pick": 1}


def test_cli_same_seed_same_bytes_and_ray_parity(ray_session, tmp_path, capsys):
    args = ("--env", TEAM, "--policy", "mixed", "--epsilon", "0.6", "--episodes", "4", "--seed", "3",
            "--episodes-per-file", "2")  # fmt: skip
    assert rec(tmp_path / "a", *args) == 0
    text = capsys.readouterr().out
    assert "episodes     4\n" in text and "files        2\n" in text and "  pick_0 " in text
    assert rec(tmp_path / "b", *args) == 0
    a = files_bytes(tmp_path / "a")
    assert sorted(a) == ["episodes-0000000-0000001.parquet", "episodes-0000002-0000003.parquet"]
    assert a == files_bytes(tmp_path / "b")
    assert rec(tmp_path / "c", *args[:-4], "--seed", "4", "--episodes-per-file", "2") == 0
    assert files_bytes(tmp_path / "c") != a
    assert rec(tmp_path / "two", *args, "--workers", "2") == 0  # on the running Ray (ray_session)
    assert files_bytes(tmp_path / "two") == a


def test_single_agent_record_unchanged(tmp_path):
    out = tmp_path / "s.parquet"
    summary = record_file(RecordJob("offline_graph/Graph-v0", {}, "expert", 0.3, 0, 0, 2, str(out)))
    assert "agent_transitions" not in summary and summary["episodes"] == 2
    assert "multi_agent" not in read_file_metadata(str(out))


# --------------------------------------------------------------------------- PettingZoo
def make_tiny() -> Any:
    """A 2-agent PettingZoo parallel env with Graph observations, wrapped for RLlib:
    ``a`` (Discrete(2), 3 steps, truncated) and ``b`` (NodeAction(4) with a mask in info,
    terminated after 2 steps)."""
    from pettingzoo import ParallelEnv
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    class Tiny(ParallelEnv):
        metadata = {"name": "tiny_v0"}  # noqa: RUF012

        def __init__(self) -> None:
            self.possible_agents = ["a", "b"]
            self.agents = list(self.possible_agents)
            self.t = 0
            self.rng = np.random.default_rng(0)

        def observation_space(self, agent: str) -> gym.Space:
            return gym.spaces.Graph(node_space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32), edge_space=None)

        def action_space(self, agent: str) -> gym.Space:
            return gym.spaces.Discrete(2) if agent == "a" else NodeAction(4)

        def _obs(self) -> tuple[dict, dict]:
            obs, infos = {}, {}
            for agent in self.agents:
                n = 3
                obs[agent] = gym.spaces.GraphInstance(
                    self.rng.uniform(-1, 1, (n, 2)).astype(np.float32), None, np.array([[0, 1]])
                )
                infos[agent] = {"action_mask": np.array([True, False, True])} if agent == "b" else {}
            return obs, infos

        def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
            self.rng = np.random.default_rng(seed)
            self.agents = list(self.possible_agents)
            self.t = 0
            return self._obs()

        def step(self, actions: dict) -> tuple:
            self.t += 1
            obs, infos = self._obs()
            rew = {a: float(actions[a]) for a in self.agents}
            term = {a: a == "b" and self.t >= 2 for a in self.agents}
            trunc = {a: a == "a" and self.t >= 3 for a in self.agents}
            self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
            return obs, rew, term, trunc, infos

    return ParallelPettingZooEnv(Tiny())


def tiny_policy(agent_id: Any, obs: dict, info: dict) -> int:
    return 1 if agent_id == "a" else 2


def test_pettingzoo_parallel_env(tmp_path, capsys):
    import pettingzoo  # noqa: F401  (a dev dependency: the test must not skip)

    out = tmp_path / "pz"
    assert rec(out, "--env", "tests.test_ma_record:make_tiny", "--policy", "tests.test_ma_record:tiny_policy",
               "--episodes", "2") == 0  # fmt: skip
    assert "transitions  10\n" in capsys.readouterr().out  # (3 + 2) agent steps per episode
    (path,) = sorted(out.glob("*.parquet"))
    meta = read_file_metadata(str(path))
    assert meta["multi_agent"] is True and meta["mask_key"] == "action_mask"
    assert meta["agent_spaces"] == {
        "a": {"observation_space": "graph:F=2", "action_space": "discrete:2"},
        "b": {"observation_space": "graph:F=2", "action_space": "node:4"},
    }
    for item in rows(path):
        agents = {a.agent_id: a for a in decode_multi_agent(unpack(item)).agents}
        assert sorted(agents) == ["a", "b"]
        assert [int(x) for x in agents["a"].raw.actions] == [1, 1, 1]
        assert [int(x) for x in agents["b"].raw.actions] == [2, 2]
        assert [float(x) for x in agents["a"].raw.rewards] == [1.0, 1.0, 1.0]
        assert list(agents["a"].env_t) == [0, 1, 2, 3] and list(agents["b"].env_t) == [0, 1, 2]
        assert all("action_mask" not in o for o in agents["a"].raw.observations)
        for o in agents["b"].raw.observations:
            np.testing.assert_array_equal(o["action_mask"], [True, False, True])
