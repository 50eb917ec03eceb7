"""Typed graphs (``offline_graph.TypedGraph``) on the data path: validation with the part and
step named, per-type columns and batching (exact values), Arrow rows and the text form, bytes
against each type padded to its largest count, and BC / IQL / multi-agent BC through
``configure`` from RLlib's own episodes and from converted rows (the module side:
``tests/test_typed_module.py``; the task: ``tests/test_dispatch_env.py`` and the docs page)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

import offline_graph
from offline_graph import NodeAction, TypedGraph
from offline_graph.data.analysis.typed_stats import typed_bytes
from offline_graph.data.episodes.codec import RawEpisode
from offline_graph.data.episodes.reader import spec_from_spaces
from offline_graph.data.episodes.validation import validate_episode
from offline_graph.data.errors import ConfigError, GraphValidationError
from offline_graph.data.graphs.collate import collate
from offline_graph.data.graphs.space_text import parse_space, space_text
from offline_graph.data.learning.transitions import Transitions


def box(width: int) -> gym.spaces.Box:
    return gym.spaces.Box(-np.inf, np.inf, (width,), np.float32)


SPACE = TypedGraph(
    {"job": box(2), "machine": box(1)},
    {("job", "fits", "machine"): box(1), "machine__serves__job": None},
)
ACT = NodeAction(4, node_type="job")
FITS, SERVES = "job__fits__machine", "machine__serves__job"


def obs(jobs: int, machines: int, fits: list[tuple[int, int]]) -> dict:
    """``jobs`` jobs (x = 0, 1, 2, ...), ``machines`` machines (x = their count), the ``fits``
    pairs both ways (edge features 0, 1, ...; a tuple key and a text key), job 0 masked."""
    e = np.array(fits, np.int64).T.reshape(2, -1)
    return {
        "x": {
            "job": np.arange(jobs * 2, dtype=np.float32).reshape(jobs, 2),
            "machine": np.full((machines, 1), machines, np.float32),
        },
        "edge_index": {("job", "fits", "machine"): e, SERVES: e[::-1].copy()},
        "edge_attr": {FITS: np.arange(e.shape[1], dtype=np.float32).reshape(-1, 1)},
        "action_mask": np.arange(jobs) != 0,
    }


def raw(observations: list, actions: list, eid: str = "e1") -> RawEpisode:
    return RawEpisode(eid, observations, np.array(actions), np.ones(len(actions)), True, False, 0)


def test_typed_columns_batch_per_type_with_hand_computed_offsets() -> None:
    """Two steps (2 jobs + 1 machine, 3 jobs + 2 machines) and a final one: each type's nodes
    batched with its own ptr, each edge type's rows offset by its source / target type's ptr;
    the same after the Arrow row round trip."""
    spec = spec_from_spaces(SPACE, ACT)
    episode = validate_episode(
        raw([obs(2, 1, [(0, 0), (1, 0)]), obs(3, 2, [(2, 1)]), obs(1, 1, [])], [1, 2]), spec
    )
    trans = Transitions.from_episodes([episode], gamma=0.5)
    back = Transitions.from_table(trans.to_arrow())
    for graphs in (trans.obs, back.obs):
        batch = collate(graphs)
        assert sorted(batch) == sorted(
            ["x:job", "batch:job", "ptr:job", "x:machine", "batch:machine", "ptr:machine"]
            + [f"edge_index:{FITS}", f"edge_attr:{FITS}", f"edge_index:{SERVES}", "action_mask"]
        )
        np.testing.assert_array_equal(batch["ptr:job"], [0, 2, 5])
        np.testing.assert_array_equal(batch["ptr:machine"], [0, 1, 3])
        np.testing.assert_array_equal(batch["batch:job"], [0, 0, 1, 1, 1])
        np.testing.assert_array_equal(batch["batch:machine"], [0, 1, 1])
        np.testing.assert_array_equal(batch["x:job"][:, 0], [0, 2, 0, 2, 4])
        np.testing.assert_array_equal(batch["x:machine"][:, 0], [1, 2, 2])
        np.testing.assert_array_equal(batch[f"edge_index:{FITS}"], [[0, 1, 4], [0, 0, 2]])
        np.testing.assert_array_equal(batch[f"edge_index:{SERVES}"], [[0, 0, 2], [0, 1, 4]])
        np.testing.assert_array_equal(batch[f"edge_attr:{FITS}"][:, 0], [0, 1, 0])
        np.testing.assert_array_equal(batch["action_mask"], [False, True, False, True, True])
    assert back.final_obs is not None
    final = back.final_obs.graph(0)
    assert final["x"]["job"].shape == (1, 2) and final["edge_index"][FITS].shape == (2, 0)
    np.testing.assert_array_equal(back.value_targets, [1.5, 1.0])


def test_a_typed_graph_inside_a_dict_carries_its_globals() -> None:
    """``Dict({"graph": TypedGraph, "clock": Box(2)})``: the clock becomes ``globals [B, 2]``,
    one row per graph, stored beside the first node type's columns."""
    space = gym.spaces.Dict({"graph": SPACE, "clock": box(2)})

    def step(jobs: int, machines: int, clock: float) -> dict:
        return {"graph": obs(jobs, machines, [(0, 0)]), "clock": np.array([clock, 2 * clock], np.float32)}

    episode = validate_episode(
        raw([step(2, 1, 1), step(3, 2, 2), step(1, 1, 3)], [1, 2]), spec_from_spaces(space, ACT)
    )
    table = Transitions.from_episodes([episode], gamma=0.5).to_arrow()
    assert table.column_names[:5] == ["actions", "x:job", "node_mask:job", "globals", "x:machine"]
    batch = collate(Transitions.from_table(table).obs)
    np.testing.assert_array_equal(batch["globals"], [[1, 2], [2, 4]])
    np.testing.assert_array_equal(batch["ptr:machine"], [0, 1, 3])


def test_spaces_are_inferred_from_typed_episodes_without_metadata() -> None:
    """Masks of the job count in every step -> NodeAction over "job", limited by the most jobs
    seen (3); the widths and edge types from the arrays (``machine__serves__job`` without
    features)."""
    from offline_graph.data.graphs.space_text import infer_spaces

    episodes = [raw([obs(2, 1, [(0, 0)]), obs(3, 2, [(2, 1)]), obs(1, 1, [])], [1, 2])]
    observation, action = infer_spaces(episodes)
    assert observation == SPACE and action == NodeAction(3, node_type="job")


def test_minibatch_selection_equals_batching_the_chosen_graphs() -> None:
    """PPO's minibatches (``select_graphs`` on a typed batch, torch): graphs 2 and 0 of three
    re-batched equal ``collate`` of those two graphs taken from the columns, every key and
    value (edge rows re-offset by their own source and target types, the job mask kept)."""
    import torch

    from offline_graph.data.graphs.typed import typed_observation
    from offline_graph.data.graphs.typed_columns import TypedColumns
    from offline_graph.rllib.core.graph_minibatch import num_transitions, select_graphs

    steps = [obs(2, 1, [(0, 0), (1, 0)]), obs(3, 2, [(2, 1)]), obs(1, 2, [(0, 1), (0, 0)])]
    columns = TypedColumns.from_graphs([typed_observation(o, SPACE) for o in steps], SPACE, "job")
    batch = {k: torch.as_tensor(v) for k, v in collate(columns).items()}
    assert num_transitions({"obs": batch}) == 3
    chosen = select_graphs(batch, torch.tensor([2, 0]), "node@job")
    expected = collate(columns.take(np.array([2, 0])))
    assert sorted(chosen) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(chosen[key].numpy(), value, err_msg=key)
    np.testing.assert_array_equal(expected[f"edge_index:{FITS}"], [[0, 0, 1, 2], [1, 0, 2, 2]])


def test_text_forms_round_trip() -> None:
    text = "typed:job=2,machine=1|job__fits__machine=1,machine__serves__job"
    assert space_text(SPACE) == text and parse_space(text, "observation") == SPACE
    assert space_text(ACT) == "node:4@job" and parse_space("node:4@job", "action") == ACT
    nested = gym.spaces.Dict({"graph": SPACE, "clock": box(2)})
    assert parse_space(space_text(nested), "observation") == nested


@pytest.mark.parametrize(
    "change, reason, where",
    [
        (lambda o: o["x"].update(machine=np.zeros((2, 2), np.float32)), "x_shape", "x['machine']"),
        (lambda o: o["x"].pop("machine"), "x_shape", "x['machine']"),
        (lambda o: o["edge_index"].update({SERVES: np.array([[5], [0]])}), "edge_index_range", SERVES),
        (lambda o: o["edge_attr"].pop(FITS), "edge_attr", FITS),
        (lambda o: o.update(action_mask=np.ones(5, bool)), "action_mask", "action_mask"),
        (lambda o: o["x"].update(robot=np.zeros((1, 1), np.float32)), "obs_type", "robot"),
    ],
)
def test_a_bad_part_is_refused_with_its_key_and_step(change, reason, where) -> None:
    """Step t=1 is broken (a width, a missing node type, a machine index beyond the machines,
    missing edge features, a mask of the wrong node count, an unknown node type)."""
    bad = obs(3, 2, [(2, 1)])
    change(bad)
    with pytest.raises(GraphValidationError) as err:
        validate_episode(raw([obs(2, 1, [(0, 0)]), bad, obs(1, 1, [])], [1, 1]), spec_from_spaces(SPACE, ACT))
    assert err.value.reason == reason and "step t=1" in str(err.value) and where in str(err.value), err.value


def test_types_without_nodes_or_edges_may_be_given_as_any_empty_array_or_left_out() -> None:
    """No machine (``[]``), no fits edge (a float ``np.zeros((2, 0))``, no features), no serves
    edge type at all: the step has 0 machines and 0 edges of both types."""
    from offline_graph.data.graphs.typed import typed_observation

    step = {"x": {"job": np.ones((2, 2)), "machine": []}, "edge_index": {FITS: np.zeros((2, 0))}}
    out = typed_observation(step, SPACE)
    assert out["x"]["machine"].shape == (0, 1) and out["x"]["job"].dtype == np.float32
    assert out["edge_index"][FITS].shape == out["edge_index"][SERVES].shape == (2, 0)
    assert out["edge_attr"][FITS].shape == (0, 1) and out["edge_index"][FITS].dtype == np.int64


def test_an_action_beyond_the_action_types_nodes_is_refused() -> None:
    with pytest.raises(GraphValidationError) as err:  # 2 jobs at t=0 (3 nodes over both types)
        validate_episode(raw([obs(2, 1, [(0, 0)]), obs(1, 1, [])], [2]), spec_from_spaces(SPACE, ACT))
    assert err.value.reason == "action" and "t=0" in str(err.value)


def test_action_spaces_that_do_not_fit_a_typed_graph_are_refused() -> None:
    with pytest.raises(ConfigError, match="node_type must be one of the observation's node types"):
        spec_from_spaces(SPACE, NodeAction(4))
    with pytest.raises(ConfigError, match="Edge actions on typed graphs are not built"):
        spec_from_spaces(SPACE, offline_graph.EdgeAction(4))
    with pytest.raises(ConfigError, match="node_type must be None for a plain Graph"):
        spec_from_spaces(offline_graph.graph_space(3), ACT)


def test_bytes_are_each_types_real_counts() -> None:
    """Per observation: job 8 B (F=2), machine 4 B, a fits edge 16 + 4 B, a serves edge 16 B.
    Counts (2, 1, 2, 2) -> 92 B and (3, 2, 1, 1) -> 68 B: mean 80; padded to the largest count
    of each type: 3 * 8 + 2 * 4 + 2 * 20 + 2 * 16 = 104 B."""
    parts = {
        "job": np.array([2, 3]),
        "machine": np.array([1, 2]),
        FITS: np.array([2, 1]),
        SERVES: np.array([2, 1]),
    }
    real, padded, largest = typed_bytes(parts, SPACE, np.array([True, True]))
    assert (real, padded) == (80.0, 104) and largest == {"job": 3, "machine": 2, FITS: 2, SERVES: 2}


def _episodes(count: int, seed: int) -> list[SingleAgentEpisode]:
    """Episodes whose best action is the job with the largest first feature."""
    rng = np.random.default_rng(seed)

    def one() -> dict:
        jobs, machines = int(rng.integers(2, 5)), int(rng.integers(1, 3))
        o = obs(jobs, machines, [(int(rng.integers(jobs)), int(rng.integers(machines))) for _ in range(3)])
        o["x"]["job"] = rng.random((jobs, 2)).astype(np.float32)
        o.pop("action_mask")
        return o

    out = []
    for _ in range(count):
        ep = SingleAgentEpisode(observation_space=SPACE, action_space=ACT)
        o = one()
        ep.add_env_reset(observation=o)
        for t in range(3):
            action = np.int64(np.argmax(o["x"]["job"][:, 0]))
            o = one()
            ep.add_env_step(observation=o, action=action, reward=1.0, terminated=t == 2)
        out.append(ep)
    return out


def test_rllib_episodes_read_back_and_multi_agent_bc(ray_session, tmp_path) -> None:
    """``SingleAgentEpisode``s written by ``write_episodes`` with edge types as tuple keys
    (msgpack writes them as arrays) read back to exactly their own observations, keyed by text;
    BC on ``MultiAgentEpisode``s of a typed agent and a plain-graph one (one module each).
    BC from RLlib's own recorded episodes: the EnvRunner test; IQL from converted rows: the CLI
    test. Multi-agent converted rows of typed agents: refused."""
    import pyarrow.parquet as pq

    from offline_graph.data.episodes.codec import decode_state
    from offline_graph.data.graphs.typed import typed_observation
    from offline_graph.data.graphs.typed_columns import TypedColumns

    data = str(tmp_path / "eps")
    written = _episodes(3, 0)
    offline_graph.write_episodes(data, written)
    (path,) = sorted((tmp_path / "eps").glob("*.parquet"))
    for item, episode in zip(pq.read_table(path).column("item").to_pylist(), written):
        back = validate_episode(decode_state(item), spec_from_spaces(SPACE, ACT))
        steps = [typed_observation(o, SPACE) for o in episode.get_observations()]
        expected = collate(TypedColumns.from_graphs(steps, SPACE, "job"))
        got = collate(back.obs)
        assert sorted(got) == sorted(expected)
        for key, value in expected.items():
            np.testing.assert_array_equal(got[key], value, err_msg=key)
        np.testing.assert_array_equal(back.actions, episode.get_actions())

    plain = offline_graph.graph_space(3, None)
    ma = str(tmp_path / "ma")
    episodes = []
    for i, sa in enumerate(_episodes(4, 1)):
        ep = MultiAgentEpisode(id_=f"m{i}")
        first = sa.get_observations(0)
        ep.add_env_reset(observations={"typed": first, "plain": _plain(0)}, infos={"typed": {}, "plain": {}})
        for t in range(len(sa)):
            ep.add_env_step(
                observations={"typed": sa.get_observations(t + 1), "plain": _plain(t + 1)},
                actions={"typed": sa.get_actions(t), "plain": t % 2},
                rewards={"typed": 1.0, "plain": 0.5},
                terminateds={"__all__": t == len(sa) - 1},
                infos={"typed": {}, "plain": {}},
            )
        episodes.append(ep)
    obs_spaces, act_spaces = {"typed": SPACE, "plain": plain}, {"typed": ACT, "plain": gym.spaces.Discrete(2)}
    offline_graph.write_episodes(ma, episodes, observation_space=obs_spaces, action_space=act_spaces)
    specs = {
        aid: RLModuleSpec(
            module_class=offline_graph.GNNModule,
            observation_space=obs_spaces[aid],
            action_space=act_spaces[aid],
            model_config={"hidden": 8},
        )
        for aid in obs_spaces
    }
    config = (
        BCConfig()
        .environment(observation_space=gym.spaces.Dict(obs_spaces), action_space=gym.spaces.Dict(act_spaces))
        .multi_agent(policies=set(specs), policy_mapping_fn=lambda aid, *a, **k: aid)
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        .offline_data(input_=[ma], input_read_episodes=True, dataset_num_iters_per_learner=2)
        .training(train_batch_size_per_learner=4)
    )
    algo = offline_graph.configure(config, seed=0).build_algo()
    try:
        learners = algo.train()["learners"]
    finally:
        algo.stop()
    assert np.isfinite(learners["typed"]["policy_loss"]) and np.isfinite(learners["plain"]["policy_loss"])
    from offline_graph.jobs.ma_convert import MultiAgentConvertConfig, convert_multi_agent

    with pytest.raises(ConfigError, match="Multi-agent converted rows of typed graphs are not built"):
        convert_multi_agent(
            MultiAgentConvertConfig(input=ma, output=str(tmp_path / "ma_rows"), num_workers=1)
        )


def test_our_envrunners_record_evaluate_and_train_ppo_on_a_typed_env(ray_session, tmp_path) -> None:
    """Dispatch-v0 in our EnvRunners: RLlib's recorder (``GraphOfflineEnvRunner``, 2 sub-envs)
    writes typed episodes (text keys, a mask over the jobs, each action a job of its step)
    that ``inspect`` and off-policy evaluation read (WIS of the sampling module = the mean
    return); BC trained on them is evaluated by RLlib's ``config.evaluation``
    (greedy, 4 episodes of 8 steps, each paying at most 8); PPO trains (2 typed minibatches;
    the exact selection is tested above)."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from offline_graph.data.analysis.stats import inspect_path
    from offline_graph.rllib.env.env_setup import configure_env

    env, out = "offline_graph/Dispatch-v0", tmp_path / "recorded"
    rl_module = RLModuleSpec(module_class=offline_graph.GNNModule, model_config={"hidden": 8})
    config = (
        BCConfig().environment(env).env_runners(num_envs_per_env_runner=2).rl_module(rl_module_spec=rl_module)
    )
    config.offline_data(output=str(out), output_write_episodes=True).debugging(seed=0)
    configure_env(config)
    runner = config.env_runner_cls(config=config, worker_index=0)
    try:
        sampled = runner.sample(num_episodes=4, explore=True)
    finally:
        runner.stop()
    for episode in sampled:
        for t in range(len(episode)):
            step = episode.get_observations(t)
            assert set(step["edge_index"]) == {FITS, SERVES} and len(step["action_mask"]) == len(
                step["x"]["job"]
            )
            assert 0 <= int(episode.get_actions(t)) < len(step["x"]["job"])
    (run,) = sorted(out.glob("*/run-*"))
    summary = inspect_path(str(run))
    assert (summary["episodes"], summary["transitions"]) == (len(sampled), sum(len(e) for e in sampled))
    # OPE reads the action_logp RLlib recorded: the sampling module as the target (explore=True)
    # weighs every step pi / mu = 1, so WIS is the mean return over the recorded episodes
    ope = offline_graph.estimate_value(
        runner.module, [str(run)], method="wis", gamma=1.0, explore=True, n_boot=20
    )
    assert (ope["behaviour"], ope["episodes"]) == ("logged", len(sampled)) and ope["ess"] == pytest.approx(
        len(sampled)
    )
    assert ope["value"] == pytest.approx(np.mean([e.get_return() for e in sampled]), rel=1e-4)
    train = (
        BCConfig()
        .environment(env)
        .rl_module(rl_module_spec=rl_module)
        .offline_data(input_=[str(out)], input_read_episodes=True, dataset_num_iters_per_learner=2)
        .training(train_batch_size_per_learner=8)
        .evaluation(evaluation_interval=1, evaluation_num_env_runners=0, evaluation_duration=4)
    )
    algo = offline_graph.configure(train, seed=0).build_algo()
    try:
        result = algo.train()["evaluation"]["env_runners"]
    finally:
        algo.stop()
    assert result["num_episodes"] >= 4 and 0.0 <= result["episode_return_mean"] <= 8.0, result
    ppo = (
        PPOConfig()
        .environment(env)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
        .training(train_batch_size_per_learner=32, minibatch_size=16, num_epochs=1)
        .rl_module(rl_module_spec=rl_module)
    )
    algo = offline_graph.configure(ppo, seed=0).build_algo()
    try:
        learned = algo.train()["learners"]["default_policy"]
    finally:
        algo.stop()
    assert np.isfinite(learned["policy_loss"]) and np.isfinite(learned["vf_loss"]), learned


def _plain(n: int) -> dict:
    return {"x": np.full((n + 2, 3), n, np.float32), "edge_index": np.array([[0], [1]], np.int64)}


def test_record_inspect_convert_train_evaluate_from_the_cli(ray_session, tmp_path, capsys) -> None:
    """The commands on Dispatch-v0's typed logs: ``record`` writes the typed space's text,
    ``inspect`` counts each type (bytes: a job 8 B, a machine 8 B, a fits edge 16 + 4 B, a
    serves edge 16 B) against each type padded to its largest count, ``convert`` writes the
    per-type columns, ``train`` runs BC from the rows (evaluated in the env; how well BC learns
    is the docs page's check) and IQL from the same rows (its critics on the final
    observations' columns), ``evaluate`` restores the module and replays its returns. One chain
    of data, so one test."""
    import json

    from offline_graph.cli import convert, evaluate, inspect_data, record, train
    from offline_graph.data.analysis.stats import inspect_path

    text = "typed:job=2,machine=2|job__fits__machine=1,machine__serves__job"
    logs, rows, ckpt = str(tmp_path / "logs"), str(tmp_path / "rows"), str(tmp_path / "bc")
    argv = ["--env", "offline_graph/Dispatch-v0", "--policy", "expert", "--epsilon", "0.2"]
    assert record.main([*argv, "--episodes", "60", "--output", logs]) == 0
    assert inspect_data.main([logs]) == 0
    assert (
        f"spaces                            {text} / node:8@job (the file metadata)"
        in capsys.readouterr().out
    )
    summary = inspect_path(logs)
    largest = summary["typed"]["largest"]
    assert largest["job"] <= 8 and largest["machine"] <= 4 and largest[FITS] == largest[SERVES]
    width = {"job": 8, "machine": 8, FITS: 20, SERVES: 16}
    assert summary["padded_box"]["bytes_per_transition"] == sum(largest[k] * width[k] for k in width)
    assert (
        3 * 8 + 2 * 8 + 36 <= summary["bytes_per_transition"] < summary["padded_box"]["bytes_per_transition"]
    )
    assert convert.main(["--input", logs, "--output", rows]) == 0
    assert "transitions out: 480 " in capsys.readouterr().out
    argv = ["--algo", "bc", "--data", rows, "--checkpoint", ckpt, "--iterations", "1", "--lr", "3e-3"]
    argv += ["--updates-per-iteration", "10", "--batch-size", "32", "--hidden", "16", "--eval-episodes", "5"]
    result = train.run(train.parse_args(argv))  # how well it learns: the docs page's block
    assert 0.0 <= result["evaluation"]["module"]["mean_return"] <= 8.0, result["evaluation"]
    assert evaluate.main(["--checkpoint", ckpt, "--episodes", "5", "--output", str(tmp_path / "e.json")]) == 0
    replay = json.loads((tmp_path / "e.json").read_text())["module"]["returns"]
    assert replay == result["evaluation"]["module"]["returns"]
    argv = ["--algo", "iql", "--data", rows, "--checkpoint", str(tmp_path / "iql"), "--iterations", "1"]
    argv += ["--updates-per-iteration", "10", "--batch-size", "32", "--hidden", "16", "--eval-episodes", "0"]
    (step,) = train.run(train.parse_args(argv))["history"]
    assert step["module_steps_trained"] > 0 and np.isfinite(step["qf_loss"]), step


def test_what_the_review_found_reads_as_the_guide_says(tmp_path) -> None:
    """Regressions: spaces inferred whatever the steps' key order and with an empty edge type
    left out; ``inspect`` validates against recorded spaces (a Dict holding the typed graph, a
    first step without a mask); rows of a space without edge types pass the file check;
    ``x`` of shape [3, 0] is refused while an empty ``edge_attr`` ``[]`` is no edges; a table
    whose edge columns come first keeps its ``globals``."""
    import pyarrow as pa

    from offline_graph.data.analysis.stats import inspect_path
    from offline_graph.data.graphs.space_text import infer_spaces
    from offline_graph.data.store.files import check_columns

    first = obs(2, 1, [(0, 0)])
    second = obs(3, 2, [(2, 1)])
    second["x"] = {"machine": second["x"]["machine"], "job": second["x"]["job"]}  # other key order
    last = obs(1, 1, [])
    last["edge_index"].pop(("job", "fits", "machine"))
    last["edge_attr"] = {}
    assert infer_spaces([raw([first, second, last], [1, 2])]) == (SPACE, NodeAction(3, node_type="job"))

    space = gym.spaces.Dict({"graph": SPACE, "clock": box(1)})
    steps = [{"graph": obs(2, 1, [(0, 0)]), "clock": np.array([t], np.float32)} for t in range(3)]
    steps[0]["graph"].pop("action_mask")  # allowed: every job
    episode = SingleAgentEpisode()
    episode.add_env_reset(observation=steps[0])
    for t in (1, 2):
        episode.add_env_step(observation=steps[t], action=np.int64(1), reward=1.0, terminated=t == 2)
    offline_graph.write_episodes(str(tmp_path / "d"), [episode], observation_space=space, action_space=ACT)
    summary = inspect_path(str(tmp_path / "d"))
    assert (summary["episodes"], summary["episodes_rejected"], summary["globals_dim"]) == (1, 0, 1)

    no_edges = TypedGraph({"job": box(2)}, {})
    step = {"x": {"job": np.ones((2, 2), np.float32)}}
    rows = Transitions.from_episodes(
        [validate_episode(raw([step, step], [0]), spec_from_spaces(no_edges, ACT))], 0.5
    ).to_arrow()
    check_columns("rows.parquet", {"kind": "transitions"}, rows.schema)  # no edge_index: fine

    bad = obs(3, 2, [(2, 1)])
    bad["x"]["machine"] = np.zeros((3, 0), np.float32)
    with pytest.raises(GraphValidationError, match="found float32 \\[3, 0\\]"):
        validate_episode(raw([first, bad, last], [1, 1]), spec_from_spaces(SPACE, ACT))
    empty = obs(2, 1, [])
    empty["edge_attr"] = {FITS: []}
    assert validate_episode(
        raw([empty, empty], [1]), spec_from_spaces(SPACE, ACT)
    ).obs.num_edges.tolist() == [0, 0]

    in_dict = spec_from_spaces(space, ACT)
    graphs = validate_episode(raw(steps, [1, 1]), in_dict)
    table = Transitions.from_episodes([graphs], 0.5).to_arrow()
    edge_first = table.select(sorted(table.column_names, key=lambda c: not c.startswith("edge_index")))
    back = Transitions.from_table(pa.table(edge_first))
    np.testing.assert_array_equal(back.obs.globals, [[0.0], [1.0]])
