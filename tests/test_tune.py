"""Ray Tune over configured graph configs: ``tune.Tuner(config.algo_class, param_space=config)``
and ``tune.run`` finish a 2-point grid on 2 CPUs and on a 3-node cluster of small nodes, with
Tune's checkpoints and ``Tuner.restore``.

Each test starts and stops its own Ray (the cluster test needs a fresh one). Every trial is
bounded twice: ``stop={"training_iteration": 2}`` and Tune's ``time_budget_s`` (a stalled
trial ends the experiment there and fails the iteration assertions instead of hanging).
"""

from __future__ import annotations

import gc
import math

import pytest

pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")
tune = pytest.importorskip("ray.tune")

B, UPDATES, ITERATIONS = 64, 2, 2
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


def stop_ray() -> None:
    gc.collect()
    ray.shutdown()


def test_tuner_grid_on_2_cpus_with_checkpoints_and_restore(tmp_path):
    """The issue's case: 2 CPUs, 2 trials at once (a model_config grid), each checkpointed; the
    finished experiment restores with the same results."""
    import offline_graph

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        config = graph_config(hidden=tune.grid_search([8, 16]), lr=1e-3)
        # 0.25 CPU per trial (process + local learner) + one 0.25-CPU prelearner actor
        assert (config.num_cpus_for_main_process, config.num_cpus_per_learner) == (0.25, 0.25)
        assert offline_graph.max_concurrent_trials(config) == 2
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
        hidden = set()
        for result in results:
            check_trained(result)
            width = result.config["_model_config"]["hidden"]
            hidden.add(width)
            # Tune's checkpoint is RLlib's: the trial's module, with the trial's width
            module = offline_graph.restore_module(result.checkpoint.path)
            assert module.model_config["hidden"] == width
        assert hidden == {8, 16}

        experiment = str(tmp_path / "grid")
        assert tune.Tuner.can_restore(experiment)
        restored = tune.Tuner.restore(experiment, trainable=config.algo_class).get_results()
        losses = {
            r.config["_model_config"]["hidden"]: r.metrics["learners"]["default_policy"]["policy_loss"]
            for r in results
        }
        assert len(restored) == 2
        for result in restored:
            check_trained(result)
            assert result.metrics["learners"]["default_policy"]["policy_loss"] == pytest.approx(
                losses[result.config["_model_config"]["hidden"]], abs=0.0
            )
    finally:
        stop_ray()


def test_tune_run_lr_grid_on_a_3_node_cluster_of_small_nodes(tmp_path, monkeypatch):
    """tune.run, a 2-point lr grid, three 1-CPU nodes: the trials' fractional actors could take
    a share of every node, so max_concurrent_trials runs one trial at a time; both finish."""
    from ray.cluster_utils import Cluster

    import offline_graph

    # Cluster() writes /tmp/ray/ray_current_cluster, which makes every plain ray.init() on this
    # machine (other test runs too) connect to it; we connect by address instead.
    monkeypatch.setattr(ray._private.utils, "write_ray_address", lambda *a, **k: None)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            assert len([n for n in ray.nodes() if n["Alive"]]) == 3
            config = graph_config(lr=tune.grid_search([1e-3, 1e-4]))
            assert config.map_batches_kwargs["num_cpus"] == 0.25  # small machine plan
            assert offline_graph.max_concurrent_trials(config) == 1
            analysis = tune.run(
                config.algo_class,
                config=config,
                stop={"training_iteration": ITERATIONS},
                max_concurrent_trials=offline_graph.max_concurrent_trials(config),
                time_budget_s=BUDGET_S,
                storage_path=str(tmp_path),
                name="cluster",
                verbose=0,
            )
            assert len(analysis.trials) == 2
            assert sorted(t.config["lr"] for t in analysis.trials) == [1e-4, 1e-3]
            for trial in analysis.trials:
                assert trial.status == "TERMINATED", trial.status
                assert trial.last_result["training_iteration"] == ITERATIONS
                steps = trial.last_result["learners"]["__all_modules__"]["num_env_steps_trained_lifetime"]
                assert steps == ITERATIONS * UPDATES * B
        finally:
            stop_ray()
    finally:
        cluster.shutdown()
