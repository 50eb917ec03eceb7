"""IQL / CQL from converted rows: the rows carry each episode's final observation, configure
accepts them, IQL trains, and the value runs read from rows are those read from the episode
files (graphs and next graphs), whole or cut across batches."""

from __future__ import annotations

import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")

ENV = "offline_graph/NextHop-v0"  # node actions: the rows carry final_node_mask too
B = 16
RUN = 3


@pytest.fixture(scope="module")
def data(tmp_path_factory, ray_session) -> dict[str, str]:
    """A few recorded NextHop episodes (two files) and their converted rows."""
    from offline_graph.data.episodes.reader import spec_from_spaces
    from offline_graph.jobs.convert import ConvertConfig, convert
    from offline_graph.jobs.recording import make_env, plan_jobs, record

    base = tmp_path_factory.mktemp("value_rows")
    episodes, rows = str(base / "episodes"), str(base / "rows")
    jobs = plan_jobs(
        env=ENV,
        env_config=None,
        policy="expert",
        epsilon=0.3,
        seed=0,
        episodes=12,
        episodes_per_file=6,
        output=episodes,
    )
    list(record(jobs, show_progress=False))
    env = make_env(ENV)
    convert(
        ConvertConfig(
            input=episodes, output=rows, spec=spec_from_spaces(env.observation_space, env.action_space)
        )
    )
    return {"episodes": episodes, "rows": rows}


def iql_config(path: str, episodes: bool, **configure_kwargs):
    from ray.rllib.algorithms.iql import IQLConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import offline_graph
    from offline_graph import GNNModule, GraphOfflinePreLearner
    from offline_graph.jobs.recording import make_env

    env = make_env(ENV)
    config = (
        IQLConfig()
        .environment(observation_space=env.observation_space, action_space=env.action_space)
        .offline_data(
            input_=[path],
            input_read_episodes=episodes,
            prelearner_class=GraphOfflinePreLearner,
            dataset_num_iters_per_learner=2,
            prelearner_buffer_kwargs={"capacity": 10_000},  # every recorded step stays buffered
        )
        .training(train_batch_size_per_learner=B, lr=None, critic_lr=1e-3, actor_lr=1e-3, value_lr=1e-3)
        .learners(num_learners=0)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={"hidden": 16, "layers": 1})
        )
        .debugging(seed=0)
    )
    return offline_graph.configure(config, seed=0, value_run_length=RUN, **configure_kwargs)


def parquet_files(path: str) -> list[str]:
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".parquet"))


def test_converted_rows_carry_one_final_graph_per_episode(data) -> None:
    from offline_graph.data.store.format import read_file_metadata
    from offline_graph.data.episodes.reader import read_episodes, spec_from_spaces
    from offline_graph.data.learning.transitions import Transitions
    from offline_graph.jobs.recording import make_env

    env = make_env(ENV)
    spec = spec_from_spaces(env.observation_space, env.action_space)
    rows = pa.concat_tables([pq.read_table(f) for f in parquet_files(data["rows"])])
    assert all(read_file_metadata(f)["final_obs"] is True for f in parquet_files(data["rows"]))
    items = [i for f in parquet_files(data["episodes"]) for i in pq.read_table(f).column("item").to_pylist()]
    episodes = read_episodes(items, [None] * len(items), spec)
    ends = pa.compute.or_(rows.column("terminateds"), rows.column("truncateds"))
    assert rows.column("final_x").is_valid().equals(ends)  # on each episode's last row only
    assert int(pa.compute.sum(ends).as_py()) == len(episodes) == 12
    finals = Transitions.from_table(rows).final_obs
    for i, ep in enumerate(episodes):  # same order: one task per file, rows in episode order
        last = ep.obs.slice(len(ep), len(ep) + 1)
        for key in ("x", "edge_index", "node_mask"):
            got = getattr(finals.slice(i, i + 1), key)
            np.testing.assert_array_equal(got, getattr(last, key), err_msg=f"{ep.id} {key}")
    assert finals.nbytes == sum(e.obs.slice(len(e), len(e) + 1).nbytes for e in episodes)


def test_iql_trains_from_converted_rows(data) -> None:
    algo = iql_config(data["rows"], episodes=False).build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    mod = result["learners"]["default_policy"]
    assert math.isfinite(float(mod["qf_loss"])) and math.isfinite(float(mod["vf_loss"]))
    # trained on rewards x scale; q_mean is shown in the logged rewards' units
    scale = float(algo.config.learner_config_dict["offline_graph"]["reward_scale"]["scale"])
    assert 0.0 < scale < 1.0  # NextHop-v0's returns span more than 1
    assert float(mod["q_mean"]) * scale == pytest.approx(float(mod["q_mean_trained"]), rel=1e-5)


def test_rows_without_final_observations_are_refused(data, tmp_path) -> None:
    from offline_graph.data.errors import ConfigError
    from offline_graph.data.store.format import METADATA_KEY, make_metadata

    older = tmp_path / "older"
    older.mkdir()
    for f in parquet_files(data["rows"]):
        table = pq.read_table(f)
        table = table.drop_columns([c for c in table.column_names if c.startswith("final_")])
        meta = {k: v for k, v in table.schema.metadata.items() if k != METADATA_KEY}
        meta.update(make_metadata("transitions"))  # as convert wrote it before final_obs
        pq.write_table(table.replace_schema_metadata(meta), older / os.path.basename(f))
    with pytest.raises(ConfigError, match="converted rows must carry each episode's final observation"):
        iql_config(str(older), episodes=False)


def test_value_runs_from_rows_equal_those_from_episode_files(data) -> None:
    """In-process (no Ray): the ``value`` reading of rows, whole and cut inside an episode
    across two batches, gives every sampled run the graphs and next graph that the episode
    files give the same steps."""
    from offline_graph.data.episodes.reader import spec_from_spaces
    from offline_graph.data.learning.value_runs import sample_value_runs, value_runs_to_arrow
    from offline_graph.jobs.recording import make_env
    from offline_graph.rllib.offline.reading import ValueRuns, choose_reading
    from offline_graph.rllib.core.settings import GraphSettings

    env = make_env(ENV)
    spec = spec_from_spaces(env.observation_space, env.action_space)
    settings = GraphSettings(value_runs=RUN, seed=0)

    def reading(path: str, episodes: bool) -> ValueRuns:
        out = choose_reading(iql_config(path, episodes), settings, spec)
        assert isinstance(out, ValueRuns)
        return out

    from_episodes = reading(data["episodes"], True)
    for f in parquet_files(data["episodes"]):
        from_episodes.read({"item": np.array(pq.read_table(f).column("item").to_pylist(), dtype=object)})
    want = from_episodes.buffer.all()
    where = {(want.episode_ids[e], int(t)): i for i, (e, t) in enumerate(zip(want.episode_index, want.t))}
    rows = pa.concat_tables([pq.read_table(f) for f in parquet_files(data["rows"])])
    ends = np.flatnonzero(rows.column("terminateds").to_numpy() | rows.column("truncateds").to_numpy())
    cut = int(ends[3]) - 1  # inside the 4th episode (it has >= 3 steps): 2 steps after the cut
    assert cut > ends[2] + 1
    for batches in ([rows], [rows.slice(0, cut), rows.slice(cut)]):
        from_rows = reading(data["rows"], False)
        for batch in batches:
            from_rows.read(batch)
        got = from_rows.buffer.all()
        start, stop = sample_value_runs(got, np.random.default_rng(0), 400, RUN)
        first = np.array([where[(got.episode_ids[got.episode_index[s]], int(got.t[s]))] for s in start])
        mine = value_runs_to_arrow(got, start, stop)
        theirs = value_runs_to_arrow(want, first, first + (stop - start))
        assert mine.equals(theirs), len(batches)
        assert mine.num_rows == 400
        if len(batches) == 2:  # the step before the cut: its next graph is in the second batch
            assert (stop == cut).any()
        # the prelearner's own sample from rows: value runs that collate to whole batches
        table = from_rows.sample(len(got))
        assert table.num_rows % B == 0 and table.column("steps").to_numpy().max() <= RUN


def test_reward_scale_measured_once_the_same_from_rows_and_episode_files(data) -> None:
    """configure measures IQL's reward scale over the training episodes before training
    (return_range by default): 1 / (max - min) of the episodes' undiscounted returns, hand
    computed here from the decoded episodes; the converted rows of the same episodes give the
    same factor, held-out episodes are left out of it, and the prelearner emits every reward
    times it (the same runs as unscaled, rewards x scale)."""
    from offline_graph.data.episodes.holdout import held_out
    from offline_graph.data.episodes.reader import read_episodes, spec_from_spaces
    from offline_graph.jobs.recording import make_env
    from offline_graph.rllib.offline.reading import choose_reading
    from offline_graph.rllib.core.settings import GraphSettings, read_settings

    env = make_env(ENV)
    spec = spec_from_spaces(env.observation_space, env.action_space)
    items = [i for f in parquet_files(data["episodes"]) for i in pq.read_table(f).column("item").to_pylist()]
    episodes = read_episodes(items, [None] * len(items), spec)
    returns = np.array([float(np.sum(e.rewards, dtype=np.float64)) for e in episodes])
    assert returns.max() > returns.min()  # NextHop-v0 pays -1 per hop: returns differ
    want = 1.0 / (returns.max() - returns.min())
    for path, is_episodes in ((data["episodes"], True), (data["rows"], False)):
        scale = read_settings(iql_config(path, is_episodes), "test").reward_scale
        assert scale["method"] == "return_range" and scale["episodes"] == 12
        assert scale["scale"] == pytest.approx(want, rel=1e-6)
        assert [scale["return_min"], scale["return_max"]] == pytest.approx(
            [returns.min(), returns.max()], rel=1e-6
        )

    kept = ~held_out([e.id for e in episodes], 0.4, 0)
    assert 0 < kept.sum() < 12
    held = iql_config(data["rows"], False, holdout=0.4)
    scale = read_settings(held, "test").reward_scale
    assert scale["episodes"] == int(kept.sum())
    assert scale["scale"] == pytest.approx(1.0 / (returns[kept].max() - returns[kept].min()), rel=1e-6)

    tables = []
    for factor in (1.0, want):
        settings = GraphSettings(value_runs=RUN, seed=0, reward_scale={"scale": factor})
        reading = choose_reading(iql_config(data["episodes"], True), settings, spec)
        for f in parquet_files(data["episodes"]):
            reading.read({"item": np.array(pq.read_table(f).column("item").to_pylist(), dtype=object)})
        tables.append(reading.sample(4 * B))
    plain, scaled = (t.column("rewards").combine_chunks().flatten().to_numpy() for t in tables)
    assert len(plain) > 0 and np.abs(plain).max() > 0
    np.testing.assert_allclose(scaled, plain * np.float32(want), rtol=1e-6)
    assert tables[0].drop_columns(["rewards"]).equals(tables[1].drop_columns(["rewards"]))


def test_reward_scaling_choices_and_refusals(data) -> None:
    """standard: 1 / the std of every training reward; none: 1; an unknown method and a BC
    config asked to scale are ConfigErrors naming what works."""
    from ray.rllib.algorithms.bc import BCConfig

    import offline_graph
    from offline_graph.data.errors import ConfigError
    from offline_graph.data.episodes.reader import read_episodes, spec_from_spaces
    from offline_graph.jobs.recording import make_env
    from offline_graph.rllib.core.settings import read_settings

    env = make_env(ENV)
    spec = spec_from_spaces(env.observation_space, env.action_space)
    items = [i for f in parquet_files(data["episodes"]) for i in pq.read_table(f).column("item").to_pylist()]
    rewards = np.concatenate(
        [np.asarray(e.rewards, np.float64) for e in read_episodes(items, [None] * 12, spec)]
    )
    standard = iql_config(data["episodes"], True, reward_scaling="standard")
    assert read_settings(standard, "test").reward_scale["scale"] == pytest.approx(
        1.0 / rewards.std(), rel=1e-6
    )
    assert read_settings(standard, "test").advantage_norm == "shrink_std"  # IQL actor's default
    none = iql_config(data["episodes"], True, reward_scaling="none", advantage_norm="none")
    assert read_settings(none, "test").reward_scale == {"method": "none", "scale": 1.0}
    assert read_settings(none, "test").advantage_norm == "none"
    with pytest.raises(
        ConfigError, match=r"advantage_norm must be one of 'shrink_std', 'batch_std', 'none' .*found 'max'"
    ):
        iql_config(data["episodes"], True, advantage_norm="max")
    with pytest.raises(ConfigError, match=r"reward_scaling must be one of .*found 'minmax'"):
        iql_config(data["episodes"], True, reward_scaling="minmax")
    bc = (
        BCConfig()
        .environment(observation_space=env.observation_space, action_space=env.action_space)
        .offline_data(input_=[data["episodes"]], input_read_episodes=True)
    )
    with pytest.raises(ConfigError, match=r"configure \(BCConfig\): reward_scaling must be None or 'none'"):
        offline_graph.configure(bc, reward_scaling="return_range")
    with pytest.raises(ConfigError, match=r"configure \(BCConfig\): advantage_norm must be None"):
        offline_graph.configure(bc, advantage_norm="none")
