"""The encodings zoo: every episode encoding RLlib accepts gives exactly the transitions of
the plain encoding, on the fast path and the full path, in the prelearner and in the
conversion job (variants: ``tests/encodings.py``).

Values RLlib stores but that cannot be an action are rejected naming episode, step, column.
"""

from __future__ import annotations

import copy
import functools
import os

import gymnasium as gym
import msgpack
import msgpack_numpy as mnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

import offline_graph
from offline_graph import GNNModule, GraphOfflinePreLearner, GraphValidationError, NodeAction
from offline_graph.data.episodes.codec import decode_state
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.episodes.fast_episode import fast_block, fast_episode
from offline_graph.data.episodes.reader import ReadStats, read_transitions
from offline_graph.data.learning.transitions import Transitions, transition_schema
from offline_graph.data.episodes.validation import EpisodeSpec, validate_episode
from offline_graph.rllib.offline.reading import choose_reading
from tests.encodings import (
    GAMMA,
    GRAPH_INSTANCE_VARIANTS,
    GRAPH_SPEC,
    K,
    MAX_NODES,
    NODE_SPEC,
    OBS_SPACE,
    VARIANTS,
    Base,
    base_set,
    construct,
    pack,
    stepwise,
    with_id,
)
from tests.helpers import write_episode_file

KINDS = {"graph": GRAPH_SPEC, "node": NODE_SPEC}
ALL_VARIANTS = {**VARIANTS, **GRAPH_INSTANCE_VARIANTS}
CASES = [("graph", v) for v in ALL_VARIANTS] + [("node", v) for v in VARIANTS]


@functools.cache
def bases(kind: str) -> list[Base]:
    return base_set(masked=kind == "node")


@functools.cache
def items(kind: str, variant: str) -> list[bytes]:
    return [ALL_VARIANTS[variant](b) for b in bases(kind)]


@functools.cache
def expected(kind: str) -> Transitions:
    """The base set's transitions, built by hand (no decoder involved)."""
    eps = bases(kind)
    ptr = lambda counts: np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)  # noqa: E731

    def columns(graphs: list) -> GraphColumns:
        return GraphColumns(
            x=np.concatenate([o["x"] for o in graphs]),
            node_ptr=ptr([len(o["x"]) for o in graphs]),
            edge_index=np.concatenate([o["edge_index"] for o in graphs], axis=1),
            edge_ptr=ptr([o["edge_index"].shape[1] for o in graphs]),
            edge_attr=np.concatenate([o["edge_attr"] for o in graphs]),
            node_mask=np.concatenate([o["action_mask"] for o in graphs]) if kind == "node" else None,
        )

    returns: list[float] = []
    for b in eps:
        g, out = 0.0, []
        for r in reversed(b.rewards):  # G_T = 0 at both terminated and truncated ends
            g = r + GAMMA * g
            out.append(g)
        returns += out[::-1]
    ends = lambda flag: [  # noqa: E731
        t == len(b.actions) - 1 and getattr(b, flag) for b in eps for t in range(len(b.actions))
    ]
    return Transitions(
        obs=columns([o for b in eps for o in b.obs[:-1]]),
        actions=np.array([a for b in eps for a in b.actions], np.int64),
        rewards=np.array([r for b in eps for r in b.rewards], np.float32),
        terminateds=np.array(ends("terminated")),
        truncateds=np.array(ends("truncated")),
        value_targets=np.array(returns, np.float32),
        episode_index=np.repeat(np.arange(len(eps), dtype=np.int32), [len(b.actions) for b in eps]),
        episode_ids=[b.id for b in eps],
        t=np.concatenate([np.arange(len(b.actions)) for b in eps]).astype(np.int64),
        final_obs=columns([b.obs[-1] for b in eps]),  # the final observations
    )


def assert_same(got: Transitions, want: Transitions) -> None:
    for key in ("x", "node_ptr", "edge_index", "edge_ptr", "edge_attr", "node_mask", "edge_mask"):
        for part in ("obs", "final_obs"):
            a, b = getattr(getattr(got, part), key), getattr(getattr(want, part), key)
            assert (a is None) == (b is None), (part, key)
            if b is not None:
                assert a.dtype == b.dtype and a.shape == b.shape, (
                    part,
                    key,
                    a.dtype,
                    a.shape,
                    b.dtype,
                    b.shape,
                )
                np.testing.assert_array_equal(a, b, err_msg=f"{part}.{key}")
    for key in ("actions", "rewards", "terminateds", "truncateds", "value_targets", "episode_index", "t"):
        a, b = getattr(got, key), getattr(want, key)
        assert a.dtype == b.dtype, (key, a.dtype, b.dtype)
        np.testing.assert_array_equal(a, b, err_msg=key)
    assert got.episode_ids == want.episode_ids


def full_path(item_list: list[bytes], spec: EpisodeSpec) -> Transitions:
    return Transitions.from_episodes([validate_episode(decode_state(i), spec) for i in item_list], GAMMA)


def test_plain_encoding_is_the_hand_built_expectation() -> None:
    for kind, spec in KINDS.items():
        assert_same(full_path(items(kind, "plain"), spec), expected(kind))


@pytest.mark.parametrize("kind,variant", CASES)
def test_fast_path(kind: str, variant: str) -> None:
    spec, got = KINDS[kind], items(kind, variant)
    block = fast_block(got, spec, GAMMA)
    assert block is not None, "the fast path deferred to the full path"
    assert_same(block, expected(kind))
    episodes = [fast_episode(decode_state(i, raw_arrays=True), spec) for i in got]
    assert all(e is not None for e in episodes)
    assert_same(Transitions.from_episodes(episodes, GAMMA), expected(kind))  # type: ignore[arg-type]


@pytest.mark.parametrize("kind,variant", CASES)
def test_full_path(kind: str, variant: str) -> None:
    assert_same(full_path(items(kind, variant), KINDS[kind]), expected(kind))


@pytest.mark.parametrize("kind,variant", CASES)
def test_read_transitions(kind: str, variant: str) -> None:
    stats = ReadStats()
    got = items(kind, variant)
    parts = read_transitions(got, [None] * len(got), KINDS[kind], GAMMA, stats=stats, seen_ids={})
    assert_same(Transitions.concat(parts), expected(kind))
    assert stats.episodes_used == len(got) and not stats.rejected


# --------------------------------------------------------------------------- prelearner
ACTION_SPACES = {"graph": gym.spaces.Discrete(K), "node": NodeAction(MAX_NODES)}


MODEL = {"hidden": 8, "layers": 1}


@functools.cache
def built_prelearner(kind: str, tmp: str) -> GraphOfflinePreLearner:
    config = (
        BCConfig()
        .environment(observation_space=OBS_SPACE, action_space=ACTION_SPACES[kind])
        .offline_data(input_=[tmp], input_read_episodes=True, prelearner_class=GraphOfflinePreLearner)
        .training(train_batch_size_per_learner=len(expected(kind)), gamma=GAMMA)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config=MODEL))
    )
    return GraphOfflinePreLearner(
        config=offline_graph.configure(config), spaces=(OBS_SPACE, ACTION_SPACES[kind])
    )


def prelearner(kind: str, tmp: str) -> GraphOfflinePreLearner:
    """A prelearner as just built (building one takes ~0.5 s: one is built per kind and copied
    with a fresh reading strategy: the state a call changes, buffer, seen ids, stats)."""
    pre = copy.copy(built_prelearner(kind, tmp))
    pre.reading = choose_reading(pre.config, pre.settings, pre.spec)
    return pre


@functools.cache
def plain_prelearner_output(kind: str, tmp: str) -> pa.Table:
    return prelearner(kind, tmp)({"item": np.array(items(kind, "plain"), dtype=object)})


def input_dir(kind: str, tmp_path_factory) -> str:
    """A directory of its own holding the plain episodes of ``kind`` (the config's input; a
    shared parent such as pytest's base temp dir would also list other tests' files)."""
    path = tmp_path_factory.getbasetemp() / f"zoo_input_{kind}"
    if not path.exists():
        path.mkdir()
        write_episode_file(path / "plain.parquet", items(kind, "plain"))
    return str(path)


@pytest.mark.parametrize("kind,variant", CASES)
def test_prelearner(kind: str, variant: str, tmp_path_factory) -> None:
    tmp = input_dir(kind, tmp_path_factory)
    pre = prelearner(kind, tmp)
    out = pre({"item": np.array(items(kind, variant), dtype=object)})
    # Everything read is in the replay buffer (one chunk: the call's transitions) ...
    assert len(pre.buffer) == len(expected(kind)) and pre.buffer.chunks == 1
    assert_same(pre.buffer.all(), expected(kind))
    assert pre.stats.episodes_used == len(bases(kind)) and not pre.stats.rejected
    # ... and the same buffer and seed sample the same learner rows as the plain encoding.
    assert out.num_rows == len(expected(kind))
    assert out.equals(plain_prelearner_output(kind, tmp))


# --------------------------------------------------------------------------- conversion job


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_conversion_job(kind: str, tmp_path, ray_session) -> None:
    """One job over one file per variant (episode ids prefixed with the variant)."""
    from offline_graph.jobs.convert import ConvertConfig, convert

    variants = [v for k, v in CASES if k == kind]
    src = tmp_path / "episodes"
    src.mkdir()
    for i, v in enumerate(variants):
        rows = [ALL_VARIANTS[v](with_id(b, v)) for b in bases(kind)]
        write_episode_file(src / f"{i:03d}.parquet", rows)
    out = tmp_path / "rows"
    report = convert(ConvertConfig(input=str(src), output=str(out), spec=KINDS[kind], gamma=GAMMA))
    assert report["episodes_rejected"] == 0
    files = sorted(f for f in os.listdir(out) if f.endswith(".parquet"))
    table = pa.concat_tables([pq.read_table(out / f) for f in files])
    eps_id = table.column("eps_id").cast(pa.string()).to_pylist()
    schema = transition_schema(KINDS[kind])
    for v in variants:
        rows = table.filter(pa.array([e.startswith(f"{v}/") for e in eps_id]))
        want = expected(kind)
        want = Transitions(**{**want.__dict__, "episode_ids": [f"{v}/{e}" for e in want.episode_ids]})
        assert rows.cast(schema).to_pylist() == want.to_arrow().cast(schema).to_pylist(), v


# --------------------------------------------------------------------------- t_started
def test_a_cut_chunk_counts_t_from_t_started_like_rllib() -> None:
    """An EnvRunner's later chunk of an episode (``cut`` with a lookback): its steps are
    ``t_started, t_started + 1, ...`` as in RLlib's ``get_sample_batch``; the lookback step
    is not a transition."""
    b = bases("graph")[0]
    first = SingleAgentEpisode(id_=b.id)
    first.add_env_reset(observation=b.history[0])
    first.add_env_step(observation=b.history[1], action=1, reward=5.0)
    first.add_env_step(observation=b.obs[0], action=2, reward=6.0)
    chunk = first.cut(len_lookback_buffer=1)
    for t, (a, r) in enumerate(zip(b.actions, b.rewards)):
        last = t == len(b.actions) - 1
        chunk.add_env_step(observation=b.obs[t + 1], action=a, reward=r, terminated=last)
    item = pack(chunk)
    rllib_t = SingleAgentEpisode.from_state(
        msgpack.unpackb(item, object_hook=mnp.decode, strict_map_key=False)
    ).get_sample_batch()["t"]
    assert list(rllib_t) == [2, 3, 4]
    for got in (
        fast_block([item], GRAPH_SPEC, GAMMA),
        full_path([item], GRAPH_SPEC),
        Transitions.concat(read_transitions([item], [None], GRAPH_SPEC, GAMMA)),
    ):
        assert got is not None
        assert got.t.tolist() == list(rllib_t)
        assert got.actions.tolist() == b.actions and got.rewards.tolist() == b.rewards


# --------------------------------------------------------------------------- rejections
BAD_ACTIONS = {
    "python_float_1.5": 1.5,
    "numpy_float32_1.5": np.float32(1.5),
    "float_nan": float("nan"),
    "python_int_negative": -1,
    "numpy_int8_negative": np.int8(-1),
    "numpy_uint64_max": np.uint64(2**64 - 1),
    "python_int_2**63": 2**63,
    "python_int_2**64-1": 2**64 - 1,
    "python_none": None,
    "zero_d_array_1.5": np.array(1.5),
    "out_of_range": K,
}


def bad_item(kind: str, action, as_array: bool = False) -> bytes:
    b = with_id(bases(kind)[0], "bad")
    if as_array:
        acts = np.array([b.actions[0], action, *b.actions[2:]])
        return pack(construct(b, actions=acts))
    steps = iter(range(len(b.actions)))
    return pack(stepwise(b, act=lambda a: action if next(steps) == 1 else a))


@pytest.mark.parametrize("name", list(BAD_ACTIONS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_values_that_cannot_be_actions_are_rejected_naming_episode_step_column(kind, name, tmp_path):
    spec = KINDS[kind]
    rows = [items(kind, "plain")[1], bad_item(kind, BAD_ACTIONS[name])]
    path = write_episode_file(tmp_path / "e.parquet", rows)
    where = "episode 'bad/a', step t=1, column 'actions'"
    with pytest.raises(GraphValidationError, match=f"file {path}, row 1, {where}") as err:
        read_transitions(rows, [path, path], spec, GAMMA)
    assert err.value.reason == "action" and "[reason: action]" in str(err.value)
    with pytest.raises(GraphValidationError, match=where):
        validate_episode(decode_state(rows[1]), spec)
    with pytest.raises(GraphValidationError, match=where):
        fast_episode(decode_state(rows[1], raw_arrays=True), spec)
    assert fast_block(rows, spec, GAMMA) is None
    stats = ReadStats()
    parts = read_transitions(rows, [path, path], spec, GAMMA, on_error="skip", stats=stats)
    assert dict(stats.rejected) == {"action": 1} and sum(len(p) for p in parts) == 2


@pytest.mark.parametrize("action", [1.5, -1, 2**64 - 1])
def test_bad_values_in_an_action_array_are_rejected_at_their_step(action) -> None:
    item = bad_item("graph", action, as_array=True)
    where = "episode 'bad/a', step t=1, column 'actions'"
    for run in (
        lambda: read_transitions([item], [None], GRAPH_SPEC, GAMMA),
        lambda: validate_episode(decode_state(item), GRAPH_SPEC),
    ):
        with pytest.raises(GraphValidationError, match=where):
            run()
