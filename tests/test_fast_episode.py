"""The fast validation path builds exactly the arrays of the full path, or defers to it."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_graph.data.episodes.codec import decode_state
from offline_graph.rllib.offline.episodes import encode_episode
from offline_graph.data.episodes.fast_episode import fast_episode
from offline_graph.data.episodes.validation import EpisodeSpec, validate_episode


def episode(sizes, edim, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    obs = []
    for n, e in sizes:
        o = {"x": rng.normal(size=(n, 3)).astype(dtype), "edge_index": rng.integers(0, n, (2, e))}
        if edim is not None:
            o["edge_attr"] = rng.normal(size=(e, edim)).astype(np.float32)
        obs.append(o)
    t = len(sizes) - 1
    return encode_episode(
        obs,
        [i % 2 for i in range(t)],
        [0.5 * i for i in range(t)],
        terminated=True,
        truncated=False,
        episode_id="e",
    )


def assert_same(a, b):
    for key in ("x", "edge_index", "node_ptr", "edge_ptr"):
        np.testing.assert_array_equal(getattr(a.obs, key), getattr(b.obs, key))
    assert a.obs.x.dtype == b.obs.x.dtype and a.obs.edge_index.dtype == b.obs.edge_index.dtype
    if b.obs.edge_attr is None:
        assert a.obs.edge_attr is None
    else:
        np.testing.assert_array_equal(a.obs.edge_attr, b.obs.edge_attr)
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    assert (a.id, a.terminated, a.truncated) == (b.id, b.terminated, b.truncated)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 5), st.integers(0, 6)), min_size=2, max_size=6),
    st.sampled_from([None, 1, 2]),
)
def test_fast_path_equals_full_path(sizes, edim):
    item = episode(sizes, edim)
    spec = EpisodeSpec(3, edim, 2)
    fast = fast_episode(decode_state(item, raw_arrays=True), spec)
    assert fast is not None
    assert_same(fast, validate_episode(decode_state(item), spec))


def test_edge_index_rows_are_sources_then_targets():
    obs = [
        {"x": np.zeros((3, 3), np.float32), "edge_index": np.array([[0, 1], [2, 0]])},
        {"x": np.zeros((2, 3), np.float32), "edge_index": np.array([[1], [0]])},
    ]
    item = encode_episode(obs, [1], [1.0], terminated=True, truncated=False, episode_id="a")
    fast = fast_episode(decode_state(item, raw_arrays=True), EpisodeSpec(3, None, 2))
    np.testing.assert_array_equal(fast.obs.edge_index, [[0, 1, 1], [2, 0, 0]])
    np.testing.assert_array_equal(fast.obs.edge_ptr, [0, 2, 3])


@pytest.mark.parametrize("case", ["float64", "unfinished", "wrong_f"])
def test_unusual_episodes_defer_to_the_full_path(case):
    if case == "float64":
        item, spec = episode([(2, 1), (1, 0)], None, dtype=np.float64), EpisodeSpec(3, None, 2)
    elif case == "unfinished":
        rng = np.random.default_rng(0)
        obs = [
            {"x": rng.normal(size=(2, 3)).astype(np.float32), "edge_index": np.zeros((2, 0), np.int64)}
            for _ in range(2)
        ]
        item = encode_episode(obs, [0], [0.0], terminated=False, truncated=False, episode_id="u")
        spec = EpisodeSpec(3, None, 2)
    else:
        item, spec = episode([(2, 1), (1, 0)], None), EpisodeSpec(4, None, 2)
    assert fast_episode(decode_state(item, raw_arrays=True), spec) is None


@pytest.mark.parametrize("level", ["node", "edge"])
@pytest.mark.parametrize("with_masks", [True, False])
def test_selection_masks_same_as_full_path(level, with_masks):
    """Node/edge-selection episodes: the fast path builds the same masks as the full path
    (recorded masks, or all-allowed without them)."""
    rng = np.random.default_rng(3)
    sizes = [(4, 3), (3, 5), (2, 2)]
    obs = []
    for n, e in sizes:
        o = {
            "x": rng.normal(size=(n, 3)).astype(np.float32),
            "edge_index": rng.integers(0, n, (2, e)),
            "edge_attr": rng.normal(size=(e, 1)).astype(np.float32),
        }
        if with_masks:
            o["action_mask"] = np.arange(n if level == "node" else e) % 2 == 1
        obs.append(o)
    item = encode_episode(obs, [1, 1], [1.0, 2.0], terminated=True, truncated=False, episode_id="e")
    spec = EpisodeSpec(3, 1, 8, action_level=level)
    fast = fast_episode(decode_state(item, raw_arrays=True), spec)
    full = validate_episode(decode_state(item), spec)
    assert fast is not None
    assert_same(fast, full)
    name = f"{level}_mask"
    expected = (
        np.concatenate([np.arange(n if level == "node" else e) % 2 == 1 for n, e in sizes])
        if with_masks
        else np.ones(sum(n if level == "node" else e for n, e in sizes), bool)
    )
    np.testing.assert_array_equal(getattr(fast.obs, name), expected)
    np.testing.assert_array_equal(getattr(full.obs, name), expected)


def test_numpy_scalar_actions_and_rewards_read_like_python_numbers() -> None:
    """add_env_step(action=np.argmax(...)) stores numpy scalars; RLlib reads them back, so do we."""
    import msgpack
    import msgpack_numpy as mnp
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from offline_graph.data.episodes.fast_episode import scalar_column
    from offline_graph.data.episodes.reader import ReadStats, read_transitions

    def graph(n: int) -> dict:
        return {"x": np.full((n, 3), n, np.float32), "edge_index": np.array([[0], [n - 1]], np.int64)}

    spec = EpisodeSpec(num_features=3, edge_dim=None, num_actions=4)
    for act, rew in ((np.int64, np.float64), (np.int32, np.float32), (np.uint8, np.float16), (np.int16, int)):
        ep = SingleAgentEpisode(observations=[graph(2)], infos=[{}], len_lookback_buffer=0)
        for t in range(3):
            ep.add_env_step(observation=graph(3 + t), action=act(3 - t), reward=rew(t), terminated=t == 2)
        item = msgpack.packb(ep.get_state(), default=mnp.encode)
        raw = decode_state(item, raw_arrays=True)
        assert scalar_column(raw.actions).tolist() == [3, 2, 1]
        parts = read_transitions([item], [None], spec, 0.5, on_error="raise", seen_ids={}, stats=ReadStats())
        assert [p.actions.tolist() for p in parts] == [[3, 2, 1]]
        assert parts[0].rewards.tolist() == [0.0, 1.0, 2.0]
        assert parts[0].value_targets.tolist() == [0.0 + 0.5 * (1.0 + 0.5 * 2.0), 1.0 + 0.5 * 2.0, 2.0]
        assert parts[0].obs.num_nodes.tolist() == [2, 3, 4]
    mixed = [{b"nd": False, b"type": "<i4", b"data": b"\x02\x00\x00\x00"}, 1]
    assert scalar_column(mixed).tolist() == [2, 1]
    # a Python number first, numpy scalars after (RLlib takes either per step)
    assert scalar_column([1, *mixed]).tolist() == [1, 2, 1]
    ep = SingleAgentEpisode(observations=[graph(2)], infos=[{}], len_lookback_buffer=0)
    for t, act in enumerate((3, np.int64(2), 1)):
        ep.add_env_step(observation=graph(3 + t), action=act, reward=float(t), terminated=t == 2)
    item = msgpack.packb(ep.get_state(), default=mnp.encode)
    parts = read_transitions([item], [None], spec, 0.5, on_error="raise", seen_ids={}, stats=ReadStats())
    assert [p.actions.tolist() for p in parts] == [[3, 2, 1]]
