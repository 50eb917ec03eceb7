"""Graph dict <-> GraphInstance, episode rows <-> RLlib episodes, and decode / format errors."""

from __future__ import annotations

import msgpack
import msgpack_numpy
import numpy as np
import pyarrow.parquet as pq
import pytest
from gymnasium.spaces import GraphInstance
from hypothesis import example, given, settings
from hypothesis import strategies as st

from offline_graph.data.episodes.codec import decode_state
from offline_graph.rllib.offline.episodes import encode_episode
from offline_graph.data.errors import DecodeError, FormatVersionError
from offline_graph.data.store.format import read_file_metadata
from offline_graph.data.graphs.graph import dict_to_graph, graph_to_dict
from offline_graph.jobs.recording import (
    DEFAULT_ENV,
    RecordJob,
    episode_seeds,
    make_env,
    record_file,
    run_episode,
)
from offline_graph.data.analysis.stats import collect
from offline_graph.data.episodes.validation import EpisodeSpec, validate_episode
from tests.helpers import make_episode, make_episode_item, make_graph, write_episode_file


def assert_graph_equal(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key, value in a.items():
        assert value.dtype == b[key].dtype, key
        assert value.shape == b[key].shape, key
        np.testing.assert_array_equal(value, b[key])


graph_args = st.tuples(
    st.integers(1, 12),  # n
    st.integers(0, 30),  # e
    st.integers(1, 5),  # F
    st.one_of(st.none(), st.integers(1, 3)),  # D
    st.integers(0, 2**31),  # seed
)


@settings(max_examples=60, deadline=None)
@given(graph_args)
@example((1, 0, 1, None, 0))  # single node, no edges, no edge features
@example((1, 3, 2, 1, 0))  # single node with self loops
@example((5, 0, 3, None, 0))  # zero edges
def test_dict_graphinstance_round_trip(args):
    n, e, feat, edim, seed = args
    g = make_graph(n, e, F=feat, D=edim, seed=seed)
    inst = dict_to_graph(g)
    # gymnasium's edge_links [E, 2] is exactly PyG's edge_index [2, E] transposed
    assert inst.edge_links.shape == (e, 2)
    assert inst.edge_links.dtype == np.int64
    np.testing.assert_array_equal(inst.edge_links, g["edge_index"].T)
    np.testing.assert_array_equal(inst.nodes, g["x"])
    if edim is None:
        assert inst.edges is None
    else:
        np.testing.assert_array_equal(inst.edges, g["edge_attr"])
    assert_graph_equal(graph_to_dict(inst, edim), g)


@settings(max_examples=40, deadline=None)
@given(graph_args)
def test_graphinstance_dict_round_trip(args):
    n, e, feat, edim, seed = args
    rng = np.random.default_rng(seed)
    links = rng.integers(0, n, size=(e, 2)).astype(np.int64)
    edges = None if edim is None else rng.standard_normal((e, edim)).astype(np.float32)
    inst = GraphInstance(rng.standard_normal((n, feat)).astype(np.float32), edges, links)
    d = graph_to_dict(inst, edim)
    assert d["edge_index"].shape == (2, e)
    np.testing.assert_array_equal(d["edge_index"], links.T)
    assert ("edge_attr" in d) == (edim is not None)
    back = dict_to_graph(d)
    np.testing.assert_array_equal(back.nodes, inst.nodes)
    np.testing.assert_array_equal(back.edge_links, links)
    if edim is None:
        assert back.edges is None
    else:
        np.testing.assert_array_equal(back.edges, edges)


@pytest.mark.parametrize("n", [1, 4])
def test_zero_edges_with_edge_features(n):
    g = make_graph(n, 0, F=3, D=2)
    assert g["edge_attr"].shape == (0, 2)
    inst = dict_to_graph(g)
    assert inst.edge_links.shape == (0, 2) and inst.edges.shape == (0, 2)
    assert_graph_equal(graph_to_dict(inst, 2), g)


def test_graph_to_dict_missing_links_and_edges():
    inst = GraphInstance(np.ones((2, 3), np.float32), None, None)
    d = graph_to_dict(inst, 2)
    assert d["edge_index"].shape == (2, 0) and d["edge_index"].dtype == np.int64
    assert d["edge_attr"].shape == (0, 2) and d["edge_attr"].dtype == np.float32
    assert "edge_attr" not in graph_to_dict(inst, None)


sizes_st = st.lists(st.tuples(st.integers(1, 8), st.integers(0, 12)), min_size=2, max_size=6)


@settings(max_examples=25, deadline=None)
@given(sizes_st, st.one_of(st.none(), st.integers(1, 3)), st.booleans(), st.integers(0, 1000))
def test_encode_decode_validate_exact(sizes, edim, terminated, seed):
    feat, k = 4, 5
    obs, _, _ = make_episode(sizes, F=feat, D=edim, seed=seed)
    rng = np.random.default_rng(seed)
    actions = rng.integers(0, k, size=len(sizes) - 1).tolist()
    rewards = rng.standard_normal(len(sizes) - 1).astype(np.float32).tolist()
    item = encode_episode(
        obs,
        actions,
        rewards,
        terminated=terminated,
        truncated=not terminated,
        episode_id=f"e{seed}",
    )
    raw = decode_state(item)
    assert raw.id == f"e{seed}"
    assert len(raw.observations) == len(sizes)
    for got, want in zip(raw.observations, obs):
        assert_graph_equal(got, want)
    ep = validate_episode(raw, EpisodeSpec(feat, edim, k))
    assert ep.terminated is terminated and ep.truncated is (not terminated)
    np.testing.assert_array_equal(ep.actions, np.array(actions, np.int64))
    np.testing.assert_array_equal(ep.rewards, np.array(rewards, np.float32))
    np.testing.assert_array_equal(ep.obs.num_nodes, [n for n, _ in sizes])
    np.testing.assert_array_equal(ep.obs.num_edges, [e for _, e in sizes])
    np.testing.assert_array_equal(ep.obs.x, np.concatenate([o["x"] for o in obs]))
    np.testing.assert_array_equal(ep.obs.edge_index, np.concatenate([o["edge_index"] for o in obs], axis=1))
    if edim is None:
        assert ep.obs.edge_attr is None
    else:
        np.testing.assert_array_equal(ep.obs.edge_attr, np.concatenate([o["edge_attr"] for o in obs]))


def test_rllib_from_state_reads_recorded_row(tmp_path):
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from offline_graph.env.policies import make_policy

    path = str(tmp_path / "ep.parquet")
    job = RecordJob(DEFAULT_ENV, {}, "mixed", 0.5, 7, 3, 4, path)  # episode 3 of seed 7
    record_file(job)
    (item,) = pq.read_table(path).column("item").to_pylist()
    episode = SingleAgentEpisode.from_state(msgpack.unpackb(item, object_hook=msgpack_numpy.decode))

    # what was recorded: replay episode 3 of seed 7 directly
    env = make_env(DEFAULT_ENV)
    env_seed, rng = episode_seeds(7, 3)
    policy = make_policy("mixed", int(env.action_space.n), 0.5, rng)
    obs, acts, rews, term, trunc = run_episode(env, policy, env_seed, env.unwrapped.edge_dim)

    assert episode.id_ == "s7-e0000003"
    assert (episode.is_terminated, episode.is_truncated) == (term, trunc)
    assert len(episode) == len(acts) > 0
    got_obs = episode.get_observations()
    assert len(got_obs) == len(obs)
    for got, want in zip(got_obs, obs):
        assert_graph_equal(got, want)
    assert list(episode.get_actions()) == acts
    assert list(episode.get_rewards()) == rews


CORRUPT = [b"", b"\xc1", b"\x93\x01\x02", b"\xde\xad\xbe\xef" * 8] + [
    np.random.default_rng(i).bytes(int(n)) for i, n in enumerate([1, 7, 64, 500, 4096])
]


@pytest.mark.parametrize("junk", CORRUPT, ids=range(len(CORRUPT)))
def test_corrupt_item_names_file_and_row(tmp_path, junk):
    with pytest.raises(DecodeError) as info:
        decode_state(junk, file="f.parquet", row=4)
    assert str(info.value).startswith("file f.parquet, row 4")


def test_corrupt_row_in_file_names_file_and_row(tmp_path):
    good = make_episode_item(episode_id="good")
    junk = np.random.default_rng(0).bytes(300)
    path = write_episode_file(tmp_path / "bad.parquet", [good, good[: len(good) // 2], junk])
    with pytest.raises(DecodeError) as info:
        collect(path, strict=True)
    assert f"file {path}, row 1, column 'item'" in str(info.value)
    col = collect(path)  # skip mode counts them instead
    assert len(col.returns) == 1 and col.rejected == {"decode": 2}


def test_wrong_format_version_names_file_and_fix(tmp_path):
    path = write_episode_file(
        tmp_path / "v99.parquet", [make_episode_item()], {"kind": "episodes", "version": 99}
    )
    for call in (lambda: read_file_metadata(path), lambda: collect(path)):
        with pytest.raises(FormatVersionError) as info:
            call()
        msg = str(info.value)
        assert msg.startswith(f"file {path}: format version must be 1 (found 99).")
        assert "re-record the episodes" in msg
    ok = write_episode_file(tmp_path / "v1.parquet", [make_episode_item()])
    assert read_file_metadata(ok) == {"kind": "episodes", "version": 1}


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"episodes"', b"7"])
def test_metadata_that_is_json_but_not_an_object_names_the_file(tmp_path, raw):
    from offline_graph.data.store.format import METADATA_KEY, parse_metadata

    with pytest.raises(FormatVersionError) as info:
        parse_metadata({METADATA_KEY: raw}, file="f.parquet")
    assert str(info.value).startswith(
        "file f.parquet: metadata key 'offline_graph' must be a JSON object (found "
    )


def test_numpy_scalar_end_flags_and_counters_as_rllib_recorders_store_them():
    """RLlib's recorders write ``np.bool_`` end flags and ``np.int64`` counters: raw decoding
    sees their msgpack-numpy maps, which are the values, not corrupt rows."""
    from offline_graph.data.episodes.codec import flag, integer

    values = {"t": np.bool_(True), "f": np.bool_(False), "n": np.int64(3)}
    raw = msgpack.unpackb(msgpack.packb(values, default=msgpack_numpy.encode), raw=False)
    assert isinstance(raw["t"], dict)  # the map, as the fast path sees it
    assert flag(raw["t"], "ctx") is True and flag(raw["f"], "ctx") is False
    assert integer(raw["n"], "ctx") == 3
    with pytest.raises(DecodeError, match="ctx: value must be a bool"):
        flag(msgpack.unpackb(msgpack.packb(np.float32(1.0), default=msgpack_numpy.encode), raw=False), "ctx")
