"""Faults and scale-out on one Ray cluster: a killed prelearner actor, conversion and training
on 2 nodes, determinism, the prelearner pool spread over a 3-node cluster, a Tune grid with
checkpoints and ``Tuner.restore`` on 3 small nodes.

Starting a Ray node (its raylet and Python agents) is a large part of a multi-node test on a
2-CPU machine, so the module starts one ``ray.cluster_utils.Cluster`` (a 1-CPU head) and each
test gives it the nodes it needs (``SharedCluster.nodes``: a node of a wanted size is added,
one no longer wanted removed; 4 node starts in file order, where a cluster per test and a local
Ray for the single-node tests started 10). Each test connects its own driver
(``ray.init(address=...)``) and disconnects at its end, so what one test's job leaves behind
(actors, Ray Data executors) ends with it. The module does not share a Ray fixture with the
rest of the suite.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import math
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from offline_graph.rllib.offline.prelearner import GraphOfflinePreLearner
from tests.helpers import deadline

pytestmark = [pytest.mark.slow, pytest.mark.own_ray]  # conftest.py stops the shared Ray first

ray = pytest.importorskip("ray")
tune = pytest.importorskip("ray.tune")

B = 64  # train_batch_size_per_learner
UPDATES = 2  # dataset_num_iters_per_learner: learner updates per algo.train()
ITERATIONS = 2
EPISODES, EPISODES_PER_FILE = 20, 10


# ---------------------------------------------------------------------------------------------
# The cluster, the data, a config, a checked run


class SharedCluster:
    """A ``Cluster`` with a 1-CPU head whose worker nodes follow :meth:`nodes`."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
        )
        self.workers: list[tuple[int, object]] = []  # (CPUs, node), in the order added

    def nodes(self, *cpus: int) -> None:
        """Worker nodes of ``cpus`` CPUs each beside the 1-CPU head: those of the longest
        common start are kept, the others removed, the missing ones added; returns once the
        connected driver sees exactly these nodes alive."""
        keep = 0
        while keep < min(len(cpus), len(self.workers)) and self.workers[keep][0] == cpus[keep]:
            keep += 1
        for _, node in self.workers[keep:]:
            self.cluster.remove_node(node)
        self.workers = self.workers[:keep]
        for n in cpus[keep:]:
            self.workers.append((n, self.cluster.add_node(num_cpus=n)))
        self.cluster.wait_for_nodes()
        want = sorted([1, *cpus])
        until = time.monotonic() + 60
        while alive_cpus() != want or ray.cluster_resources().get("CPU") != sum(want):
            assert time.monotonic() < until, f"nodes of {want} CPUs must be alive (found {alive_cpus()})"
            time.sleep(0.2)

    @contextlib.contextmanager
    def driver(self):
        """This process connected to the cluster (a job of its own) for the block."""
        ray.init(address=self.cluster.address, log_to_driver=False)
        try:
            yield self
        finally:
            gc.collect()  # finalize the learners' Ray Data iterators while Ray still runs
            ray.shutdown()


def alive_cpus() -> list[int]:
    """The CPUs of each live node, sorted."""
    return sorted(int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"])


@pytest.fixture(scope="module")
def shared_cluster():
    # Cluster() writes /tmp/ray/ray_current_cluster, which makes every plain ray.init() on
    # this machine (other test runs too) connect to it; we connect by address instead.
    mp = pytest.MonkeyPatch()
    mp.setattr(ray._private.utils, "write_ray_address", lambda *a, **k: None)
    shared = SharedCluster()
    try:
        yield shared
    finally:
        shared.cluster.shutdown()
        mp.undo()


@pytest.fixture
def cluster(shared_cluster):
    """The module's cluster with this test's driver connected to it."""
    with shared_cluster.driver() as shared:
        yield shared


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
# 1. Conversion: the same bytes on one node and on two


SMALL_BLOCK = 256 * 1024
"""Ray Data block size of the conversions: the ~2.8 MiB conversion output spans several map
and write tasks (with the default 128 MiB it is one block, one task, one file)."""


def convert_to(data: str, out: str) -> dict:
    """``convert`` of ``data`` into ``out`` with ``SMALL_BLOCK`` blocks; the report."""
    from offline_graph.data.episodes.reader import spec_from_spaces
    from offline_graph.jobs.convert import ConvertConfig, convert

    ctx = ray.data.DataContext.get_current()
    block = ctx.target_max_block_size
    ctx.target_max_block_size = SMALL_BLOCK
    try:
        with deadline(180, "convert()"):
            return convert(
                ConvertConfig(input=data, output=out, spec=spec_from_spaces(*spaces()), episodes_per_batch=4)
            )
    finally:
        ctx.target_max_block_size = block


def file_digests(out: str) -> list[tuple[str, str]]:
    names = sorted(f for f in os.listdir(out) if f.endswith(".parquet"))
    return [(n, hashlib.sha256(open(os.path.join(out, n), "rb").read()).hexdigest()) for n in names]


def read_sorted_rows(out: str) -> pa.Table:
    files = sorted(f for f in os.listdir(out) if f.endswith(".parquet"))
    table = pa.concat_tables([pq.read_table(os.path.join(out, f)) for f in files])
    keys = pa.table({"e": table.column("eps_id").cast(pa.string()), "t": table.column("t")})
    return table.take(pc.sort_indices(keys, [("e", "ascending"), ("t", "ascending")]))


def test_same_data_same_conversion_bytes(shared_cluster, expert_data, tmp_path):
    """The expert data converted on the head alone (1 CPU: one task at a time), then on 2 nodes
    of 1 CPU (2 tasks at once, on either node): the same rows, and the same bytes in the same
    files (the order of the tasks, their number at once and their nodes change nothing)."""
    data, transitions = expert_data
    single_dir, multi_dir = str(tmp_path / "single"), str(tmp_path / "multi")
    with shared_cluster.driver():
        shared_cluster.nodes()
        assert alive_cpus() == [1]
        single = convert_to(data, single_dir)  # several tasks, 1 node
        shared_cluster.nodes(1)
        assert alive_cpus() == [1, 1]
        multi = convert_to(data, multi_dir)  # several tasks, 2 nodes
    assert single["transitions_out"] == multi["transitions_out"] == transitions
    assert multi["episodes_in"] == EPISODES
    rows_single = read_sorted_rows(single_dir)
    rows_multi = read_sorted_rows(multi_dir)
    assert rows_multi.num_rows == transitions
    assert rows_multi.column_names == rows_single.column_names
    for name in rows_single.column_names:
        assert rows_multi.column(name).equals(rows_single.column(name)), name
    assert rows_multi.equals(rows_single)
    digests = file_digests(single_dir)
    assert len(digests) >= 2  # several write tasks, each its own file
    assert all(name.startswith("transitions-") for name, _ in digests)
    assert file_digests(multi_dir) == digests


def test_same_seed_same_first_batch(expert_data):
    import torch

    from offline_graph.rllib.offline.collate_fn import GraphCollateFn

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
# 2. Training on 2 nodes with a prelearner map actor killed during training


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


def test_two_node_training_survives_a_killed_prelearner_actor(cluster, expert_data, tmp_path):
    """BC on 2 nodes of 1 CPU (the small plan) trains ITERATIONS iterations with exact step
    counts, though its prelearner actor died on its first call (one algorithm for both cases:
    its build and first read are most of the test). Around 20 s on the busy 2-CPU machine:
    the prelearner actor's process (torch, RLlib) starts twice, before and after its death."""
    import offline_graph

    data, transitions = expert_data
    cluster.nodes(1)
    assert alive_cpus() == [1, 1]
    assert ray.cluster_resources()["CPU"] == 2.0
    marker = tmp_path / "prelearner_died"
    # num_learners=0: the prelearner actor (0.25 CPU) can take a share of one node only, so the
    # other keeps the whole CPU that Ray Data's ListFiles / ReadFiles tasks need (1 CPU each).
    # With num_learners=1 (learner 0.25 CPU) the two actors can land on different 1-CPU nodes,
    # leaving 0.75 CPU on each: the read never schedules and train() hangs.
    config = make_config(
        data, num_learners=0, prelearner_class=DieOnFirstCall, extra={"test_marker": str(marker)}
    )
    assert config.map_batches_kwargs["num_cpus"] == 0.25  # the small plan
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
# 3. The prelearner pool of a bigger cluster


def test_three_node_cluster_spreads_prelearner_actors(cluster, expert_data):
    """configure sizes the prelearner pool to a 3-node, 6-CPU cluster (one actor per node to
    start, at most 6 - 1 read CPU = 5): the actors run on several nodes (the 4-CPU node alone
    could hold all of them) and training completes. Over 20 s on the busy 2-CPU machine: a node
    of 4 CPUs is started and 3 prelearner actor processes import torch and RLlib."""
    from ray._private import state

    data, _ = expert_data
    cluster.nodes(1, 4)
    assert alive_cpus() == [1, 1, 4]
    config = make_config(data, num_learners=0)
    compute = config.map_batches_kwargs["compute"]
    assert (compute.min_size, compute.max_size, config.map_batches_kwargs["num_cpus"]) == (3, 5, 1.0)
    train_and_check(config, ITERATIONS, UPDATES * B)
    job = ray.get_runtime_context().get_job_id()  # this test's actors, not an earlier test's
    workers = [
        a
        for a in state.actors().values()
        if a["JobID"] == job
        and (
            "GraphOfflinePreLearner" in str(a.get("ActorClassName"))
            or "MapWorker" in str(a.get("ActorClassName"))
        )
    ]
    nodes = {a["Address"]["NodeID"] for a in workers}
    assert len(workers) >= 3 and len(nodes) >= 2, [(a["ActorClassName"], a["State"]) for a in workers]


# ---------------------------------------------------------------------------------------------
# 4. Ray Tune over a configured graph config
#
# ``tune.Tuner(config.algo_class, param_space=config)`` finishes a 2-point ``model_config`` grid
# on a 3-node cluster of 1-CPU nodes (the small-machine plan of a 2-CPU laptop: 0.25-CPU trials
# and prelearner actors), with Tune's checkpoints and ``Tuner.restore``. One test for both cases
# of the issue (2 CPUs, a cluster) to keep CI short; ``tests/test_resources.py`` checks
# ``max_concurrent_trials`` for one 2-CPU node (2 trials at once) by hand.
#
# The trial is bounded twice: ``stop={"training_iteration": ITERATIONS}`` and Tune's
# ``time_budget_s`` (a stalled trial ends the experiment there and fails the iteration
# assertions instead of hanging).

BUDGET_S = 480  # far above an unloaded run; the shared build machine needed ~150 s per trial


def graph_config(hidden=16, **training):
    """A configured BC config on the shipped expert episodes (small module, 2 x 64 per train)."""
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import offline_graph

    config = (
        BCConfig()
        .offline_data(
            input_=["sample_data/expert"], input_read_episodes=True, dataset_num_iters_per_learner=UPDATES
        )
        .training(train_batch_size_per_learner=B, **training)
        .learners(num_learners=0)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=offline_graph.GNNModule),
            model_config={"hidden": hidden, "layers": 1},
        )
    )
    return offline_graph.configure(config)


def check_trained(result) -> None:
    """A trial that ran ITERATIONS train() calls of UPDATES x B transitions, finite loss."""
    assert result.error is None, result.error
    assert result.metrics["training_iteration"] == ITERATIONS
    learners = result.metrics["learners"]
    assert learners["__all_modules__"]["num_env_steps_trained_lifetime"] == ITERATIONS * UPDATES * B
    assert math.isfinite(learners["default_policy"]["policy_loss"])


def test_tuner_grid_on_a_3_node_cluster_of_small_nodes_with_checkpoints_and_restore(cluster, tmp_path):
    """Three 1-CPU nodes: two trials' fractional actors could take a share of every node, so
    max_concurrent_trials runs one trial at a time; both finish, each checkpoint is the trial's
    module, and the finished experiment restores with the same results. Over 20 s on the busy
    2-CPU machine (30 s in the suite's last timing): each trial starts its own Ray worker
    processes (the trial, its prelearner actor, the read tasks), one trial after the other."""
    import offline_graph

    cluster.nodes(1, 1)
    assert alive_cpus() == [1, 1, 1]
    config = graph_config(hidden=tune.grid_search([8, 16]), lr=1e-3)
    # the small plan: 0.25 CPU per trial (process + local learner), one 0.25-CPU actor
    assert (config.num_cpus_for_main_process, config.num_cpus_per_learner) == (0.25, 0.25)
    assert config.map_batches_kwargs["num_cpus"] == 0.25
    assert offline_graph.max_concurrent_trials(config) == 1
    tuner = tune.Tuner(
        config.algo_class,
        param_space=config,
        tune_config=tune.TuneConfig(
            max_concurrent_trials=offline_graph.max_concurrent_trials(config), time_budget_s=BUDGET_S
        ),
        run_config=tune.RunConfig(
            name="grid",
            storage_path=str(tmp_path),
            stop={"training_iteration": ITERATIONS},
            checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True),
            verbose=0,
        ),
    )
    results = tuner.fit()
    assert len(results) == 2 and not results.errors
    losses = {}
    for result in results:
        check_trained(result)
        width = result.config["_model_config"]["hidden"]
        losses[width] = result.metrics["learners"]["default_policy"]["policy_loss"]
        # Tune's checkpoint is RLlib's: the trial's module, with the trial's width
        module = offline_graph.restore_module(result.checkpoint.path)
        assert module.model_config["hidden"] == width
    assert set(losses) == {8, 16}

    experiment = str(tmp_path / "grid")
    assert tune.Tuner.can_restore(experiment)
    restored = tune.Tuner.restore(experiment, trainable=config.algo_class).get_results()
    assert len(restored) == 2
    for result in restored:
        check_trained(result)
        width = result.config["_model_config"]["hidden"]
        assert result.metrics["learners"]["default_policy"]["policy_loss"] == losses[width]
