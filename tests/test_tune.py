"""Ray Tune over a configured graph config: ``tune.Tuner(config.algo_class, param_space=config)``
finishes a 2-point ``model_config`` grid on a 3-node cluster of 1-CPU nodes (the small-machine
plan of a 2-CPU laptop: 0.25-CPU trials and prelearner actors), with Tune's checkpoints and
``Tuner.restore``. One test for both cases of the issue (2 CPUs, a cluster) to keep CI short;
``tests/test_resources.py`` checks ``max_concurrent_trials`` for one 2-CPU node (2 trials at
once) by hand.

The trial is bounded twice: ``stop={"training_iteration": 2}`` and Tune's ``time_budget_s`` (a
stalled trial ends the experiment there and fails the iteration assertions instead of hanging).
"""

from __future__ import annotations

import gc
import math

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.own_ray]  # a Ray cluster; conftest.py stops the shared Ray

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


def test_tuner_grid_on_a_3_node_cluster_of_small_nodes_with_checkpoints_and_restore(tmp_path, monkeypatch):
    """Three 1-CPU nodes: two trials' fractional actors could take a share of every node, so
    max_concurrent_trials runs one trial at a time; both finish, each checkpoint is the trial's
    module, and the finished experiment restores with the same results."""
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
        finally:
            stop_ray()
    finally:
        cluster.shutdown()
