"""Transitions -> Arrow rows -> learner batch: exact values, slices, no padding."""

import numpy as np
import pyarrow as pa
import pytest

from offline_graph.data.episodes.codec import decode_state
from offline_graph.data.errors import SchemaError
from offline_graph.rllib.offline.episodes import encode_episode
from offline_graph.data.learning.transitions import (
    FINAL_COLUMNS,
    Transitions,
    table_to_batch,
    transition_schema,
)
from offline_graph.data.episodes.validation import EpisodeSpec, validate_episode

SPEC = EpisodeSpec(num_features=2, edge_dim=1, num_actions=3)


def graph(n, edges, base):
    ei = np.array(edges, np.int64).reshape(-1, 2).T
    return {
        "x": (base + np.arange(n * 2, dtype=np.float32)).reshape(n, 2),
        "edge_index": ei,
        "edge_attr": (base + np.arange(ei.shape[1], dtype=np.float32)).reshape(-1, 1),
    }


def episode(eid, sizes, actions, rewards, terminated):
    obs = [graph(n, e, 100.0 * i) for i, (n, e) in enumerate(sizes)]
    item = encode_episode(
        obs, actions, rewards, terminated=terminated, truncated=not terminated, episode_id=eid
    )
    return validate_episode(decode_state(item), SPEC), obs


def test_transitions_from_two_episodes_exact():
    ep_a, obs_a = episode("a", [(2, [(0, 1)]), (1, []), (3, [(2, 0), (1, 2)])], [2, 0], [1.0, 2.0], True)
    ep_b, obs_b = episode("b", [(1, [(0, 0)]), (2, [])], [1], [5.0], False)
    tr = Transitions.from_episodes([ep_a, ep_b], gamma=0.5)
    assert len(tr) == 3  # final observations are not transitions
    np.testing.assert_array_equal(tr.actions, [2, 0, 1])
    np.testing.assert_array_equal(tr.t, [0, 1, 0])
    np.testing.assert_array_equal(tr.terminateds, [False, True, False])
    np.testing.assert_array_equal(tr.truncateds, [False, False, True])
    np.testing.assert_allclose(tr.value_targets, [1 + 0.5 * 2, 2.0, 5.0])
    np.testing.assert_array_equal(tr.obs.node_ptr, [0, 2, 3, 4])
    np.testing.assert_array_equal(tr.obs.x, np.concatenate([obs_a[0]["x"], obs_a[1]["x"], obs_b[0]["x"]]))

    table = tr.to_arrow()
    assert table.column_names[0] == "actions"
    assert table.column("eps_id").to_pylist() == ["a", "a", "b"]
    assert table.column("x").type == pa.list_(pa.list_(pa.float32(), 2))
    # A slice (what Ray Data hands a collate function) keeps exact values and offsets.
    batch = table_to_batch(table.slice(1, 2))
    np.testing.assert_array_equal(batch["actions"], [0, 1])
    np.testing.assert_array_equal(batch["obs"]["x"], np.concatenate([obs_a[1]["x"], obs_b[0]["x"]]))
    np.testing.assert_array_equal(batch["obs"]["edge_index"], [[1], [1]])
    np.testing.assert_array_equal(batch["obs"]["edge_attr"], [[0.0]])
    np.testing.assert_array_equal(batch["obs"]["ptr"], [0, 1, 2])
    np.testing.assert_array_equal(batch["obs"]["batch"], [0, 1])
    np.testing.assert_allclose(batch["value_targets"], [2.0, 5.0])
    assert set(batch) == {"actions", "obs", "value_targets"}  # bookkeeping dropped


def test_arrow_rows_carry_no_padding():
    """Bytes in the Arrow table scale with the real nodes/edges (+ offsets), not a maximum."""
    rng = np.random.default_rng(0)
    sizes = [1, 200, 1, 1]  # long tail: padding 3 steps to 200 nodes would be ~3x the real bytes
    obs = [
        {
            "x": rng.normal(size=(n, 2)).astype(np.float32),
            "edge_index": np.zeros((2, n), np.int64),
            "edge_attr": np.zeros((n, 1), np.float32),
        }
        for n in sizes
    ]
    item = encode_episode(obs, [0, 1, 2], [0.0, 0.0, 0.0], terminated=True, truncated=False, episode_id="p")
    tr = Transitions.from_episodes([validate_episode(decode_state(item), SPEC)], 0.9)
    real = tr.obs.nbytes  # x + edge_index + edge_attr of the 3 stored observations
    assert real == (1 + 200 + 1) * (2 * 4 + 2 * 8 + 1 * 4)
    table = tr.to_arrow(columns=["actions", "x", "edge_index", "edge_attr"])
    offsets = 3 * 3 * 4  # pyarrow counts one int32 offset per row for each of 3 list columns
    assert table.nbytes == real + offsets + 3 * 8  # + int64 actions; nothing else
    assert table.nbytes < 0.4 * 3 * 200 * (2 * 4 + 2 * 8 + 1 * 4)  # vs padding to N_max=200


def two_ends():
    """Episode a (terminated, 2 steps, final: 3 nodes, 2 edges) and b (truncated, 1 step,
    final: 2 nodes, no edges) as transitions with their final observations."""
    ep_a, obs_a = episode("a", [(2, [(0, 1)]), (1, []), (3, [(2, 0), (1, 2)])], [2, 0], [1.0, 2.0], True)
    ep_b, obs_b = episode("b", [(1, [(0, 0)]), (2, [])], [1], [5.0], False)
    return Transitions.from_episodes([ep_a, ep_b], gamma=0.5), obs_a[-1], obs_b[-1]


def test_final_observations_ride_on_each_episode_last_row():
    tr, fin_a, fin_b = two_ends()
    table = tr.to_arrow()
    assert table.column_names[-3:] == ["final_x", "final_edge_index", "final_edge_attr"]
    assert table.schema == transition_schema(SPEC)  # the converted layout, final columns last
    # row 1 ends a (terminated), row 2 ends b (truncated); row 0 carries nothing
    assert table.column("final_x").to_pylist() == [None, fin_a["x"].tolist(), fin_b["x"].tolist()]
    assert table.column("final_edge_index").to_pylist() == [None, [[2, 0], [1, 2]], []]
    assert table.column("final_edge_attr").to_pylist() == [None, [[200.0], [201.0]], []]
    # bytes added: the two final graphs' values, nothing per other row but an offset and a bit
    # x: (3 + 2) nodes * 2 * 4; edge_index: 2 edges * 2 * 8; edge_attr: 2 edges * 4
    values = sum(table.column(c).chunk(0).flatten().nbytes for c in table.column_names[-3:])
    assert values == 5 * 2 * 4 + 2 * 2 * 8 + 2 * 4 == tr.final_obs.nbytes == 80
    # the learner never sees them
    assert set(table_to_batch(table)) == {"actions", "obs", "value_targets"}
    assert not set(FINAL_COLUMNS) & set(tr.to_arrow(columns=["actions", "x", "edge_index"]).column_names)
    # and they read back as the final observations
    back = Transitions.from_table(table)
    for key in ("x", "node_ptr", "edge_index", "edge_ptr", "edge_attr"):
        np.testing.assert_array_equal(getattr(back.final_obs, key), getattr(tr.final_obs, key), err_msg=key)


def test_rows_without_final_columns_or_cut_before_an_episode_ends():
    tr, fin_a, _ = two_ends()
    table = tr.to_arrow()
    older = table.drop_columns([c for c in table.column_names if c in FINAL_COLUMNS])
    assert Transitions.from_table(older).final_obs is None  # rows of an older convert
    # a batch holding a's first step only: a's entry has no final graph (never read) ...
    first = Transitions.from_table(table.slice(0, 1))
    assert first.episode_ids == ["a"] and first.final_obs.num_nodes.tolist() == [0]
    # ... the next batch holds a's last step and b: both finals
    rest = Transitions.from_table(table.slice(1, 2))
    assert rest.final_obs.num_nodes.tolist() == [3, 2]
    np.testing.assert_array_equal(rest.final_obs.x[:3], fin_a["x"])


def test_a_final_observation_on_a_row_that_does_not_end_its_episode_is_refused():
    tr, _, _ = two_ends()
    table = tr.to_arrow()
    unflagged = table.set_column(
        table.column_names.index("terminateds"), "terminateds", pa.array([False, False, False])
    )
    with pytest.raises(SchemaError, match=r"episode 'a' step 1: final_x must be null"):
        Transitions.from_table(unflagged)
