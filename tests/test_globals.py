"""Graph-level features: a Dict observation space of one graph and flat parts. Its text form,
the flattening of the parts into ``globals`` (hand-computed), validation errors that name the
part and the step, the columns / Arrow / collate layout (one row per graph, never per node),
and the encoder that concatenates ``globals`` to the pooled embedding."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

import offline_graph
from offline_graph.data.episodes.codec import RawEpisode
from offline_graph.data.episodes.reader import spec_from_spaces
from offline_graph.data.episodes.validation import validate_episode
from offline_graph.data.errors import ConfigError, GraphValidationError
from offline_graph.data.graphs.collate import collate, uncollate
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.graphs.globals import globals_layout, globals_size
from offline_graph.data.graphs.graph import space_sizes
from offline_graph.data.graphs.space_text import infer_spaces, parse_space, space_text, spec_texts
from offline_graph.data.learning.transitions import Transitions, table_to_batch, transition_schema
from offline_graph.env.channel import ChannelEnv, best_node

SPACE = gym.spaces.Dict(
    {
        "graph": offline_graph.graph_space(3, 2),
        "clock": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
        "mode": gym.spaces.Discrete(3),
    }
)
TEXT = "dict:clock=box:2;graph=graph:F=3,D=2;mode=discrete:3"


def graph(n: int, e: int, value: float = 1.0) -> dict:
    x = np.full((n, 3), value, np.float32)
    x[:, 1] = np.arange(n)  # nodes that differ: a node head scores them apart
    return {
        "x": x,
        "edge_index": np.array([np.arange(e) % n, (np.arange(e) + 1) % n], np.int64).reshape(2, e),
        "edge_attr": np.zeros((e, 2), np.float32),
    }


OBS = [
    {"graph": graph(2, 1), "clock": np.array([0.5, 0.25], np.float32), "mode": 2},
    {"graph": offline_graph.dict_to_graph(graph(3, 0, 2.0)), "clock": [1.0, 0.0], "mode": np.int64(0)},
    {**graph(1, 0, 3.0), "clock": (0.0, 1.0), "mode": 1},  # flat: the parts beside x
]
GLOBALS = [[0.5, 0.25, 0, 0, 1], [1, 0, 1, 0, 0], [0, 1, 0, 1, 0]]  # clock, then mode one-hot


def episode(observations: list) -> RawEpisode:
    return RawEpisode("e1", observations, [0, 1], [1.0, 0.5], True, False, 0)


def test_space_text_sizes_and_layout():
    assert space_text(SPACE) == TEXT
    assert space_text(parse_space(TEXT, "observation")) == TEXT
    assert space_sizes(SPACE) == (3, 2) and globals_size(SPACE) == 5
    assert globals_size(offline_graph.graph_space(3)) == 0
    layout = globals_layout(SPACE)
    assert layout is not None and layout.graph_key == "graph"
    assert layout.columns() == ["clock[0]", "clock[1]", "mode=0", "mode=1", "mode=2"]
    spec = spec_from_spaces(SPACE, gym.spaces.Discrete(2))
    assert spec_texts(spec) == {"observation_space": TEXT, "action_space": "discrete:2"}
    parsed = parse_space("dict:g=graph:F=4;m=multibinary:2;s=box:2x3", "observation")
    assert (space_sizes(parsed), globals_size(parsed)) == ((4, None), 8)
    with pytest.raises(ConfigError, match="exactly one gymnasium.spaces.Graph entry"):
        globals_size(gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,)), "b": gym.spaces.Discrete(2)}))
    with pytest.raises(ConfigError, match="'clock': Tuple"):
        space_sizes(gym.spaces.Dict({"g": offline_graph.graph_space(2), "clock": gym.spaces.Tuple([])}))
    with pytest.raises(ConfigError, match="--observation-space: text must be"):
        parse_space("dict:g=graph:F=2;c=tuple:2", "observation")


def test_parts_become_one_globals_row_per_observation():
    spec = spec_from_spaces(SPACE, gym.spaces.Discrete(2))
    ep = validate_episode(episode(list(OBS)), spec)
    np.testing.assert_array_equal(ep.obs.globals, GLOBALS)
    assert ep.obs.globals.dtype == np.float32
    np.testing.assert_array_equal(ep.obs.num_nodes, [2, 3, 1])
    np.testing.assert_array_equal(ep.obs.x[:, 0], [1, 1, 2, 2, 2, 3])


@pytest.mark.parametrize(
    ("step", "part", "column", "message"),
    [
        (1, {"clock": [0.5]}, "clock", "clock must be numbers of shape [2] (found float64 [1])"),
        (2, {"mode": 3}, "mode", "mode must be an integer in 0..2 (found int64 3)"),
        (1, {"mode": 1.5}, "mode", "mode must be an integer in 0..2 (found float64 1.5)"),
        (2, {"clock": [np.nan, 0.0]}, "clock", "clock must be finite (found [nan])"),
        (1, {"clock": None}, "clock", "clock must be numbers of shape [2] (found NoneType)"),
    ],
)
def test_a_part_that_does_not_fit_is_named_with_its_step(step, part, column, message):
    bad = list(OBS)
    bad[step] = {**OBS[0], **part}
    with pytest.raises(GraphValidationError) as err:
        validate_episode(
            episode(bad), spec_from_spaces(SPACE, gym.spaces.Discrete(2)), file="f.parquet", row=3
        )
    assert err.value.reason == "globals"
    assert str(err.value).startswith(
        f"file f.parquet, row 3, episode 'e1', step t={step}, column 'observations.{column}': {message}. "
        "The observation space is a Dict of the graph 'graph' and the parts 'clock', 'mode'"
    )


def test_a_missing_part_or_graph_is_named():
    spec = spec_from_spaces(SPACE, gym.spaces.Discrete(2))
    with pytest.raises(GraphValidationError, match=r"step t=1, column 'observations.mode': observation must "
                       r"have the key 'mode' \(found \['clock', 'graph'\]\)"):  # fmt: skip
        validate_episode(episode([OBS[0], {"graph": graph(2, 0), "clock": [0, 0]}, OBS[2]]), spec)
    with pytest.raises(GraphValidationError, match=r"t=0, column 'observations.graph': observation must have "
                       r"the key 'graph'"):  # fmt: skip
        validate_episode(episode([{"clock": [0, 0], "mode": 0}, OBS[1], OBS[2]]), spec)


def test_globals_through_columns_arrow_and_collate():
    spec = spec_from_spaces(SPACE, gym.spaces.Discrete(2))
    cols = validate_episode(episode(list(OBS)), spec).obs
    picked = cols.take(np.array([2, 0, 2]))
    np.testing.assert_array_equal(picked.globals, [GLOBALS[2], GLOBALS[0], GLOBALS[2]])
    np.testing.assert_array_equal(cols.slice(1, 3).globals, GLOBALS[1:])
    np.testing.assert_array_equal(cols.graph(1)["globals"], GLOBALS[1])
    np.testing.assert_array_equal(cols.without_nodes(2).globals, np.zeros((2, 5)))
    np.testing.assert_array_equal(
        GraphColumns.concat([cols, picked]).globals, GLOBALS + [GLOBALS[2], GLOBALS[0], GLOBALS[2]]
    )
    batch = collate(picked)
    # one row per graph: [B, G], never repeated per node (the nodes are 1, 2 and 1)
    np.testing.assert_array_equal(batch["globals"], [GLOBALS[2], GLOBALS[0], GLOBALS[2]])
    np.testing.assert_array_equal(batch["batch"], [0, 1, 1, 2])
    np.testing.assert_array_equal(uncollate(batch).globals, batch["globals"])
    table = Transitions.from_episodes([validate_episode(episode(list(OBS)), spec)], 1.0).to_arrow()
    table = table.cast(transition_schema(spec))
    assert table.schema.field("globals").type.value_type.list_size == 5
    np.testing.assert_array_equal(table_to_batch(table)["obs"]["globals"], GLOBALS[:2])
    assert table.column("final_globals").to_pylist() == [None, [GLOBALS[2]]]


def test_encoder_concatenates_globals_after_pooling():
    torch.manual_seed(0)
    module = RLModuleSpec(
        module_class=offline_graph.GNNModule,
        observation_space=SPACE,
        action_space=offline_graph.NodeAction(8),
        model_config={"hidden": 4, "layers": 1, "pool": "mean"},
    ).build()
    spec = spec_from_spaces(SPACE, offline_graph.NodeAction(8))
    obs = {k: torch.as_tensor(v) for k, v in collate(validate_episode(episode(list(OBS)), spec).obs).items()}
    enc = module._encoder(obs)
    assert module._encoder.out_dim == 4 + 5 and enc.graphs.shape == (3, 9)
    # the pooled node embeddings first, the observation's globals after them, unchanged
    pooled = torch.stack([enc.nodes[0:2].mean(0), enc.nodes[2:5].mean(0), enc.nodes[5:6].mean(0)])
    torch.testing.assert_close(enc.graphs[:, :4], pooled)
    torch.testing.assert_close(enc.graphs[:, 4:], torch.tensor(GLOBALS, dtype=torch.float32))
    # the node head reads them through `batch`: changing one graph's globals moves only its nodes
    before = module.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    other = dict(obs, globals=obs["globals"].clone())
    other["globals"][1] = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0])
    after = module.forward_inference({Columns.OBS: other})[Columns.ACTION_DIST_INPUTS]
    assert torch.equal(before[[0, 2]], after[[0, 2]]) and not torch.equal(before[1], after[1])
    with pytest.raises(ValueError, match=r"must carry globals \[3, 5\] \(found no 'globals'\)"):
        module._encoder({k: v for k, v in obs.items() if k != "globals"})


def test_channel_env_pays_the_best_node_of_the_type_asked_for():
    x = np.array([[1, 0, 0, 0.9], [0, 1, 0, 0.2], [0, 1, 0, 0.7], [0, 0, 1, 0.1]], np.float32)
    assert [best_node(x, c) for c in range(3)] == [0, 2, 3]
    env = ChannelEnv(length=3)
    obs, _ = env.reset(seed=4)
    assert env.observation_space.contains(obs)
    assert space_text(env.observation_space) == "dict:channel=discrete:3;clock=box:1;graph=graph:F=4,D=1"
    expert = env.make_policy("expert", 0.0, np.random.default_rng(0))
    total, steps, done = 0.0, 0, False
    while not done:
        assert sorted(set(obs["graph"].nodes[:, :3].argmax(1))) == [0, 1, 2]  # every type on a node
        obs, reward, done, _, info = env.step(expert(obs, {}))
        total, steps = total + reward, steps + 1
        assert not info["illegal"]
    assert (total, steps) == (3.0, 3)
    obs, _ = env.reset(seed=4)
    x, channel = obs["graph"].nodes, obs["channel"]
    other = next(i for i in range(len(x)) if i != best_node(x, channel))
    assert env.step(other)[1] == 0.0 and env.step(99)[4] == {"illegal": True}
    with pytest.raises(ConfigError, match="ChannelConfig: min_nodes must be >= 3 "):
        ChannelEnv(min_nodes=2)


def test_a_globals_vector_beside_x_and_inference_that_never_drops_parts():
    """Part 1's form: the graph dict with a ``globals`` vector, its space a Dict of the graph and
    a ``globals`` Box. Inference never guesses (or drops) the parts: it asks for the space."""
    box = gym.spaces.Box(-9, 9, (2,))
    space = gym.spaces.Dict({"graph": offline_graph.graph_space(3, 2), "globals": box})
    steps = [{**graph(2, 1), "globals": [1.0, 2.0]}, {**graph(1, 0), "globals": np.array([3, 4])}]
    steps.append({**graph(3, 2), "globals": (5, 6)})
    raw = RawEpisode("g", steps, [0, 1], [0.0, 1.0], True, False, 0)
    ep = validate_episode(raw, spec_from_spaces(space, gym.spaces.Discrete(2)))
    np.testing.assert_array_equal(ep.obs.globals, [[1, 2], [3, 4], [5, 6]])
    assert space_text(space) == "dict:globals=box:2;graph=graph:F=3,D=2"
    keys = r"episode 'g': observation keys must be the graph's .* \(found also \['globals'\]\)"
    with pytest.raises(ConfigError, match=keys):
        infer_spaces([raw])
    nested = r"found also \['clock', 'graph', 'mode'\]\). A graph with other parts"
    with pytest.raises(ConfigError, match=nested):
        infer_spaces([episode(list(OBS))])


def test_multibinary_and_box_parts_of_any_shape():
    """``MultiBinary(3)`` flattened as its 0/1 values and a ``Box(2x2)`` raveled row-major,
    in the Dict's sorted key order (``bits`` before ``grid``); a 2 in the bits is named."""
    space = gym.spaces.Dict(
        {
            "g": offline_graph.graph_space(3),
            "grid": gym.spaces.Box(-5, 5, (2, 2)),
            "bits": gym.spaces.MultiBinary(3),
        }
    )
    obs = [
        {**graph(2, 1), "grid": [[1, 2], [3, 4]], "bits": [1, 0, 1]},
        {**graph(1, 0), "grid": np.eye(2), "bits": (0, 0, 1)},
    ]
    for o in obs:
        del o["edge_attr"]
    spec = spec_from_spaces(space, gym.spaces.Discrete(2))
    ep = validate_episode(RawEpisode("m", obs, [0], [1.0], True, False, 0), spec)
    np.testing.assert_array_equal(ep.obs.globals, [[1, 0, 1, 1, 2, 3, 4], [0, 0, 1, 1, 0, 0, 1]])
    obs[1]["bits"] = [0, 2, 1]
    with pytest.raises(
        GraphValidationError,
        match=r"step t=1, column 'observations.bits': bits must be 0s and 1s \(found \[2.0\]\)",
    ):
        validate_episode(RawEpisode("m", obs, [0], [1.0], True, False, 0), spec)


def test_parts_flattened_already_as_our_env_runner_records_them():
    """A graph dict with ``globals`` [G] in place of the parts (our EnvRunner's episodes, so
    RLlib's recorder): taken as it is; a wrong length or a non-number is named with its step."""
    flat = [{**graph(2, 1), "globals": row} for row in GLOBALS]
    ep = validate_episode(episode(flat), spec_from_spaces(SPACE, gym.spaces.Discrete(2)))
    np.testing.assert_array_equal(ep.obs.globals, GLOBALS)
    short = [flat[0], {**graph(2, 1), "globals": [1.0, 2.0]}, flat[2]]
    with pytest.raises(
        GraphValidationError,
        match=r"step t=1, column 'observations.globals': globals must "
        r"be 5 finite numbers, the parts \['clock', 'mode'\] flattened \(found 2 values\)",
    ):
        validate_episode(episode(short), spec_from_spaces(SPACE, gym.spaces.Discrete(2)))


@pytest.mark.slow
def test_record_inspect_convert_train_evaluate_from_the_cli(ray_session, tmp_path, capsys):
    """The commands on a Dict env's data: ``record`` writes the parts beside each graph and the
    Dict space's text, ``inspect`` and ``convert`` carry it, ``train`` learns from the rows (the
    parts decide the action: BC from the converted rows beats a third of 8, the most a
    graph-only policy gets), ``evaluate`` restores the module with its Dict space, estimates its
    value from the logs (FQE) and ``finetune`` runs PPO on it in the env; CQL and a per-node
    GRU module train from the same rows (the GRU one also beats the graph-only bound):
    commands that share one chain of data, so one test (~15 s alone)."""
    from offline_graph.cli import convert, evaluate, finetune, inspect_data, record, train

    text = "dict:channel=discrete:3;clock=box:1;graph=graph:F=4,D=1"
    logs, rows, ckpt = str(tmp_path / "logs"), str(tmp_path / "rows"), str(tmp_path / "bc")
    argv = ["--env", "offline_graph/Channel-v0", "--policy", "expert", "--epsilon", "0.2"]
    assert record.main([*argv, "--episodes", "60", "--output", logs]) == 0
    assert inspect_data.main([logs]) == 0
    out = capsys.readouterr().out
    assert f"spaces                            {text} / node:8 (the file metadata)" in out
    assert "graph-level parts G               4 float32 per observation (one row per graph)" in out
    # bytes: 16 B per node (F=4 float32), 20 B per edge (2 int64 + D=1), G=4 floats (16 B) once
    from offline_graph.data.analysis.stats import inspect_path

    summary = inspect_path(logs)
    nodes_edges = summary["bytes_per_transition"] - 16.0
    assert (
        summary["globals_dim"] == 4 and summary["padded_box"]["bytes_per_transition"] == 8 * 16 + 7 * 20 + 16
    )
    assert 5 * 16 + 4 * 20 <= nodes_edges <= 7 * 16 + 6 * 20  # chains of 4 to 8 nodes (mean 6)
    assert convert.main(["--input", logs, "--output", rows]) == 0
    assert "transitions out: 480 " in capsys.readouterr().out
    argv = ["--algo", "bc", "--data", rows, "--checkpoint", ckpt, "--iterations", "6", "--lr", "3e-3"]
    argv += ["--updates-per-iteration", "30", "--batch-size", "64", "--hidden", "32", "--eval-episodes", "10"]
    summary = train.run(train.parse_args(argv))
    assert summary["evaluation"]["module"]["mean_return"] > 8 / 3 + 1.5, summary["evaluation"]
    assert (
        evaluate.main(["--checkpoint", ckpt, "--episodes", "10", "--output", str(tmp_path / "e.json")]) == 0
    )

    assert (
        json.loads((tmp_path / "e.json").read_text())["module"]["returns"]
        == summary["evaluation"]["module"]["returns"]
    )
    # CQL from the same rows: its Q network reads the parts too (a missing globals raises)
    argv = ["--algo", "cql", "--data", rows, "--checkpoint", str(tmp_path / "cql"), "--iterations", "1"]
    argv += ["--updates-per-iteration", "10", "--batch-size", "32", "--hidden", "16", "--eval-episodes", "0"]
    (step,) = train.run(train.parse_args(argv))["history"]
    assert step["module_steps_trained"] > 0 and 0.0 < step["qf_loss"] < math.inf, step
    # a memory module (per-node GRU) from the same rows: its readout still gets the parts
    argv = ["--algo", "bc", "--data", rows, "--checkpoint", str(tmp_path / "gru"), "--iterations", "4"]
    argv += ["--memory", "node_gru", "--lr", "3e-3", "--updates-per-iteration", "20", "--batch-size", "16"]
    memory = train.run(train.parse_args([*argv, "--hidden", "32", "--eval-episodes", "10"]))
    assert memory["evaluation"]["module"]["mean_return"] > 8 / 3 + 1.5, memory["evaluation"]
    # OPE from the logs (FQE, gamma 1): the greedy module's value within 1.5 of its env return
    argv = ["--checkpoint", ckpt, "--data", logs, "--method", "fqe", "--gamma", "1.0", "--fqe-epochs", "25"]
    assert evaluate.main([*argv, "--output", str(tmp_path / "ope.json")]) == 0
    ope = json.loads((tmp_path / "ope.json").read_text())["per_module"]["default_policy"]
    assert ope["method"] == "fqe" and ope["explore"] is False and ope["transitions"] == 480
    assert abs(ope["value"] - summary["evaluation"]["module"]["mean_return"]) < 1.5, ope
    # PPO fine-tuning in the Dict env: the loaded module plays the evaluation's episodes as
    # the checkpoint did (same weights, same seeds), then one PPO iteration on its samples
    argv = ["--checkpoint", ckpt, "--iterations", "1", "--train-batch-size", "64", "--minibatch-size", "32"]
    argv += ["--num-envs-per-env-runner", "2", "--eval-episodes", "10", "--eval-every", "1"]
    assert finetune.main([*argv, "--save", str(tmp_path / "ft")]) == 0
    curve = json.loads((tmp_path / "ft" / "summary.json").read_text())["curve"]
    assert curve[0]["mean_return"] == summary["evaluation"]["module"]["mean_return"]
    assert [c["iteration"] for c in curve] == [0, 1] and 0.0 <= curve[1]["mean_return"] <= 8.0


@pytest.mark.slow
def test_marwil_from_rllib_episodes_evaluates_on_an_env_runner(ray_session, tmp_path):
    """Episodes built with RLlib's ``SingleAgentEpisode`` from the Dict env's own observations
    (``GraphInstance`` inside the Dict, numpy-scalar actions), written by ``write_episodes``;
    MARWIL through ``configure`` with the env id, evaluated by RLlib's ``config.evaluation`` on
    a ``GraphEnvRunner`` (local: the vector env's batched ``Dict`` space reaches the
    prelearner, which takes the env's own). One ``train()``: 10 evaluation episodes of 8
    steps, each return between 0 and 8."""
    from ray.rllib.algorithms.marwil import MARWILConfig
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from tests.helpers import map_in_this_process

    env, rng, episodes = ChannelEnv(), np.random.default_rng(0), []
    for seed in range(12):
        ep = SingleAgentEpisode(observation_space=env.observation_space, action_space=env.action_space)
        obs, _ = env.reset(seed=seed)
        ep.add_env_reset(observation=obs, infos={})
        done = False
        while not done:
            x = obs["graph"].nodes
            action = np.int64(rng.integers(len(x)) if rng.random() < 0.2 else best_node(x, obs["channel"]))
            obs, reward, done, _, _ = env.step(action)
            ep.add_env_step(observation=obs, action=action, reward=reward, terminated=done)
        episodes.append(ep)
    offline_graph.write_episodes(str(tmp_path), episodes)
    config = (
        MARWILConfig()
        .environment("offline_graph/Channel-v0")
        .offline_data(input_=[str(tmp_path)], input_read_episodes=True, dataset_num_iters_per_learner=2)
        .training(train_batch_size_per_learner=32, beta=1.0)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=offline_graph.GNNModule, model_config={"hidden": 16})
        )
        .evaluation(evaluation_interval=1, evaluation_num_env_runners=0, evaluation_duration=10)
    )
    algo = offline_graph.configure(config, seed=0).build_algo()
    try:
        map_in_this_process(algo)
        result = algo.train()["evaluation"]["env_runners"]
        assert result["num_episodes"] >= 10 and 0.0 <= result["episode_return_mean"] <= 8.0, result
        assert isinstance(algo.get_module(), offline_graph.GNNModule)
    finally:
        algo.stop()
