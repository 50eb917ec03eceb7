"""The README's user snippet runs as printed (MARWIL on the shipped mixed episodes)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_snippet() -> str:
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text.split("## Use it from your own RLlib code", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_readme_snippet_runs_as_printed():
    code = readme_snippet()
    assert "offline_graph.configure(config)" in code and "prelearner_class=GraphOfflinePreLearner" in code
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    loss = float(lines[-2])
    assert loss == loss and abs(loss) < 1e6  # a finite policy loss
    report = eval(lines[-1])  # the printed data_report dict
    assert report["episodes_read"] == report["episodes_used"] + report["episodes_rejected"]
    assert report["episodes_used"] > 0 and report["rejected_by_reason"] == {}


def section_snippets(title: str) -> list[str]:
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text.split(title, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.mark.slow
def test_readme_node_action_snippet_runs_as_printed(tmp_path):
    """The NodeAction example, run where its data path exists (recorded here, 20 episodes)."""
    from offline_graph.jobs.recording import plan_jobs, record

    code = section_snippets("## Node- and edge-selection actions (masked)")[0]
    assert "action_space=NodeAction(64)" in code and "to_deterministic()" in code
    jobs = plan_jobs(
        env="offline_graph/NextHop-v0",
        env_config=None,
        policy="expert",
        epsilon=0.0,
        seed=0,
        episodes=20,
        episodes_per_file=20,
        output=str(tmp_path / "data" / "nexthop_expert"),
    )
    list(record(jobs, show_progress=False))
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


class _NetworkxEnv:
    """A third-party style env: the graph is a networkx graph in info["graph"], the mask a
    0/1 list in info["mask"]; the action is a node."""

    def __new__(cls):
        import gymnasium as gym
        import networkx as nx
        import numpy as np

        class Env(gym.Env):
            observation_space = gym.spaces.Box(0, 1, (1,))
            action_space = gym.spaces.Discrete(8)

            def _info(self):
                g = nx.path_graph(self.n)
                for v in g.nodes:
                    g.nodes[v]["feat"] = [float(v), 1.0]
                return {"graph": g, "mask": [int(v != self.t % self.n) for v in g.nodes]}

            def reset(self, seed=None, options=None):
                super().reset(seed=seed)
                self.n, self.t = int(self.np_random.integers(3, 6)), 0
                return np.zeros(1, np.float32), self._info()

            def step(self, action):
                self.t += 1
                return np.zeros(1, np.float32), float(action), self.t >= 3, False, self._info()

        return Env()


def test_readme_wrapper_snippet_wraps_a_networkx_env():
    import numpy as np

    from offline_graph.data.graph import space_sizes
    from offline_graph.jobs.recording import observe

    code = section_snippets("### Wrapping a third-party env")[0]
    scope: dict = {}
    exec(code, scope)
    env = scope["GraphWrapper"](_NetworkxEnv(), max_nodes=8, num_features=2)
    obs, info = env.reset(seed=0)
    d = observe(obs, info, space_sizes(env.observation_space)[1], "action_mask")
    n = d["x"].shape[0]
    assert 3 <= n <= 5 and d["x"][:, 0].tolist() == list(range(n))
    # a path graph stored in both directions: 2 * (n - 1) edges, PyG order [2, E]
    assert d["edge_index"].shape == (2, 2 * (n - 1))
    assert d["action_mask"].dtype == np.bool_ and d["action_mask"].tolist() == [False] + [True] * (n - 1)
    # (gymnasium's Graph.contains rejects any edge when edge_space=None; the nodes are checked)
    assert all(env.observation_space.node_space.contains(row) for row in obs.nodes)


@pytest.mark.slow
def test_readme_multi_agent_snippets_run_as_printed(tmp_path):
    """The "Multi-agent" section: train on a Team-v0 recording, then write your own episodes."""
    from offline_graph.jobs.recording import plan_jobs, record
    from offline_graph.data.multi_agent import decode_multi_agent, unpack
    import pyarrow.parquet as pq

    train_code, write_code = section_snippets("## Multi-agent")
    assert "policy_mapping_fn=team_policy_mapping_fn" in train_code and "write_episodes" in write_code
    jobs = plan_jobs(
        env="offline_graph/Team-v0",
        env_config=None,
        policy="expert",
        epsilon=0.0,
        seed=0,
        episodes=30,
        episodes_per_file=30,
        output=str(tmp_path / "data" / "team_expert"),
    )
    summary = list(record(jobs, show_progress=False))
    steps = sum(s["transitions"] for s in summary)
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", train_code], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses, space, counts = [ln for ln in proc.stdout.splitlines() if ln.strip()][-3:]
    assert all(v == v for v in eval(losses).values()) and space == "NodeAction(max_nodes=64)"
    by_module = eval(counts)
    # every agent step of the 30 episodes, once per epoch pass: a multiple of the recorded total
    assert set(by_module) == {"color", "pick"} and sum(by_module.values()) % steps == 0
    proc = subprocess.run(
        [sys.executable, "-c", write_code], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    item = pq.read_table(tmp_path / "data" / "my_logs").column("item")[0].as_py()
    agents = {a.agent_id: a for a in decode_multi_agent(unpack(item)).agents}
    assert set(agents) == {"a", 7} and [int(v) for v in agents[7].raw.actions] == [0]
    assert agents["a"].raw.rewards == [1.0]
