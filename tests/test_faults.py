"""Faults and scale-out: a killed prelearner actor, a 2-node cluster, determinism.

Every test (or the module's single-node conversion fixture, for two of them) starts and stops
its own Ray session (the cluster test needs a fresh one), so the module does not share a Ray
fixture with the rest of the suite.
"""

from __future__ import annotations

import gc
import hashlib
import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from offline_graph.rllib.prelearner import GraphOfflinePreLearner
from tests.helpers import deadline

pytestmark = [pytest.mark.slow, pytest.mark.own_ray]  # conftest.py stops the shared Ray first

ray = pytest.importorskip("ray")

B = 64  # train_batch_size_per_learner
UPDATES = 2  # dataset_num_iters_per_learner: learner updates per algo.train()
ITERATIONS = 2
EPISODES, EPISODES_PER_FILE = 20, 10


@pytest.fixture(scope="module")
def expert_data(tmp_path_factory) -> tuple[str, int]:
    """(dir, transitions): 20 expert episodes in 2 files, recorded with seed 0."""
    from offline_graph.jobs.recording import plan_jobs, record

    out = str(tmp_path_factory.mktemp("fault_data") / "expert")
    jobs = plan_jobs(
        env="offline_graph/Graph-v0",
        env_config=None,
        policy="expert",
        epsilon=0.0,
        seed=0,
        episodes=EPISODES,
        episodes_per_file=EPISODES_PER_FILE,
        output=out,
    )
    summaries = list(record(jobs, show_progress=False))
    return out, sum(s["transitions"] for s in summaries)


def start_local_ray() -> None:
    assert not ray.is_initialized()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)


def stop_ray() -> None:
    gc.collect()  # finalize the learners' Ray Data iterators while Ray still runs
    ray.shutdown()


SMALL_BLOCK = 256 * 1024
"""Ray Data block size of the conversions: the ~2.8 MiB conversion output spans several map
and write tasks (with the default 128 MiB it is one block, one task, one file)."""


@pytest.fixture
def small_blocks(monkeypatch):
    """``SMALL_BLOCK`` Ray Data blocks for one test."""
    ctx = ray.data.DataContext.get_current()
    monkeypatch.setattr(ctx, "target_max_block_size", SMALL_BLOCK)


@pytest.fixture
def local_ray():
    start_local_ray()
    yield
    stop_ray()


def spaces():
    from offline_graph.env import GraphEnv

    env = GraphEnv()
    return env.observation_space, env.action_space


def make_config(
    data: str,
    *,
    seed: int = 0,
    num_learners: int = 0,
    prelearner_class: type = GraphOfflinePreLearner,
    extra: dict | None = None,
):
    """A configured BC config on ``data`` (episode files); ``extra`` goes into
    ``learner_config_dict`` (it travels with the config to every prelearner actor)."""
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import offline_graph
    from offline_graph import GNNModule

    obs_space, act_space = spaces()
    config = (
        BCConfig()
        .environment(observation_space=obs_space, action_space=act_space)
        .offline_data(
            input_=[data],
            input_read_episodes=True,
            prelearner_class=prelearner_class,
            dataset_num_iters_per_learner=UPDATES,
        )
        .training(train_batch_size_per_learner=B, lr=1e-3)
        .learners(num_learners=num_learners, learner_config_dict=dict(extra or {}))
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={"hidden": 16, "layers": 2})
        )
        .debugging(seed=seed)
    )
    return offline_graph.configure(config, seed=seed)


def train_and_check(config, iterations: int, steps_per_iteration: int) -> list[float]:
    """Build, run ``iterations`` train() calls, check exact env-step counts; policy losses."""
    algo = config.build_algo()
    losses = []
    try:
        lifetime = 0
        for _ in range(iterations):
            with deadline(180, "algo.train()"):
                result = algo.train()
            mod = result["learners"]["default_policy"]
            allm = result["learners"]["__all_modules__"]
            loss = float(mod["policy_loss"])
            assert math.isfinite(loss)
            losses.append(loss)
            assert int(allm["num_env_steps_trained"]) == steps_per_iteration
            assert int(mod["num_module_steps_trained"]) == steps_per_iteration
            lifetime += steps_per_iteration
            assert int(allm["num_env_steps_trained_lifetime"]) == lifetime
    finally:
        algo.stop()
    return losses


# ---------------------------------------------------------------------------------------------
# 1. A prelearner map actor killed during training


class DieOnFirstCall(GraphOfflinePreLearner):
    """Kills its own actor process on its first call, once per run.

    The marker file (``learner_config_dict["test_marker"]``) is written before dying; the
    restarted actor sees it and maps normally.
    """

    def __call__(self, batch):
        marker = self.config.learner_config_dict["test_marker"]
        if not os.path.exists(marker):
            with open(marker, "w") as fh:
                fh.write(str(os.getpid()))
            os._exit(1)
        return super().__call__(batch)


def test_killed_prelearner_actor_does_not_stop_training(local_ray, expert_data, tmp_path):
    import offline_graph

    data, transitions = expert_data
    marker = tmp_path / "prelearner_died"
    config = make_config(data, prelearner_class=DieOnFirstCall, extra={"test_marker": str(marker)})
    # Ray Data restarts a dead map actor and retries its task by default
    # (max_restarts=-1, max_task_retries=-1); configure() must not turn that off.
    assert "max_restarts" not in config.map_batches_kwargs
    assert "max_task_retries" not in config.map_batches_kwargs
    losses = train_and_check(config, ITERATIONS, UPDATES * B)
    assert len(losses) == ITERATIONS
    # The actor really died, and it was not this (the driver) process.
    assert marker.exists()
    assert int(marker.read_text()) != os.getpid()
    # The retried block was counted once: every episode read and used exactly once.
    report = offline_graph.data_report(config)
    assert report["episodes_read"] == report["episodes_used"] == EPISODES
    assert report["transitions_used"] == transitions
    assert report["episodes_rejected"] == 0


# ---------------------------------------------------------------------------------------------
# 3. Determinism: conversion bytes and the first training batch


def convert_to(data: str, out: str) -> dict:
    from offline_graph.jobs.convert import ConvertConfig, convert
    from offline_graph.data.reader import spec_from_spaces

    with deadline(180, "convert()"):
        return convert(
            ConvertConfig(input=data, output=out, spec=spec_from_spaces(*spaces()), episodes_per_batch=4)
        )


def file_digests(out: str) -> list[tuple[str, str]]:
    names = sorted(f for f in os.listdir(out) if f.endswith(".parquet"))
    return [(n, hashlib.sha256(open(os.path.join(out, n), "rb").read()).hexdigest()) for n in names]


def read_sorted_rows(out: str) -> pa.Table:
    files = sorted(f for f in os.listdir(out) if f.endswith(".parquet"))
    table = pa.concat_tables([pq.read_table(os.path.join(out, f)) for f in files])
    keys = pa.table({"e": table.column("eps_id").cast(pa.string()), "t": table.column("t")})
    return table.take(pc.sort_indices(keys, [("e", "ascending"), ("t", "ascending")]))


@pytest.fixture(scope="module")
def single_node_conversions(expert_data, tmp_path_factory) -> tuple[str, str, dict, dict]:
    """(dir a, dir b, report a, report b): the expert data converted twice, one after the
    other, in one fresh local Ray with ``SMALL_BLOCK`` blocks, stopped again before the
    tests go on (the cluster tests start their own). The determinism test checks a against b,
    the 2-node test its conversion against a: one Ray start for both."""
    data, _ = expert_data
    out = tmp_path_factory.mktemp("single_node")
    ctx = ray.data.DataContext.get_current()
    block = ctx.target_max_block_size
    start_local_ray()
    try:
        ctx.target_max_block_size = SMALL_BLOCK
        first = convert_to(data, str(out / "a"))
        second = convert_to(data, str(out / "b"))
    finally:
        ctx.target_max_block_size = block
        stop_ray()
    return str(out / "a"), str(out / "b"), first, second


def test_same_data_same_conversion_bytes(single_node_conversions, expert_data):
    _, transitions = expert_data
    a, b, first, second = single_node_conversions
    assert first["transitions_out"] == second["transitions_out"] == transitions
    digests = file_digests(a)
    assert len(digests) >= 2  # several write tasks, each its own file
    assert all(name.startswith("transitions-") for name, _ in digests)
    rows = read_sorted_rows(a)
    assert rows.num_rows == transitions
    assert digests == file_digests(b)


def test_same_seed_same_first_batch(expert_data):
    import torch

    from offline_graph.rllib.collate_fn import GraphCollateFn

    data, _ = expert_data
    first_file = sorted(os.path.join(data, f) for f in os.listdir(data))[0]
    items = pq.read_table(first_file).column("item").to_pylist()
    batch = {"item": np.array(items, dtype=object), "path": np.array([first_file] * len(items), dtype=object)}

    def first_table(seed: int) -> pa.Table:
        pre = GraphOfflinePreLearner(config=make_config(data, seed=seed), spaces=spaces())
        assert pre.settings.seed == seed
        return pre(dict(batch))

    a, b, other = first_table(7), first_table(7), first_table(8)
    # 10 episodes, 241 transitions: round(241 / 64) = 4 batches of exactly B rows.
    assert a.num_rows == b.num_rows == 4 * B
    assert a.column_names[0] == "actions"
    assert a.equals(b)
    assert other.num_rows == a.num_rows and not other.equals(a)

    ca, cb = GraphCollateFn()(a), GraphCollateFn()(b)
    assert list(ca) == list(cb)
    assert "default_policy/obs/x" in ca and "default_policy/obs/batch" in ca
    for key in ca:
        assert ca[key].dtype == cb[key].dtype, key
        assert torch.equal(ca[key], cb[key]), key
    co = GraphCollateFn()(other)
    assert list(co) == list(ca)
    assert any(co[k].shape != ca[k].shape or not torch.equal(co[k], ca[k]) for k in ca)


# ---------------------------------------------------------------------------------------------
# 2. A 2-node Ray cluster (last: it starts its own cluster after a single-node run)


def test_two_node_cluster_conversion_and_training(
    expert_data, single_node_conversions, small_blocks, tmp_path, monkeypatch
):
    from ray.cluster_utils import Cluster

    data, transitions = expert_data
    single_dir, _, single, _ = single_node_conversions  # the single-node reference conversion
    assert single["transitions_out"] == transitions

    # Cluster() writes /tmp/ray/ray_current_cluster, which makes every plain ray.init() on
    # this machine (other test runs too) connect to it; we connect by address instead.
    monkeypatch.setattr(ray._private.utils, "write_ray_address", lambda *a, **k: None)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            alive = [n for n in ray.nodes() if n["Alive"]]
            assert len(alive) == 2
            assert ray.cluster_resources()["CPU"] == 2.0

            multi = convert_to(data, str(tmp_path / "multi"))  # several tasks, 2 nodes
            assert multi["transitions_out"] == transitions
            assert multi["episodes_in"] == EPISODES
            rows_single = read_sorted_rows(single_dir)
            rows_multi = read_sorted_rows(str(tmp_path / "multi"))
            assert rows_multi.num_rows == transitions
            assert rows_multi.column_names == rows_single.column_names
            for name in rows_single.column_names:
                assert rows_multi.column(name).equals(rows_single.column(name)), name
            assert rows_multi.equals(rows_single)

            # num_learners=0: the prelearner actor (0.25 CPU) can take a share of one node
            # only, so the other keeps the whole CPU that Ray Data's ListFiles / ReadFiles
            # tasks need (1 CPU each). With num_learners=1 (learner 0.25 CPU) the two actors
            # can land on different 1-CPU nodes, leaving 0.75 CPU on each: the read never
            # schedules and train() hangs.
            config = make_config(data, num_learners=0)
            train_and_check(config, ITERATIONS, UPDATES * B)
        finally:
            stop_ray()
    finally:
        cluster.shutdown()


@pytest.mark.slow
def test_three_node_cluster_spreads_prelearner_actors(expert_data, tmp_path, monkeypatch):
    """configure sizes the prelearner pool to a 3-node, 6-CPU cluster (one actor per node to
    start, at most 6 - 1 read CPU = 5): the actors run on several nodes and training completes."""
    import ray
    from ray._private import state
    from ray.cluster_utils import Cluster

    data, _ = expert_data
    monkeypatch.setattr(ray._private.utils, "write_ray_address", lambda *a, **k: None)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            assert len([n for n in ray.nodes() if n["Alive"]]) == 3
            config = make_config(data, num_learners=0)
            compute = config.map_batches_kwargs["compute"]
            assert (compute.min_size, compute.max_size, config.map_batches_kwargs["num_cpus"]) == (3, 5, 1.0)
            train_and_check(config, ITERATIONS, UPDATES * B)
            workers = [
                a
                for a in state.actors().values()
                if "GraphOfflinePreLearner" in str(a.get("ActorClassName"))
                or "MapWorker" in str(a.get("ActorClassName"))
            ]
            nodes = {a["Address"]["NodeID"] for a in workers}
            assert len(workers) >= 3 and len(nodes) >= 2, [(a["ActorClassName"], a["State"]) for a in workers]
        finally:
            stop_ray()
    finally:
        cluster.shutdown()
