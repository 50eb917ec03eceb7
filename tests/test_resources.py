"""configure's CPU plan: small machines get fractional requests, clusters an autoscaling pool."""

from __future__ import annotations

import pytest
from ray.data import ActorPoolStrategy
from ray.rllib.algorithms.bc import BCConfig

from offline_graph.rllib.offline.resources import apply_plan, map_actor_limit, plan_resources


@pytest.mark.parametrize(
    ("cpus", "learners", "small", "actors", "per_actor", "per_learner"),
    [
        # 2 CPUs: 2 - 1 read - learners < 2 whole CPUs left -> one 0.25-CPU actor (no stall)
        (2, 0, True, (1, 1), 0.25, None),
        (2, 2, True, (1, 1), 0.25, 0.25),
        # 16 CPUs: 16 - 1 read - 2 learners = 13 whole CPUs for prelearner actors
        (16, 0, False, (1, 15), 1.0, None),
        (16, 2, False, (1, 13), 1.0, 1.0),
        (16, 8, False, (1, 7), 1.0, 1.0),
        (64, 8, False, (1, 55), 1.0, 1.0),
        # 4 CPUs, 2 learners: 4 - 1 - 2 = 1 < 2 -> small
        (4, 2, True, (1, 1), 0.25, 0.25),
    ],
)
def test_plan_by_cluster_size(cpus, learners, small, actors, per_actor, per_learner):
    plan = plan_resources(cpus, learners)
    assert (plan.small, plan.map_actors, plan.map_num_cpus, plan.learner_cpus) == (
        small,
        actors,
        per_actor,
        per_learner,
    )


def test_gpu_learners_and_evaluation_runners_are_counted():
    # GPU learners keep RLlib's CPU setting and take no CPU from the pool here
    assert plan_resources(16, 2, gpu_learners=True).map_actors == (1, 15)
    assert plan_resources(16, 2, gpu_learners=True).learner_cpus is None
    # 2 remote evaluation EnvRunners of 0.25 CPU: 16 - 1 - 2 - 0.5 = 12.5 -> 12 actors
    assert plan_resources(16, 2, runner_cpus=0.5).map_actors == (1, 12)


def test_the_pool_starts_with_one_actor_per_node():
    assert plan_resources(6, 0, nodes=3).map_actors == (3, 5)
    # at most the CPUs left but 1: a Tune trial's process holds 1 CPU beside the first actors
    assert plan_resources(64, 8, nodes=100).map_actors == (54, 55)
    assert plan_resources(4, 0, nodes=4).map_actors == (2, 3)
    # three 1-CPU nodes: 3 - 1 read - 1 trial process leaves 1 whole CPU -> small plan
    assert plan_resources(3, 0, nodes=3).small
    assert plan_resources(2, 0, nodes=2).map_actors == (1, 1)  # small: fractional, one actor


def test_plan_line():
    assert plan_resources(16, 2).line() == (
        "configure: 16 CPUs, 2 learners x 1 CPU; prelearner actors 1..13 x 1 CPU; "
        "1 CPU kept for Ray Data's reads"
    )
    assert (
        plan_resources(2, 0)
        .line()
        .endswith("(small machine: fractional requests, 0.25 CPU per algorithm / Tune trial)")
    )


def test_apply_plan_sets_compute_and_the_user_wins():
    cfg = BCConfig().learners(num_learners=2)
    kwargs = apply_plan(cfg, plan_resources(16, 2))
    assert kwargs["num_cpus"] == 1.0 and kwargs["batch_format"] == "pyarrow"
    assert isinstance(kwargs["compute"], ActorPoolStrategy)
    assert (kwargs["compute"].min_size, kwargs["compute"].max_size) == (1, 13)
    assert "concurrency" not in kwargs and cfg.num_cpus_per_learner == 1.0
    assert map_actor_limit(kwargs, 2) == 13
    # the user's own map settings and learner CPUs are kept
    user = BCConfig().learners(num_learners=2, num_cpus_per_learner=0.5)
    user.offline_data(map_batches_kwargs={"concurrency": 3, "num_cpus": 0.5})
    kwargs = apply_plan(user, plan_resources(16, 2))
    assert (kwargs["concurrency"], kwargs["num_cpus"], "compute" in kwargs) == (3, 0.5, False)
    assert user.num_cpus_per_learner == 0.5
    assert map_actor_limit(kwargs, 2) == 3 and map_actor_limit({}, 4) == 4 and map_actor_limit({}, 0) == 2


def test_small_plan_asks_a_quarter_cpu_for_the_algorithm_process_unless_the_user_chose():
    cfg = BCConfig()
    apply_plan(cfg, plan_resources(2, 0))
    assert cfg.num_cpus_for_main_process == 0.25  # what a Tune trial reserves
    big = BCConfig()
    apply_plan(big, plan_resources(16, 0))
    assert big.num_cpus_for_main_process == 1  # RLlib's default on a bigger machine
    user = BCConfig().resources(num_cpus_for_main_process=2)
    apply_plan(user, plan_resources(2, 0))
    assert user.num_cpus_for_main_process == 2


def test_small_plan_local_learner_shares_the_trial_quarter_cpu():
    # RLlib's trial bundle with a local learner is max(num_cpus_per_learner, main process):
    # "auto" counts as 1 CPU, so the local learner's share is set to 0.25 as well.
    cfg = BCConfig().learners(num_learners=0)
    apply_plan(cfg, plan_resources(2, 0))
    assert cfg.num_cpus_per_learner == 0.25
    big = BCConfig().learners(num_learners=0)
    apply_plan(big, plan_resources(16, 0))
    assert big.num_cpus_per_learner == "auto"


def test_max_concurrent_trials_leaves_the_read_cpu():
    from offline_graph.rllib.offline.resources import max_concurrent_trials, trial_cpus

    cfg = BCConfig().learners(num_learners=0)
    cfg.offline_data(map_batches_kwargs=apply_plan(cfg, plan_resources(2, 0)))
    # 0.25 (process + local learner) + 1 prelearner actor x 0.25 = 0.5 per trial, 2 actors
    assert trial_cpus(cfg) == (0.5, 2)
    assert max_concurrent_trials(cfg, nodes=[2]) == 2  # (2 - 1 read) / 0.5; 2 >= 1 + 2 x 0.5
    assert max_concurrent_trials(cfg, nodes=[1]) == 1  # never 0
    # three 1-CPU nodes: 2 trials' 4 fractional actors could take a share of every node
    assert max_concurrent_trials(cfg, nodes=[1, 1, 1]) == 1
    assert max_concurrent_trials(cfg, nodes=[1, 1, 1, 1, 1]) == 2  # 5 nodes > 4 actors
    big = BCConfig().learners(num_learners=2)
    big.offline_data(map_batches_kwargs=apply_plan(big, plan_resources(16, 2)))
    # 1 (process) + 2 learners x 1 + pool's first actor x 1 = 4 per trial: (16 - 1) / 4
    assert trial_cpus(big) == (4.0, 4)
    assert max_concurrent_trials(big, nodes=[16]) == 3


def test_max_concurrent_trials_counts_remote_offline_evaluation_runners():
    """RLlib puts num_offline_eval_runners x num_cpus_per_offline_eval_runner in each trial's
    bundle; counting them keeps the read CPU whole (2 trials x 0.75 on 2 CPUs left 0.5)."""
    from offline_graph.rllib.env.env_setup import offline_runners, remote_runner_cpus
    from offline_graph.rllib.ope.ope_runner import share_small_machine
    from offline_graph.rllib.offline.resources import max_concurrent_trials, trial_cpus

    cfg = BCConfig().learners(num_learners=0)
    cfg.evaluation(offline_evaluation_interval=1, num_offline_eval_runners=1)
    assert offline_runners(cfg) == (1.0, 1)  # RLlib's 1 CPU before the plan
    cfg.offline_data(map_batches_kwargs=apply_plan(cfg, plan_resources(2, 0, runner_cpus=1.0)))
    share_small_machine(cfg, 0.25)
    # 0.25 (process + local learner) + 1 offline runner x 0.25 + 1 prelearner actor x 0.25
    assert remote_runner_cpus(cfg) == (0.25, 1)
    assert trial_cpus(cfg) == (0.75, 3)
    assert max_concurrent_trials(cfg, nodes=[2]) == 1  # floor((2 - 1) / 0.75)
    assert max_concurrent_trials(cfg, nodes=[4]) == 4  # floor(3 / 0.75); 4 >= 1 + 4 x 0.75
    # RLlib builds the runners without an interval too; a local runner (0) is no actor
    assert offline_runners(BCConfig().evaluation(num_offline_eval_runners=2)) == (2.0, 2)
    assert offline_runners(BCConfig().evaluation(offline_evaluation_interval=1)) == (0.0, 0)
