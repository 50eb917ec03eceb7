"""Multi-agent convert and inspect: exact rows per agent step and hand-counted inspect numbers."""

import json
import os

import gymnasium as gym
import numpy as np
import pandas as pd
import pyarrow.dataset as pads
import pytest
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

import offline_graph
from offline_graph.data.errors import OfflineGraphError
from offline_graph.data.store.format import read_file_metadata
from offline_graph.data.analysis.stats import format_table, inspect_path
from offline_graph.data.episodes.validation import EpisodeSpec
from offline_graph.jobs.conversion import REPORT_NAME
from offline_graph.jobs.convert import ConvertConfig, convert
from offline_graph.jobs.ma_convert import MA_SCHEMA

pytestmark = [pytest.mark.usefixtures("ray_session")]
OBS = {0: offline_graph.graph_space(2), "b": offline_graph.graph_space(3, 1)}
ACT = {0: gym.spaces.Discrete(3), "b": gym.spaces.Discrete(2)}


def o0(n):  # agent 0: F=2, no edge features
    edges = np.array([range(n - 1), range(1, n)], np.int64).reshape(2, -1)
    return {"x": np.full((n, 2), float(n), np.float32), "edge_index": edges}


def ob(n, f=3):  # agent "b": F=3, D=1
    return {
        "x": np.full((n, f), -float(n), np.float32),
        "edge_index": np.array([range(n - 1), range(1, n)], np.int64).reshape(2, -1),
        "edge_attr": np.ones((n - 1, 1), np.float32),
    }


def episodes(bad_width=None):
    """e1: both agents from env step 0, b terminates at env step 2, 0 at env step 3.
    e2: b joins at env step 1; truncated at env step 2."""
    e1 = MultiAgentEpisode(id_="e1")
    e1.add_env_reset(observations={0: o0(1), "b": ob(2)}, infos={0: {}, "b": {}})
    e1.add_env_step(
        observations={0: o0(2), "b": ob(3)},
        actions={0: np.int64(1), "b": np.int64(0)},
        rewards={0: 1.0, "b": 2.0},
    )
    e1.add_env_step(
        observations={0: o0(3), "b": ob(1, bad_width or 3)},
        actions={0: np.int64(2), "b": 1},
        rewards={0: 3.0, "b": 4.0},
        terminateds={"b": True},
    )
    e1.add_env_step(
        observations={0: o0(1)},
        actions={0: 0},
        rewards={0: 5.0},
        terminateds={0: True, "__all__": True},
    )
    e2 = MultiAgentEpisode(id_="e2")
    e2.add_env_reset(observations={0: o0(4)}, infos={0: {}})
    e2.add_env_step(observations={0: o0(5), "b": ob(2)}, actions={0: np.int64(1)}, rewards={0: 1.0})
    e2.add_env_step(
        observations={0: o0(1), "b": ob(4)},
        actions={0: 0, "b": np.int32(1)},
        rewards={0: 0.0, "b": 2.0},
        truncateds={"__all__": True},
    )
    return [e1, e2]


# (eps_id, agent_id, t) -> (env_t, reward, value target with gamma 0.5, nodes)
EXPECTED = {
    ("e1", "0", 0): (0, 1.0, 1 + 0.5 * 3 + 0.25 * 5, 1),
    ("e1", "0", 1): (1, 3.0, 3 + 0.5 * 5, 2),
    ("e1", "0", 2): (2, 5.0, 5.0, 3),
    ("e1", "b", 0): (0, 2.0, 2 + 0.5 * 4, 2),
    ("e1", "b", 1): (1, 4.0, 4.0, 3),
    ("e2", "0", 0): (0, 1.0, 1.0, 4),
    ("e2", "0", 1): (1, 0.0, 0.0, 5),
    ("e2", "b", 0): (1, 2.0, 2.0, 2),
}


@pytest.fixture
def data(tmp_path):
    path = str(tmp_path / "ep")
    offline_graph.write_episodes(path, episodes(), observation_space=OBS, action_space=ACT)
    return path


def test_convert_rows_are_agent_steps_with_hand_computed_values(data, tmp_path):
    out = str(tmp_path / "rows")
    # the single-agent spec is ignored: multi-agent input is converted per agent
    report = convert(ConvertConfig(input=data, output=out, spec=EpisodeSpec(1, None, 1), gamma=0.5))
    assert report["transitions_out"] == len(EXPECTED) == 8
    assert report["multi_agent"] and report["episodes_used"] == 2
    assert report["transitions_by_agent"] == {"0": 5, "b": 3}
    assert {k: (a["transitions"], a["episodes"]) for k, a in report["agents"].items()} == {
        "0": (5, 2),
        "b": (3, 2),
    }
    assert json.load(open(os.path.join(out, REPORT_NAME)))["agents"]["b"]["observation_space"] == (
        "graph:F=3,D=1"
    )
    df = pd.read_parquet(out)  # the whole directory, one schema
    assert len(df) == 8
    for _, r in df.iterrows():
        env_t, reward, vt, nodes = EXPECTED[(r.eps_id, r.agent_id, r.t)]
        assert (r.env_t, r.rewards) == (env_t, reward)
        assert r.value_targets == pytest.approx(vt)
        assert r.agent_id_int == (r.agent_id == "0")
        width = 2 if r.agent_id == "0" else 3
        assert len(r.x) == nodes and all(len(row) == width for row in r.x)
        assert len(r.edge_index) == nodes - 1
        if r.agent_id == "0":
            assert r.edge_attr is None
        else:
            assert [list(a) for a in r.edge_attr] == [[1.0]] * (nodes - 1)
        assert r.node_mask is None and r.edge_mask is None
    ends = df[df.terminateds | df.truncateds]
    assert sorted(zip(ends.eps_id, ends.agent_id, ends.t, ends.terminateds)) == [
        ("e1", "0", 2, True),
        ("e1", "b", 1, True),
        ("e2", "0", 1, False),
        ("e2", "b", 0, False),
    ]
    assert pads.dataset(out).schema.remove_metadata() == MA_SCHEMA
    files = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".parquet")]
    meta = read_file_metadata(files[0])
    assert meta["kind"] == "transitions" and meta["multi_agent"] and meta["gamma"] == 0.5
    assert meta["agent_spaces"] == {
        "0": {"observation_space": "graph:F=2", "action_space": "discrete:3"},
        "b": {"observation_space": "graph:F=3,D=1", "action_space": "discrete:2"},
    }


def test_bad_agent_is_named_or_skipped_and_counted(tmp_path, capsys):
    from offline_graph.cli.convert import main

    path = str(tmp_path / "bad")
    eps = episodes()
    bad = episodes(bad_width=4)[0]
    bad.id_ = "e3"
    offline_graph.write_episodes(path, [eps[0], bad, eps[1]], observation_space=OBS, action_space=ACT)
    with pytest.raises(OfflineGraphError) as err:
        convert(ConvertConfig(input=path, output=str(tmp_path / "r1"), spec=EpisodeSpec(1, None, 1)))
    msg = str(err.value)
    assert "agent 'b'" in msg and "'e3'" in msg and "row 1" in msg, msg
    out = str(tmp_path / "r2")
    assert main(["--input", path, "--output", out, "--on-error", "skip", "--gamma", "0.5"]) == 0
    printed = capsys.readouterr().out
    assert "agent b: transitions 3  episodes 2" in printed
    report = json.load(open(os.path.join(out, REPORT_NAME)))
    assert report["episodes_rejected"] == 1 and report["transitions_out"] == 8
    (reason,) = report["rejected_by_reason"]
    assert "agent 'b'" in report["first_error_by_reason"][reason]
    summary = inspect_path(path)
    assert summary["episodes"] == 2 and summary["episodes_rejected"] == 1
    with pytest.raises(OfflineGraphError, match="agent 'b'"):
        inspect_path(path, strict=True)


def test_inspect_numbers_equal_hand_counts(data, tmp_path):
    s = inspect_path(data)
    assert s["multi_agent"] and s["episodes"] == 2 and s["agent_steps"] == 8
    a0, b = s["agents"]["0"], s["agents"]["b"]
    assert (a0["episodes"], a0["steps"], a0["agent_id_int"]) == (2, 5, True)
    assert (b["episodes"], b["steps"], b["agent_id_int"]) == (2, 3, False)
    assert a0["return"] == {"mean": 5.0, "min": 1.0, "max": 9.0}  # e1: 1+3+5, e2: 1+0
    assert b["return"] == {"mean": 4.0, "min": 2.0, "max": 6.0}  # e1: 2+4, e2: 2
    nodes0 = [1, 2, 3, 1, 4, 5, 1]  # every observation of agent 0
    nodes_b = [2, 3, 1, 2, 4]
    assert a0["nodes"] == {f"p{q}": float(np.percentile(nodes0, q)) for q in (50, 90, 99)} | {"max": 5}
    assert b["nodes"] == {f"p{q}": float(np.percentile(nodes_b, q)) for q in (50, 90, 99)} | {"max": 4}
    assert b["nodes"]["p50"] == 2.0 and b["edges"]["max"] == 3
    assert (b["observation_space"], b["source"]) == ("graph:F=3,D=1", "the file metadata")
    assert "agent 0 (int id)" in format_table(s)
    # without spaces in the metadata: inferred per agent id
    path = str(tmp_path / "nometa")
    offline_graph.write_episodes(path, episodes())
    s2 = inspect_path(path)
    assert s2["agent_steps"] == 8
    assert s2["agents"]["b"]["observation_space"] == "graph:F=3,D=1"
    assert s2["agents"]["0"]["action_space"] == "discrete:3"
    assert s2["agents"]["0"]["source"].startswith("inferred")
