"""Bring your own data: episodes written by someone else (RLlib's own SingleAgentEpisode API,
no offline_graph metadata) convert and train with the spaces inferred or given, and without an
env ``train`` reports offline metrics on a held-out split of the episodes."""

from __future__ import annotations

import hashlib
import json
import logging
import os

import gymnasium as gym
import msgpack
import msgpack_numpy as mnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offline_graph.data.errors import ConfigError
from offline_graph.data.store.format import read_file_metadata
from offline_graph.data.episodes.holdout import held_out
from offline_graph.env.data_spaces import resolve_spaces
from tests.helpers import write_episode_file

F, K, EPISODES = 5, 3, 20
IDS = [f"ext-{i:02d}" for i in range(EPISODES)]
LENGTHS = [2 + i % 4 for i in range(EPISODES)]  # 70 transitions in all
HELD = ["ext-02", "ext-19"]  # blake2b("0:<id>") / 2**64 < 0.1 (0.054 and 0.072), by hand below
HELD_STEPS = 4 + 5
INFERRED = "inferred from the first 20 episodes of 2 files"
PIN = "--observation-space graph:F=5 --action-space discrete:3"


def graph(n: int, rng: np.random.Generator) -> dict:
    """n nodes with F features, a chain of n-1 edges without features."""
    return {
        "x": rng.standard_normal((n, F)).astype(np.float32),
        "edge_index": np.array([range(n - 1), range(1, n)], np.int64).reshape(2, n - 1),
    }


def outside_item(i: int) -> bytes:
    """Episode i the way an RLlib user writes one: SingleAgentEpisode.add_env_reset /
    add_env_step, then msgpack + msgpack_numpy of get_state()."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    rng = np.random.default_rng(i)
    episode = SingleAgentEpisode(id_=IDS[i])
    nodes = 2
    episode.add_env_reset(observation=graph(nodes, rng), infos={})
    for t in range(LENGTHS[i]):
        action = nodes % K  # the behaviour policy: the node count of the graph it sees, mod 3
        nodes = 2 + (i + t + 1) % 4
        episode.add_env_step(
            observation=graph(nodes, rng), action=action, reward=1.0, terminated=t == LENGTHS[i] - 1
        )
    return msgpack.packb(episode.get_state(), default=mnp.encode)


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> str:
    """The 20 episodes in 2 Parquet files with a binary `item` column and no metadata."""
    out = tmp_path_factory.mktemp("outside") / "episodes"
    out.mkdir()
    for f in range(2):
        items = [outside_item(i) for i in range(10 * f, 10 * f + 10)]
        pq.write_table(pa.table({"item": pa.array(items, pa.binary())}), str(out / f"part-{f}.parquet"))
    return str(out)


def test_spaces_of_outside_episodes_are_inferred_with_a_warning(outside):
    said: list[str] = []
    spaces = resolve_spaces(outside, announce=said.append, who="convert")
    assert spaces.texts == {"observation_space": "graph:F=5", "action_space": "discrete:3"}
    assert spaces.observation_space.edge_space is None and spaces.action_space == gym.spaces.Discrete(3)
    assert spaces.describe() == f"graph:F=5 / discrete:3 ({INFERRED})"
    assert spaces.env is None  # never the demo env
    assert said == [
        "spaces inferred from the data (the first 20 episodes of 2 files): graph:F=5 / discrete:3; "
        f"pin them with {PIN}"
    ]
    # explicit texts: nothing inferred, nothing announced
    pinned = resolve_spaces(
        outside, observation_space="graph:F=5", action_space="discrete:3", announce=said.append
    )
    assert pinned.describe() == "graph:F=5 / discrete:3 (--observation-space / --action-space)"
    assert len(said) == 1


def test_sources_that_disagree_raise_naming_both(tmp_path, outside):
    with pytest.raises(ConfigError) as err:
        resolve_spaces(outside, env="offline_graph/Graph-v0", observation_space="graph:F=5", who="convert")
    assert str(err.value) == (
        "convert: the observation space must be the same in --env offline_graph/Graph-v0 and "
        "--observation-space (found graph:F=16,D=2 and graph:F=5). Give only one of them, or the "
        "one that matches the data."
    )
    meta = {"kind": "episodes", "version": 1, "observation_space": "graph:F=5", "action_space": "discrete:3"}
    path = write_episode_file(tmp_path / "e.parquet", [outside_item(0)], meta)
    with pytest.raises(ConfigError) as err:
        resolve_spaces(path, action_space="discrete:4", who="train")
    assert str(err.value) == (
        "train: the action space must be the same in the file metadata and --action-space (found "
        "discrete:3 and discrete:4). Give only one of them, or the one that matches the data."
    )
    assert resolve_spaces(path).describe() == "graph:F=5 / discrete:3 (the file metadata)"
    # older files name only their env: it stands for their spaces (and is the env to evaluate in)
    old_meta = {"kind": "episodes", "version": 1, "env": "offline_graph/Graph-v0"}
    old = write_episode_file(tmp_path / "old.parquet", [outside_item(0)], old_meta)
    with pytest.raises(ConfigError) as err:
        resolve_spaces(old, observation_space="graph:F=5", who="inspect")
    assert str(err.value).startswith(
        "inspect: the observation space must be the same in the env offline_graph/Graph-v0 recorded "
        "in the file metadata and --observation-space (found graph:F=16,D=2 and graph:F=5)."
    )
    assert resolve_spaces(old).env == "offline_graph/Graph-v0"
    # the command line says the same and starts no job
    from offline_graph.cli import convert as convert_cli

    assert (
        convert_cli.main(["--input", path, "--output", str(tmp_path / "r"), "--action-space", "discrete:4"])
        == 2
    )
    assert not (tmp_path / "r").exists()


def test_configure_resolves_missing_spaces(outside, caplog):
    from ray.rllib.algorithms.bc import BCConfig

    import offline_graph

    config = BCConfig().offline_data(input_=[outside], input_read_episodes=True)
    with caplog.at_level(logging.WARNING, logger="offline_graph.env.data_spaces"):
        offline_graph.configure(config)
    assert offline_graph.space_text(config.observation_space) == "graph:F=5"
    assert config.action_space == gym.spaces.Discrete(3)
    assert caplog.messages == [
        "spaces inferred from the data (the first 20 episodes of 2 files): graph:F=5 / discrete:3; pin "
        "them with config.environment(observation_space=offline_graph.graph_space(5), "
        "action_space=gymnasium.spaces.Discrete(3))"
    ]
    # given spaces win (no inference) and are checked as before
    given = BCConfig().environment(
        observation_space=offline_graph.graph_space(5), action_space=gym.spaces.Discrete(7)
    )
    offline_graph.configure(given.offline_data(input_=[outside], input_read_episodes=True))
    assert given.action_space == gym.spaces.Discrete(7)


def by_hand(fraction: float, seed: int, ids: list[str]) -> list[str]:
    return [
        i
        for i in ids
        if int.from_bytes(hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest(), "big") / 2**64
        < fraction
    ]


def test_holdout_split_is_the_documented_hash():
    assert by_hand(0.1, 0, IDS) == HELD
    assert list(np.array(IDS)[held_out(IDS, 0.1, 0)]) == HELD
    assert by_hand(0.5, 3, IDS) == list(np.array(IDS)[held_out(IDS, 0.5, 3)])
    assert not held_out(IDS, 0.0, 0).any()


def prelearner(outside: str, read_episodes: bool):
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import offline_graph
    from offline_graph import GNNModule, GraphOfflinePreLearner

    config = (
        BCConfig()
        .offline_data(input_=[outside], input_read_episodes=True, prelearner_class=GraphOfflinePreLearner)
        .training(train_batch_size_per_learner=8)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={"hidden": 8, "layers": 1})
        )
    )
    config = offline_graph.configure(config, holdout=0.1)
    config.input_read_episodes = read_episodes
    return GraphOfflinePreLearner(config=config, spaces=(config.observation_space, config.action_space))


def test_prelearner_never_trains_on_held_out_episodes(outside):
    from offline_graph.data.episodes.reader import read_episodes, spec_from_spaces
    from offline_graph.data.learning.transitions import Transitions

    items = [outside_item(i) for i in range(EPISODES)]
    pre = prelearner(outside, read_episodes=True)
    pre({"item": np.array(items, dtype=object)})
    s = pre.stats
    assert (s.episodes_read, s.episodes_used, s.episodes_held_out) == (20, 18, 2)
    assert (s.transitions_used, s.transitions_held_out) == (70 - HELD_STEPS, HELD_STEPS)
    assert len(pre.buffer) == 70 - HELD_STEPS  # what training samples from
    drawn = pre.buffer.sample(500)
    assert {drawn.episode_ids[j] for j in drawn.episode_index} == set(IDS) - set(HELD)

    # converted rows: the same split by eps_id, episodes counted by their t == 0 row
    spec = spec_from_spaces(pre.config.observation_space, pre.config.action_space)
    rows = Transitions.from_episodes(read_episodes(items, [None] * len(items), spec), 0.99).to_arrow()
    pre_rows = prelearner(outside, read_episodes=False)
    out = pre_rows(rows)
    assert out.num_rows == 70 - HELD_STEPS and "eps_id" not in out.column_names
    s = pre_rows.stats
    assert (s.episodes_read, s.episodes_used, s.episodes_held_out) == (20, 18, 2)
    assert (s.transitions_used, s.transitions_held_out) == (70 - HELD_STEPS, HELD_STEPS)


@pytest.mark.slow
def test_convert_and_train_outside_episodes_without_flags(ray_session, outside, tmp_path, capsys):
    """convert with no flag and with explicit spaces; train with no flag: offline metrics on the
    2 held-out episodes, equal to the module's own log-probabilities computed here."""
    import torch

    from offline_graph.cli import convert as convert_cli
    from offline_graph.cli import evaluate as evaluate_cli
    from offline_graph.cli import train as train_cli
    from offline_graph.data.graphs.collate import collate
    from offline_graph.data.graphs.columns import GraphColumns
    from offline_graph.rllib.evaluation.evaluate import restore_module

    rows = str(tmp_path / "rows")
    assert convert_cli.main(["--input", outside, "--output", rows]) == 0
    out, err = capsys.readouterr()
    assert f"spaces: graph:F=5 / discrete:3 ({INFERRED})\n" in out
    assert err == (
        "offline-graph convert: warning: spaces inferred from the data (the first 20 episodes "
        f"of 2 files): graph:F=5 / discrete:3; pin them with {PIN}\n"
    )
    first = sorted(f for f in os.listdir(rows) if f.endswith(".parquet"))[0]
    meta = read_file_metadata(os.path.join(rows, first))
    assert (meta["observation_space"], meta["action_space"], "env" in meta) == (
        "graph:F=5",
        "discrete:3",
        False,
    )
    pinned = str(tmp_path / "rows_pinned")
    assert convert_cli.main(["--input", outside, "--output", pinned, *PIN.split()]) == 0
    out, err = capsys.readouterr()
    assert "spaces: graph:F=5 / discrete:3 (--observation-space / --action-space)\n" in out and err == ""
    report = json.loads((tmp_path / "rows_pinned" / "_conversion_report.json").read_text())
    assert (report["episodes_used"], report["transitions_out"]) == (20, 70)

    ckpt = tmp_path / "bc"
    argv = ["--algo", "bc", "--data", outside, "--checkpoint", str(ckpt), "--iterations", "2"]
    argv += ["--batch-size", "16", "--updates-per-iteration", "2", "--hidden", "8", "--layers", "1"]
    assert train_cli.main(argv) == 0
    out, err = capsys.readouterr()
    # the converted rows, with the spaces pinned: the rows' metadata agrees; same split
    rows_ckpt = tmp_path / "bc_rows"
    argv_rows = [*argv[:3], pinned, "--checkpoint", str(rows_ckpt), *argv[6:], *PIN.split()]
    assert train_cli.main(argv_rows) == 0
    out_rows, err_rows = capsys.readouterr()
    assert f"spaces: graph:F=5 / discrete:3 ({INFERRED})\n" in out and PIN in err
    summary = json.loads((ckpt / "summary.json").read_text())
    m = summary["offline_metrics"]
    assert (m["episodes"], m["transitions"], m["holdout"], m["holdout_seed"]) == (2, HELD_STEPS, 0.1, 0)
    data = summary["data"]
    assert data["env"] is None and summary["normalized_score"] is None and summary["evaluation"] == {}
    assert data["spaces"] == {
        "observation_space": "graph:F=5",
        "action_space": "discrete:3",
        "source": INFERRED,
    }
    r = data["report"]
    assert (r["episodes_read"], r["episodes_used"], r["episodes_held_out"]) == (20, 18, 2)
    assert (r["transitions_used"], r["transitions_held_out"]) == (70 - HELD_STEPS, HELD_STEPS)
    line = (
        f"offline metrics on 2 held-out episodes (9 transitions; --holdout 0.1, seed 0): action "
        f"agreement {m['action_agreement']:.3f} ({m['agreeing']}/9), mean log-likelihood "
        f"{m['mean_log_likelihood']:.4f}\n"
    )
    assert line in out

    assert err_rows == ""
    assert (
        "spaces: graph:F=5 / discrete:3 (the file metadata; agrees with --observation-space / "
        "--action-space)\n" in out_rows
    )
    by_rows = json.loads((rows_ckpt / "summary.json").read_text())
    assert (by_rows["offline_metrics"]["episodes"], by_rows["offline_metrics"]["transitions"]) == (2, 9)
    r = by_rows["data"]["report"]
    assert (r["episodes_read"], r["episodes_used"], r["episodes_held_out"]) == (20, 18, 2)
    assert (r["transitions_used"], r["transitions_held_out"]) == (70 - HELD_STEPS, HELD_STEPS)

    # the same numbers by hand: log-softmax of the restored module's logits on the held-out steps
    module = restore_module(str(ckpt))
    obs, actions = [], []
    for i in (2, 19):
        raw = msgpack.unpackb(outside_item(i), object_hook=mnp.decode, strict_map_key=False)
        obs += raw["observations"]["data"][:-1]
        actions += raw["actions"]["data"]
    batch = {k: torch.from_numpy(v) for k, v in collate(GraphColumns.from_graphs(obs, None)).items()}
    with torch.no_grad():
        logits = module.forward_inference({"obs": batch})["action_dist_inputs"]
    logp = torch.log_softmax(logits, -1).numpy()
    recorded = np.array(actions)
    assert m["agreeing"] == int((logp.argmax(-1) == recorded).sum())
    assert m["action_agreement"] == m["agreeing"] / 9
    assert m["mean_log_likelihood"] == pytest.approx(float(logp[np.arange(9), recorded].mean()), abs=1e-6)

    # evaluate has no env to play in: it says so instead of using the demo env
    with pytest.raises(ConfigError) as info:
        evaluate_cli.run(evaluate_cli.parse_args(["--checkpoint", str(ckpt), "--episodes", "1"]))
    assert str(info.value) == (
        "evaluate: env must be given with --env or recorded in the checkpoint's summary.json (found "
        "neither; the module's spaces are graph:F=5 / discrete:3). Pass --env ID or module:Class "
        "whose spaces match the module; without an env, train reports offline metrics on held-out "
        "episodes."
    )
    with pytest.raises(
        ConfigError, match=r"found graph:F=16,D=2 for --env offline_graph/Graph-v0, graph:F=5"
    ):
        evaluate_cli.run(
            evaluate_cli.parse_args(["--checkpoint", str(ckpt), "--env", "offline_graph/Graph-v0"])
        )
