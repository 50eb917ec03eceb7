"""Memory modules through the whole path: recorded Recall-v0 episodes -> run rows -> learner
batches -> BC / MARWIL with 0 and 2 learners (the GRU on 2) -> step-by-step evaluation."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.algorithms.marwil import MARWILConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

import offline_graph
from offline_graph.env.recall import RecallEnv
from offline_graph.jobs.recording import plan_jobs, record
from offline_graph.rllib.offline.collate_fn import GraphCollateFn
from offline_graph.rllib.offline.prelearner import GraphOfflinePreLearner
from tests.helpers import map_in_this_process


@pytest.fixture(scope="module")
def recall_data(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("recall") / "expert")
    jobs = plan_jobs(
        env="offline_graph/Recall-v0",
        env_config=None,
        policy="expert",
        epsilon=0.0,
        seed=0,
        episodes=40,
        episodes_per_file=40,
        output=out,
    )
    list(record(jobs, show_progress=False))
    return out


def _config(
    data: str, model_config: dict, algo=BCConfig, learners: int = 0, batch: int = 8, episodes: bool = True
):
    env = RecallEnv()
    config = (
        algo()
        .environment(observation_space=env.observation_space, action_space=env.action_space)
        .offline_data(input_=[data], input_read_episodes=episodes, prelearner_class=GraphOfflinePreLearner)
        .training(train_batch_size_per_learner=batch)
        .learners(num_learners=learners)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=offline_graph.GNNModule, model_config=model_config)
        )
    )
    return offline_graph.configure(config)


def _rows(data: str) -> dict:
    table = pq.read_table(data)
    return {"item": np.array(table.column("item").to_pylist(), dtype=object)}


def test_frame_stack_rows_are_runs_within_episodes(ray_session, recall_data) -> None:
    config = _config(recall_data, {"frame_stack": 4, "max_seq_len": 2})
    pre = GraphOfflinePreLearner(config=config)
    table = pre(_rows(recall_data))
    steps = [len(a) for a in table.column("actions").to_pylist()]
    context = table.column("context").to_pylist()
    # chunks of max_seq_len=2 trained steps plus up to frame_stack-1=3 earlier steps
    assert all(1 <= s - c <= 2 and 0 <= c <= 3 for s, c in zip(steps, context))
    assert table.num_rows % 8 == 0  # k * B runs
    batch = GraphCollateFn()(table)
    obs_ptr = batch["default_policy/obs/ptr"].numpy()
    assert len(obs_ptr) - 1 == sum(steps)  # each step's graph once
    assert batch["default_policy/actions"].shape[0] == sum(s - c for s, c in zip(steps, context))


@pytest.mark.parametrize(
    "model_config,algo,learners",
    [
        ({"memory": "gru", "max_seq_len": 6}, MARWILConfig, 2),
        ({"memory": "node_gru", "max_seq_len": 6}, BCConfig, 0),
        ({"frame_stack": 3, "max_seq_len": 4}, MARWILConfig, 0),
    ],
)
def test_memory_modules_train_and_act_step_by_step(
    ray_session, recall_data, model_config, algo, learners
) -> None:
    """One build per memory kind. The recurrent "gru" module (state carried across a run's
    steps, MARWIL's value head too) trains on 2 DDP learners, all of it RLlib's: Ray Data reads
    the episode files, maps them to runs through the prelearner in an actor and splits the
    runs between the learners. "node_gru" with BC and "frame_stack" with MARWIL train on a
    local learner; their runs are mapped by the same prelearner in this process
    (``map_in_this_process``: the map actor, a process importing RLlib, is the same for every
    kind). Over 20 s for "gru": its 2 remote learner actors (~15 s on a 2-CPU machine)."""
    config = _config(recall_data, model_config, algo=algo, learners=learners)  # MARWIL: beta 1.0
    algo_obj = config.build_algo()
    try:
        if not learners:  # "gru" keeps RLlib's map actor
            map_in_this_process(algo_obj)
        result = algo_obj.train()
        assert np.isfinite(float(result["learners"]["default_policy"]["policy_loss"]))
        module = algo_obj.get_module()
        assert module.is_stateful()
        res = offline_graph.evaluate_module(module, env="offline_graph/Recall-v0", episodes=6, num_envs=3)
        assert res["episodes"] == 6 and len(res["returns"]) == 6
        assert set(res["returns"]) <= {0.0, 1.0}  # Recall-v0 pays 1 or 0 per episode
    finally:
        algo_obj.stop()


def test_converted_rows_give_the_same_runs(ray_session, recall_data, tmp_path) -> None:
    """No re-recording: converted rows (eps_id, t) rebuild the episodes' runs."""
    from offline_graph.data.episodes.reader import spec_from_spaces
    from offline_graph.jobs.convert import ConvertConfig, convert

    env = RecallEnv()
    out = str(tmp_path / "rows")
    convert(
        ConvertConfig(
            input=recall_data, output=out, spec=spec_from_spaces(env.observation_space, env.action_space)
        )
    )
    rows = pq.read_table(out)
    config = _config(out, {"memory": "gru", "max_seq_len": 3, "burn_in": 2}, episodes=False)
    pre = GraphOfflinePreLearner(config=config)
    table = pre(rows)
    steps = [len(a) for a in table.column("actions").to_pylist()]
    context = table.column("context").to_pylist()
    assert all(1 <= s - c <= 3 and 0 <= c <= 2 for s, c in zip(steps, context))
    # Recall-v0 episodes have 3..6 steps: a chunk after the first (t >= 3) has burn-in context
    assert any(c > 0 for c in context) and any(c == 0 for c in context)
    batch = GraphCollateFn()(table)
    assert batch["default_policy/actions"].shape[0] == sum(s - c for s, c in zip(steps, context))
