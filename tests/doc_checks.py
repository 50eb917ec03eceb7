"""What tests/test_docs.py checks in each page's run (beyond exiting 0): the numbers and files
its blocks print or write, read off :class:`PageRun`."""

from __future__ import annotations

import ast
import math
import pathlib
from typing import Callable

import gymnasium as gym
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


class PageRun:
    def __init__(self, cwd: pathlib.Path, stdout: str, setup: int | None) -> None:
        self.cwd, self.setup = cwd, setup
        self.lines = [ln for ln in stdout.splitlines() if ln.strip()]


def check_first_config(run: PageRun) -> None:
    """Getting started's (and the README's) MARWIL config: a finite loss, every episode read
    used or rejected with a reason."""
    loss = float(run.lines[-2])
    assert math.isfinite(loss) and abs(loss) < 1e6
    report = ast.literal_eval(run.lines[-1])  # the printed data_report dict
    assert report["episodes_read"] == report["episodes_used"] + report["episodes_rejected"]
    assert report["episodes_used"] > 0 and report["rejected_by_reason"] == {}


def check_readme(run: PageRun) -> None:
    """The first config, then the WIS estimate: a weighted mean of the logged returns (within
    their range), the behaviour cloned (sample_data has no action_logp)."""
    check_first_config(PageRun(run.cwd, "\n".join(run.lines[:-1]), run.setup))
    from offline_graph.data.episodes.logged import load_logged
    from offline_graph.data.episodes.reader import spec_from_spaces
    from offline_graph.data.graphs.space_text import graph_space

    words = run.lines[-1].replace("[", " ").replace("]", " ").replace(",", " ").split()
    assert words[0] == "wis" and words[-1] == "bc", run.lines[-1]
    value, low, high = map(float, words[1:4])
    space = spec_from_spaces(graph_space(16, 2), gym.spaces.Discrete(4))
    logged = load_logged(str(ROOT / "sample_data/mixed"), space)
    returns = np.add.reduceat(logged.trans.rewards, logged.ptr[:-1])
    assert returns.min() <= low <= value <= high <= returns.max()


def check_own_data(run: PageRun) -> None:
    # 20 episodes of 5 node features, actions 0..2: the spaces inferred from the data
    assert run.lines[-1] == "graph:F=5 discrete:3"


def check_multi_agent(run: PageRun) -> None:
    """Train on the Team-v0 recording, then write your own multi-agent episodes."""
    from offline_graph.data.episodes.multi_agent import decode_multi_agent, unpack
    import pyarrow.parquet as pq

    losses, space, counts = run.lines[-4:-1]
    assert all(math.isfinite(v) for v in ast.literal_eval(losses).values())
    assert space == "NodeAction(max_nodes=64)"
    by_module = ast.literal_eval(counts)
    # every agent step of the recorded episodes, once per epoch pass: a multiple of the total
    assert set(by_module) == {"color", "pick"} and sum(by_module.values()) % run.setup == 0
    item = pq.read_table(run.cwd / "data" / "my_logs").column("item")[0].as_py()
    agents = {a.agent_id: a for a in decode_multi_agent(unpack(item)).agents}
    assert set(agents) == {"a", 7} and [int(v) for v in agents[7].raw.actions] == [0]
    assert agents["a"].raw.rewards == [1.0]


def check_training(run: PageRun) -> None:
    """BC with RLlib's evaluation (5 episodes), then PPO fine-tuning of its checkpoint."""
    episodes, bc_return = run.lines[0].split()
    # Graph-v0 pays at most 1 per step; an episode is at most 64 steps (expert long-run mean 32.4)
    assert int(episodes) == 5 and 0 <= float(bc_return) <= 64
    assert (run.cwd / "runs" / "bc_expert" / "learner_group").is_dir()
    # PPO's value head is the only part BC's checkpoint lacks
    fresh = ast.literal_eval(run.lines[1])
    assert fresh and all(name.startswith("value") or "vf" in name for name in fresh), fresh
    assert 0 <= float(run.lines[2]) <= 64


def check_multi_agent_cli(run: PageRun) -> None:
    """Team-v0 BC with RLlib's per-module evaluation; Recall-v0 node_gru BC with evaluation."""
    returns = ast.literal_eval(run.lines[0])
    assert set(returns) == {"color", "pick"} and all(math.isfinite(r) for r in returns.values())
    episodes, recall_return = run.lines[1].split()
    assert int(episodes) == 5 and 0 <= float(recall_return) <= 1  # Recall-v0 pays 1 or 0 per episode


def check_graph_level_features(run: PageRun) -> None:
    """Channel-v0: the Dict space's text; BC and IQL with the parts well above BC on the graph
    alone, which can only guess the type asked for (measured: BC 6.8, IQL 5.5, graph only 2.25;
    the expert 8, a third of it 2.7)."""
    assert run.lines[0] == "dict:channel=discrete:3;clock=box:1;graph=graph:F=4,D=1"
    returns = dict(line.split() for line in run.lines[1:4])
    bc, graph_only, iql = (float(returns[k]) for k in ("bc", "bc-graph-only", "iql"))
    assert bc > 5 and iql > 4, returns
    assert min(bc, iql) >= graph_only + 1.5, returns


def check_typed_graphs(run: PageRun) -> None:
    """Dispatch-v0: the spaces' texts; BC on all node types well above BC on the jobs alone,
    which can only rank jobs by value (measured: 7.6 and 3.05; the expert 8, value-only 3.3)."""
    assert run.lines[0] == "typed:job=2,machine=2|job__fits__machine=1,machine__serves__job node:8@job"
    returns = dict(line.split() for line in run.lines[1:3])
    bc, jobs_only = float(returns["bc"]), float(returns["bc-jobs-only"])
    assert bc > 6 and bc >= jobs_only + 2.5, returns


CHECKS: dict[str, Callable[[PageRun], None]] = {
    "docs/guides/typed-graphs.md": check_typed_graphs,
    "docs/guides/graph-level-features.md": check_graph_level_features,
    "README.md": check_readme,
    "docs/getting-started.md": check_readme,
    "docs/guides/data-format.md": check_own_data,
    "docs/guides/multi-agent.md": check_multi_agent,
    "docs/guides/training.md": check_training,
    "docs/guides/multi-agent-cli.md": check_multi_agent_cli,
}
