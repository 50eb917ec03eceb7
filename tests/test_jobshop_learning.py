"""The job-shop learning path of issue 41, tiny (``offline-graph experiment --task jobshop --quick``):
CP-SAT and noisy-expert logs of 6x6 instances recorded through the recording job, BC trained
through ``offline_graph.configure``, greedy masked rollouts on held-out generated instances and
on ta01. Checked by hand here: every schedule the trained policy produced is feasible (job
order, one operation at a time per machine) with the makespan it reports, and it is shorter on
average than the random policy's on the same instances, computed here."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("ortools")


def _check_schedule(durations: np.ndarray, machines: np.ndarray, starts: np.ndarray) -> int:
    """Feasibility by hand; returns the makespan."""
    ends = starts + durations
    assert (starts >= 0).all()
    assert (starts[:, 1:] >= ends[:, :-1]).all(), "a job's operation started before its predecessor ended"
    for m in range(machines.shape[1]):
        on = np.argwhere(machines == m)
        spans = sorted((starts[j, k], ends[j, k]) for j, k in on)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), f"overlap on {m}"
    return int(ends.max())


def _random_makespans(durations: np.ndarray, machines: np.ndarray, seeds: range) -> list[int]:
    from offline_graph.env.jobshop import JobShopEnv

    env = JobShopEnv(durations=durations.tolist(), machines=machines.tolist(), max_nodes=durations.size)
    spans = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        _, info = env.reset()
        done = False
        while not done:
            action = int(rng.choice(np.flatnonzero(info["action_mask"])))
            _, _, done, _, info = env.step(action)
        spans.append(int(info["makespan"]))
    return spans


def test_quick_jobshop_learning(tmp_path):
    from offline_graph.cli import experiment

    out = tmp_path / "result.json"
    assert experiment.main(["--task", "jobshop", "--quick", "--output", str(out)]) == 0
    result = json.loads(out.read_text())

    expert, noisy = result["logs"]
    assert (expert["policy"], noisy["policy"]) == ("expert", "mixed")
    assert expert["episodes"] == noisy["episodes"] == 20
    assert expert["transitions"] == noisy["transitions"] == 20 * 36  # one dispatch per operation
    assert expert["solves"] == 20 and expert["solver_seconds"] > 0
    assert expert["mean_return"] > noisy["mean_return"]  # the noise costs makespan

    (run,) = result["runs"]
    assert run["algo"] == "bc" and len(run["losses"]) == 5
    gen = run["generated"]
    random_means = []
    for (d, m), starts, span in zip(gen["instances"], gen["start_times"], gen["makespans"]):
        d, m = np.asarray(d), np.asarray(m)
        assert _check_schedule(d, m, np.asarray(starts)) == span
        assert span >= max(d.sum(axis=1).max(), max(d[m == k].sum() for k in range(6)))
        random_means.append(np.mean(_random_makespans(d, m, range(10))))
    assert np.mean(gen["makespans"]) < np.mean(random_means)

    ta01 = run["taillard"]["15x15"]
    assert ta01["instances"] == ["ta01"] and ta01["illegal"] == 0
    assert ta01["upper_bounds"] == [1231]
    assert ta01["mean_gap"] == pytest.approx((ta01["makespans"][0] - 1231) / 1231)
    assert run["inference_seconds_per_instance"] > 0
    assert result["summary"]["bc+x"]["15x15"]["mean"] == pytest.approx(100 * ta01["mean_gap"])
    assert result["rules"]["mwkr"]["15x15"]["makespans"][0] > 1231
    assert "| 15x15 |" in result["table"] and "26.0%" in result["table"]

    from offline_graph.env.jobshop_instances import taillard_instance

    schedule = run["schedule"]  # the Gantt chart's: ta01's, checked by hand
    assert schedule["instance"] == "ta01" and schedule["makespan"] == ta01["makespans"][0]
    assert (
        _check_schedule(*taillard_instance("ta01"), np.asarray(schedule["start_times"]))
        == schedule["makespan"]
    )
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["jobshop_gantt.png", "jobshop_gaps.png"]

    from offline_graph.bench.jobshop import validation_instances

    # the selection set: 2 held-out generated 8x6 instances, bounds and ratios recomputed here
    val = run["validation"]["sizes"]
    assert list(val) == ["8x6"] and len(val["8x6"]["makespans"]) == 2
    for (d, m), bound, span in zip(
        validation_instances([(8, 6)], 2)["8x6"], val["8x6"]["lower_bounds"], val["8x6"]["makespans"]
    ):
        assert bound == max(d.sum(axis=1).max(), max(d[m == k].sum() for k in range(6))) <= span
    ratio = np.mean(np.divide(val["8x6"]["makespans"], val["8x6"]["lower_bounds"]))
    assert run["validation"]["score"] == pytest.approx(ratio) and ratio >= 1.0
    sel = result["selected"]
    assert (sel["label"], sel["seed"], sel["compared"], sel["sizes"]) == ("bc+x", 0, 1, ["8x6"])
    assert sel["taillard"]["15x15"] == pytest.approx(100 * ta01["mean_gap"])
    assert result["validation"]["rules"]["mwkr"]["score"] >= 1.0
    assert "Selected: bc+x seed 0" in result["table"] and "| selected: BC+X seed 0 |" in result["table"]


def _scored(algo, seed, score, sizes=("20x20",), gap=0.3):
    return {
        "algo": algo,
        "seed": seed,
        "validation": {"sizes": {s: {"makespans": [1, 1]} for s in sizes}, "score": score},
        "taillard": {"15x15": {"mean_gap": gap}},
    }


def test_selected_is_the_lowest_validation_score_of_the_common_set():
    """The selected run is the lowest score among runs validated on the same set (the set most
    runs share); a run scored on another set, even lower, and an unscored run are not picked."""
    from offline_graph.bench.experiments.jobshop_report import selected

    runs = [
        _scored("bc", 0, 1.30),
        _scored("cql", 1, 1.21, gap=0.19),
        _scored("cql", 2, 1.25),
        _scored("iql", 0, 1.01, sizes=("50x20",)),
        {"algo": "marwil", "seed": 0, "taillard": {}},
    ]
    sel = selected({"runs": runs})
    assert (sel["run"], sel["label"], sel["seed"], sel["compared"]) == (1, "cql", 1, 3)
    assert sel["taillard"] == {"15x15": pytest.approx(19.0)} and sel["instances"] == 2
    assert selected({"runs": runs[4:]}) is None


def test_extra_features_are_the_left_shift_starts():
    """JobShopConfig(extra_features=True): column 7 of a candidate is the start the env gives
    it when dispatched, column 8 its slack over the earliest candidate; the 7 base columns and
    the schedule are those of the env without them."""
    from offline_graph.env.jobshop import JobShopEnv

    plain, extra = JobShopEnv(n_jobs=5, n_machines=4), JobShopEnv(n_jobs=5, n_machines=4, extra_features=True)
    rng = np.random.default_rng(0)
    for seed in range(5):
        obs_p, info = plain.reset(seed=seed)
        obs_x, _ = extra.reset(seed=seed)
        done = False
        while not done:
            x = obs_x.nodes
            assert x.shape == (20, 9) and np.array_equal(x[:, :7], obs_p.nodes)
            cand = np.flatnonzero(info["action_mask"])
            assert (
                np.allclose(x[cand, 8], x[cand, 7] - x[cand, 7].min())
                and (x[~info["action_mask"], 8] == 0).all()
            )
            a = int(rng.choice(cand))
            obs_p, _, done, _, info = plain.step(a)
            obs_x, *_ = extra.step(a)
            assert extra.start_times.reshape(-1)[a] == round(float(x[a, 7]) * 1000)
        assert np.array_equal(plain.start_times, extra.start_times)


def test_rules_alone_plot_the_gaps_and_no_gantt_chart(tmp_path):
    """A results file of the rules alone (no trained run) draws the gap figure only; merged
    with a file of trained runs, the rules' validation scores come along."""
    from offline_graph.bench.experiments.jobshop_report import GAPS_PNG, _merged_validation, save_plots

    rules = {"mwkr": {"15x15": {"mean_gap": 0.27}}}
    result = {"groups": ["15x15"], "summary": {}, "rules": rules, "runs": [], "selected": None}
    assert save_plots(result, str(tmp_path)) == [str(tmp_path / GAPS_PNG)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [GAPS_PNG]
    trained = {"validation": {"sizes": ["8x6"], "instances": 2, "rules": {}}}
    alone = {"validation": {"sizes": ["8x6"], "instances": 2, "rules": {"mwkr": {"score": 1.4}}}}
    other = {"validation": {"sizes": ["9x6"], "instances": 2, "rules": {"spt": {"score": 1.9}}}}
    merged = _merged_validation([trained, alone, other])
    assert merged["sizes"] == ["8x6"] and merged["rules"] == {"mwkr": {"score": 1.4}}
