"""Spaces without an env: compact text <-> space objects, and inference from decoded episodes."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from offline_graph.data.episodes.codec import RawEpisode
from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.space_text import graph_space, infer_spaces, parse_space, space_text
from offline_graph.data.graphs.spaces import EdgeAction, NodeAction


def test_texts_build_the_spaces_and_back() -> None:
    obs = parse_space("graph:F=5,D=3", "observation")
    assert isinstance(obs, gym.spaces.Graph)
    assert obs.node_space.shape == (5,) and obs.edge_space is not None and obs.edge_space.shape == (3,)
    assert parse_space("graph:F=5", "observation").edge_space is None
    assert parse_space("graph:F=5,D=0", "observation").edge_space is None
    assert parse_space("discrete:4", "action") == gym.spaces.Discrete(4)
    assert type(parse_space("node:32", "action")) is NodeAction and parse_space("node:32", "action").n == 32
    assert type(parse_space("edge:512", "action")) is EdgeAction
    for text in ("graph:F=5,D=3", "graph:F=7", "discrete:4", "node:32", "edge:512"):
        role = "observation" if text.startswith("graph") else "action"
        assert space_text(parse_space(text, role)) == text
    assert space_text(graph_space(16, 2)) == "graph:F=16,D=2"


@pytest.mark.parametrize(
    ("text", "role", "phrase"),
    [
        ("graph:D=3", "observation", "F (node features) is missing"),
        ("graph:F=x", "observation", "'x' is not an integer"),
        ("graph:F=0", "observation", "0 is below 1"),
        ("graph:F=2,F=3", "observation", "'F=3' is not F=<int> or D=<int>, each once"),
        ("discrete:4", "observation", "an observation space is graph"),
        ("box:4", "action", "kind 'box' is not one of ['discrete', 'edge', 'node']"),
        ("node:", "action", "kind 'node' is not one of"),
    ],
)
def test_bad_texts_say_what_is_expected(text: str, role: str, phrase: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_space(text, role)  # type: ignore[arg-type]
    assert str(err.value).startswith(f"--{role}-space: text must be ")
    assert f"(found {text!r}: {phrase}" in str(err.value)


def _graph(n: int, e: int, d: int | None = None, mask: int | None = None) -> dict:
    out = {"x": np.zeros((n, 3), np.float32), "edge_index": np.zeros((2, e), np.int64)}
    if d is not None:
        out["edge_attr"] = np.zeros((e, d), np.float32)
    if mask is not None:
        out["action_mask"] = np.ones(mask, bool)
    return out


def _episode(obs: list[dict], actions: list, eid: str = "e") -> RawEpisode:
    return RawEpisode(
        id=eid,
        observations=obs,
        actions=actions,
        rewards=[0.0] * len(actions),
        terminated=True,
        truncated=False,
        t_started=0,
    )


def test_infer_discrete_from_largest_action() -> None:
    eps = [
        _episode([_graph(2, 1, 2), _graph(4, 3, 2)], [np.int64(2)]),
        _episode([_graph(5, 0, 2), _graph(1, 0, 2), _graph(3, 2, 2)], [0, 6], "f"),
    ]
    obs, act = infer_spaces(eps)
    assert space_text(obs) == "graph:F=3,D=2" and act == gym.spaces.Discrete(7)


def test_infer_node_and_edge_selection_from_masks() -> None:
    # node masks: one entry per node; the limit is the largest node count seen (6)
    nodes = [_episode([_graph(3, 1, mask=3), _graph(6, 2, mask=6)], [1])]
    assert space_text(infer_spaces(nodes)[1]) == "node:6"
    # edge masks; the first observation (N == E == 2) fits both, the second decides
    edges = [_episode([_graph(2, 2, mask=2), _graph(2, 5, mask=5)], [4])]
    obs, act = infer_spaces(edges)
    assert space_text(obs) == "graph:F=3" and space_text(act) == "edge:5"


def test_infer_refuses_disagreeing_data() -> None:
    mixed = [_episode([_graph(2, 1, 2), _graph(2, 1, 4)], [0], "bad")]
    with pytest.raises(ConfigError, match=r"data, episode 'bad': D must be the same in every obs"):
        infer_spaces(mixed)
    ambiguous = [_episode([_graph(2, 2, mask=2), _graph(3, 3, mask=3)], [0])]
    with pytest.raises(ConfigError, match=r"found it fits \['edge', 'node'\]"):
        infer_spaces(ambiguous)
    with pytest.raises(ConfigError, match="found none"):
        infer_spaces([_episode([{"nodes": 1}, {"nodes": 2}], [0])])
