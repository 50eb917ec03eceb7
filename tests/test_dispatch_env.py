"""Dispatch-v0 (:mod:`offline_graph.env.typed.dispatch`): a typed graph of jobs and machines. A
hand-computed state (the ready job of the largest value pays, the best-value job that fits no
idle machine does not), observations that fit the TypedGraph space, episode length, the
expert's exact return, config and policy-name errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.typed import TypedGraph, typed_observation
from offline_graph.env import DISPATCH_ID, DispatchEnv
from offline_graph.env.typed.dispatch import FITS, SERVES, best_job, dispatch_expert, ready_jobs

# Jobs [value, size]: job 0 has the largest value but fits only busy machines 0 and 2.
JOBS = np.array([[0.9, 0.1], [0.5, 0.8], [0.7, 0.3], [0.2, 0.6]], np.float32)
# Machines [idle, speed]: only machine 1 is idle.
MACHINES = np.array([[0.0, 0.5], [1.0, 0.1], [0.0, 0.9]], np.float32)
# (job, machine) pairs: 0->0, 0->2, 1->1, 2->0, 3->1, 3->2. Ready: jobs 1 and 3 (fit machine 1).
FIT_PAIRS = np.array([[0, 0, 1, 2, 3, 3], [0, 2, 1, 0, 1, 2]])
SETUP = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])


def hand_state(env: DispatchEnv) -> dict:
    return env.show(env.state_observation(JOBS, MACHINES, FIT_PAIRS, SETUP))


def test_the_ready_job_of_the_largest_value_pays_and_the_best_value_job_does_not():
    env = DispatchEnv(length=4)
    env.reset(seed=0)
    obs = hand_state(env)
    assert ready_jobs(obs).tolist() == [False, True, False, True]
    assert best_job(obs) == 1  # value 0.5 beats job 3's 0.2; job 0 (0.9) and job 2 (0.7) are not ready
    assert obs["edge_index"][SERVES].tolist() == FIT_PAIRS[::-1].tolist()
    assert obs["edge_attr"][FITS].shape == (6, 1) and obs["action_mask"].tolist() == [True] * 4
    assert dispatch_expert()(obs, {}) == 1
    # the expert reads recorded observations whose edge types are (src, relation, dst) tuples
    tupled = {**obs, "edge_index": {tuple(k.split("__")): v for k, v in obs["edge_index"].items()}}
    assert best_job(tupled) == 1
    assert env.step(1)[1] == 1.0
    hand_state(env)
    assert env.step(0)[1] == 0.0  # the largest value, but it fits no idle machine
    hand_state(env)
    assert env.step(3)[1] == 0.0  # ready, but job 1 is worth more
    hand_state(env)
    _, reward, terminated, truncated, info = env.step(99)
    assert (reward, terminated, truncated, info) == (0.0, True, False, {"illegal": True})


def test_observations_fit_the_typed_graph_space():
    env = gym.make(DISPATCH_ID)
    space = env.observation_space
    assert isinstance(space, TypedGraph)
    assert space.text() == "typed:job=2,machine=2|job__fits__machine=1,machine__serves__job"
    assert env.action_space.max_nodes == 8 and env.action_space.node_type == "job"
    obs, _ = env.reset(seed=3)
    for _ in range(20):
        typed = typed_observation(obs, space)
        assert space.contains(obs)
        jobs, machines = len(typed["x"]["job"]), len(typed["x"]["machine"])
        assert 3 <= jobs <= 8 and 2 <= machines <= 4
        assert obs["action_mask"].dtype == bool and obs["action_mask"].tolist() == [True] * jobs
        assert typed["x"]["machine"][:, 0].max() == 1.0  # a machine is idle
        assert set(typed["edge_index"][FITS][0].tolist()) == set(range(jobs))  # every job fits one
        assert ready_jobs(obs).any()
        obs = env.step(0)[0]


def test_a_seeded_reset_repeats_and_the_best_value_job_is_ready_a_third_to_a_half_of_the_time():
    a, b = DispatchEnv(), DispatchEnv()
    first, second = a.reset(seed=7)[0], b.reset(seed=7)[0]
    assert all(np.array_equal(first["x"][t], second["x"][t]) for t in ("job", "machine"))
    top_ready = []
    for _ in range(2000):
        obs = a.step(0)[0]
        top_ready.append(ready_jobs(obs)[np.argmax(obs["x"]["job"][:, 0])])
    assert 0.33 <= np.mean(top_ready) <= 0.5


@pytest.mark.parametrize("length", [1, 5, 8])
def test_the_expert_gets_exactly_length_and_the_last_step_terminates(length):
    env = gym.make(DISPATCH_ID, length=length)
    for seed in range(3):
        expert = env.unwrapped.make_policy("expert", 0.0, np.random.default_rng(seed))
        obs, info = env.reset(seed=seed)
        total, steps, done = 0.0, 0, False
        while not done:
            obs, reward, done, truncated, info = env.step(expert(obs, info))
            total, steps = total + reward, steps + 1
            assert not truncated and not info["illegal"]
        assert (total, steps) == (float(length), length)


def test_random_and_noisy_policies():
    env = DispatchEnv(length=8)
    rng = np.random.default_rng(0)
    totals = []
    for name, eps in (("random", 0.0), ("expert", 0.5)):
        policy = env.make_policy(name, eps, rng)
        obs, _ = env.reset(seed=1)
        total, done = 0.0, False
        for _ in range(8):
            obs, reward, done, _, _ = env.step(policy(obs, {}))
            total += reward
        assert done
        totals.append(total)
    assert all(t < 8 for t in totals)
    with pytest.raises(
        ConfigError, match=r"Dispatch-v0 policy: name must be one of \['expert', 'random'\] \(found 'mixed'\)"
    ):
        env.make_policy("mixed", 0.1, rng)
    with pytest.raises(ConfigError, match=r"Dispatch-v0 policy: epsilon must be in \[0, 1\] \(found 1.5\)"):
        env.make_policy("expert", 1.5, rng)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"min_jobs": 0}, "DispatchConfig: min_jobs must be >= 1 (found 0). A job is the action."),
        ({"min_jobs": 5, "max_jobs": 4}, "DispatchConfig: max_jobs must be >= min_jobs=5 (found 4)."),
        ({"min_machines": 0}, "DispatchConfig: min_machines must be >= 1 (found 0)."),
        ({"max_machines": 1}, "DispatchConfig: max_machines must be >= min_machines=2 (found 1)."),
        ({"idle_probability": 1.5}, "DispatchConfig: idle_probability must be in [0, 1] (found 1.5)."),
        ({"fit_probability": -0.1}, "DispatchConfig: fit_probability must be in [0, 1] (found -0.1)."),
        ({"length": 0}, "DispatchConfig: length must be >= 1 (found 0). It counts the steps"),
    ],
)
def test_config_errors(overrides, message):
    with pytest.raises(ConfigError) as err:
        DispatchEnv(**overrides)
    assert str(err.value).startswith(message)


def test_the_experiment_rows_differ_only_in_the_node_types_and_targets_by_hand(capsys):
    """``--task dispatch``: the jobs-only rows train the same algorithm on the same data with
    ``model_config["node_types"] = ["job"]`` (``offline-graph train --node-types job``)."""
    import dataclasses

    from offline_graph.cli import experiment
    from offline_graph.cli.experiments import dispatch, runs, task_of
    from offline_graph.cli.train_config import algo_config

    task, cfg = task_of("dispatch"), dispatch.Config(output="out")
    bc, iql, bc_jobs, iql_jobs = (runs.train_config(task, cfg, row, "logs", 1) for row in dispatch.ROWS)
    assert (bc.env, bc.node_types, bc_jobs.node_types, iql_jobs.algo) == (DISPATCH_ID, None, ["job"], "iql")
    assert dataclasses.replace(bc_jobs, node_types=None, checkpoint=bc.checkpoint) == bc
    assert dataclasses.replace(iql_jobs, node_types=None, checkpoint=iql.checkpoint) == iql
    assert "node_types" not in algo_config(bc)[1]
    assert algo_config(bc_jobs)[1]["node_types"] == ["job"]
    assert [r.label for r in dispatch.ROWS] == [
        "BC, GNN",
        "IQL, GNN",
        "BC, GNN, job nodes only",
        "IQL, GNN, job nodes only",
    ]
    logs = dispatch.TASK.data(cfg)["logs"]
    assert (logs.policy, logs.epsilon, logs.episodes, logs.seed) == ("expert", 0.2, 300, 0)
    st = {"mean": 0.0, "min": 0.0, "std": 0.0, "scores": [0.0]}
    stats = {"bc": {**st, "mean": 70.0}, "bc-jobs-only": {**st, "mean": 25.0}}
    stats |= {"iql": {**st, "mean": 50.0}, "iql-jobs-only": {**st, "mean": 25.0}}
    got = [(t["what"], t["value"], t["holds"]) for t in dispatch.targets(stats, {})]
    assert got == [
        ("bc - bc-jobs-only: mean >= 30", 45.0, True),
        ("iql - iql-jobs-only: mean >= 30", 25.0, False),
    ]
    name, quick = experiment.parse_args(
        ["--task", "dispatch", "--output", "x", "--quick", "--rows", "bc-jobs-only"]
    )
    assert (name, quick.seeds, quick.iterations, quick.rows) == ("dispatch", 1, 1, ["bc-jobs-only"])
    with pytest.raises(SystemExit) as info:
        experiment.main(["--task", "dispatch", "--help"])
    assert info.value.code == 0 and "Dispatch-v0" in capsys.readouterr().out
