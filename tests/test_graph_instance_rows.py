"""Observations stored as gymnasium ``GraphInstance``s get the dict rows' checks and errors
(the accepted encodings themselves: ``tests/test_encodings_zoo.py``)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gymnasium.spaces import GraphInstance
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from offline_graph import GraphValidationError
from offline_graph.data.episodes.codec import decode_state
from offline_graph.data.episodes.fast_episode import fast_block, fast_episode
from offline_graph.data.episodes.reader import read_transitions
from offline_graph.data.episodes.validation import EpisodeSpec, validate_episode
from tests.encodings import pack

SPEC = EpisodeSpec(num_features=3, edge_dim=2, num_actions=2)


def instance(n: int, e: int, seed: int = 0) -> GraphInstance:
    rng = np.random.default_rng(seed)
    return GraphInstance(
        rng.normal(size=(n, 3)).astype(np.float32),
        rng.normal(size=(e, 2)).astype(np.float32),
        rng.integers(0, n, (e, 2)).astype(np.int32),
    )


def item(observations: list) -> bytes:
    num_t = len(observations) - 1
    episode = SingleAgentEpisode(
        id_="gi",
        observations=observations,
        actions=[0] * num_t,
        rewards=[1.0] * num_t,
        terminated=True,
        len_lookback_buffer=0,
    )
    return pack(episode)


BAD = {
    "edge_index_range": (
        lambda g: GraphInstance(g.nodes, g.edges, np.array([[0, 1], [2, 7]], np.int32)),
        "column 'edge_index': edge indices must be in 0..N-1",
    ),
    "edge_attr": (
        lambda g: GraphInstance(g.nodes, None, g.edge_links),
        "column 'edge_attr': edge features must be float [E=2, 2] (found missing)",
    ),
    "edge_index_shape": (
        lambda g: GraphInstance(g.nodes, g.edges, np.zeros((2, 3), np.int64)),
        "column 'edge_index': edge_index must be integer [2, E]",
    ),
    "x_shape": (
        lambda g: GraphInstance(np.zeros((3, 5), np.float32), g.edges, g.edge_links),
        "column 'x': node features must be float [N, 3]",
    ),
}


@pytest.mark.parametrize("reason", list(BAD))
def test_bad_graph_instances_are_named_like_bad_dicts(reason: str) -> None:
    change, text = BAD[reason]
    obs = [instance(3, 2, seed=s) for s in range(3)]
    obs[1] = change(obs[1])
    row = item(obs)
    where = re.escape(f"episode 'gi', step t=1, {text}")
    with pytest.raises(GraphValidationError, match=where) as full:
        validate_episode(decode_state(row), SPEC)
    assert full.value.reason == reason
    with pytest.raises(GraphValidationError, match=where):
        read_transitions([row], [None], SPEC, 0.9)
    assert fast_block([row], SPEC, 0.9) is None
    try:  # the fast path defers (None) or words the same error
        assert fast_episode(decode_state(row, raw_arrays=True), SPEC) is None
    except GraphValidationError as err:
        assert str(err) == str(full.value)


def test_one_dimensional_nodes_are_one_feature_per_node() -> None:
    """``Graph(node_space=Box(shape=()))`` samples nodes ``[N]``: read as ``x [N, 1]``."""
    obs = [GraphInstance(np.arange(n, dtype=np.float32), None, None) for n in (2, 3)]
    spec = EpisodeSpec(num_features=1, edge_dim=None, num_actions=2)
    (part,) = read_transitions([item(obs)], [None], spec, 0.9)
    np.testing.assert_array_equal(part.obs.x, [[0.0], [1.0]])
    assert part.obs.edge_index.shape == (2, 0)


def test_a_graph_without_edges_may_leave_out_edge_features() -> None:
    """gymnasium writes ``GraphInstance(nodes, None, None)`` for E = 0 even when the space has
    edge features; a dict without edges may likewise leave out ``edge_attr``."""
    rng = np.random.default_rng(0)
    obs = [
        {"x": rng.normal(size=(2, 3)).astype(np.float32), "edge_index": np.zeros((2, 0), np.int64)},
        instance(3, 2),
    ]
    ep = validate_episode(decode_state(item(obs)), SPEC)
    assert ep.obs.edge_attr.shape == (2, 2) and ep.obs.num_edges.tolist() == [0, 2]
    (part,) = read_transitions([item(obs)], [None], SPEC, 0.9)
    assert part.obs.edge_attr.shape == (0, 2)
