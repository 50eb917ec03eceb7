"""Multi-agent episodes: the row format, ``write_episodes``, RLlib's ``from_state`` rebuild, the
prelearner's per-module routing (mapping at read time, equal B per module, value targets per
agent) and the per-module collate. Expected values are computed by hand from the episodes below."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.algorithms.marwil import MARWILConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

import offline_graph
from offline_graph.data.errors import ConfigError, GraphValidationError, SchemaError
from offline_graph.data.store.format import parse_metadata
from offline_graph.data.episodes.multi_agent import decode_multi_agent, unpack
from offline_graph.data.graphs.space_text import graph_space
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.rllib.offline.collate_fn import GraphCollateFn
from offline_graph.rllib.offline.prelearner import GraphOfflinePreLearner
from tests.helpers import map_in_this_process

OBS = {
    "a": graph_space(3, 2),
    7: gym.spaces.Dict({"graph": graph_space(5, None), "odd": gym.spaces.Discrete(2)}),
}
ACT = {"a": gym.spaces.Discrete(2), 7: NodeAction(8)}


def g_a(n: int) -> dict:
    """Agent "a": F=3, D=2, a chain of n nodes."""
    ei = np.array([np.arange(n - 1), np.arange(1, n)], np.int64)
    return {
        "x": np.full((n, 3), n, np.float32),
        "edge_index": ei,
        "edge_attr": np.ones((n - 1, 2), np.float32),
    }


def g_7(n: int) -> dict:
    """Agent 7 (an int id): a Dict observation, a graph (F=5, no edge features, node actions
    with a mask) and a graph-level part ``odd`` (Discrete(2): n % 2, one-hot in ``globals``)."""
    graph = {
        "x": np.full((n, 5), -n, np.float32),
        "edge_index": np.array([[0], [n - 1]], np.int64),
        "action_mask": np.arange(n) % 2 == 0,
    }
    return {"graph": graph, "odd": n % 2}


def episode(eid: str) -> MultiAgentEpisode:
    """env_t 0: a, 7 observe; 1: both act; 2: 7 acts and terminates, "b" joins late (as a's
    module); 3: a and b act, all done. Actions as numpy scalars and Python ints."""
    ep = MultiAgentEpisode(id_=eid)
    ep.add_env_reset(observations={"a": g_a(3), 7: g_7(2)}, infos={"a": {}, 7: {}})
    ep.add_env_step(
        observations={"a": g_a(4), 7: g_7(3)},
        actions={"a": np.int64(1), 7: 0},
        rewards={"a": 1.0, 7: 0.5},
        infos={"a": {}, 7: {}},
    )
    ep.add_env_step(
        observations={"a": g_a(5), 7: g_7(4), "b": g_a(2)},
        actions={"a": 0, 7: np.int32(2)},
        rewards={"a": 0.0, 7: 2.0},
        terminateds={7: True},
        infos={"a": {}, 7: {}, "b": {}},
    )
    ep.add_env_step(
        observations={"a": g_a(6), "b": g_a(3)},
        actions={"a": 1, "b": 1},
        rewards={"a": 2.0, "b": 4.0},
        terminateds={"__all__": True},
        infos={"a": {}, "b": {}},
    )
    return ep


def kind(agent_id, episode=None, **kwargs) -> str:
    return "num" if isinstance(agent_id, int) else "letters"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ma"))
    offline_graph.write_episodes(
        path, [episode(f"e{i}") for i in range(3)], observation_space=OBS, action_space=ACT
    )
    return path


def test_rows_hold_each_agent_steps_and_env_steps(data_dir) -> None:
    table = pq.read_table(f"{data_dir}/episodes-0000000-0000002.parquet")
    meta = parse_metadata(table.schema.metadata)
    assert meta["multi_agent"] is True
    assert meta["agent_spaces"] == {
        "a": {"observation_space": "graph:F=3,D=2", "action_space": "discrete:2"},
        "7": {"observation_space": "dict:graph=graph:F=5;odd=discrete:2", "action_space": "node:8"},
    }
    ma = decode_multi_agent(unpack(table.column("item")[1].as_py()))
    assert ma.id == "e1" and ma.terminated
    agents = {a.agent_id: a for a in ma.agents}
    assert set(agents) == {"a", 7, "b"}  # the int id stays an int
    assert [int(v) for v in agents["a"].raw.actions] == [1, 0, 1]
    assert agents["a"].raw.rewards == [1.0, 0.0, 2.0]
    assert agents["a"].env_t.tolist() == [0, 1, 2, 3]
    assert [int(v) for v in agents[7].raw.actions] == [0, 2]
    assert agents[7].env_t.tolist()[:2] == [0, 1] and agents[7].raw.terminated
    assert agents["b"].env_t.tolist() == [2, 3] and agents["b"].raw.rewards == [4.0]
    step1 = agents[7].raw.observations[1]  # the Dict observation as written: graph and part
    np.testing.assert_array_equal(step1["graph"]["action_mask"], [True, False, True])
    assert int(step1["odd"]) == 1


def test_rllib_from_state_rebuilds_the_episode(data_dir) -> None:
    item = pq.read_table(f"{data_dir}/episodes-0000000-0000002.parquet").column("item")[0].as_py()
    back = offline_graph.to_multi_agent_episode(item)
    orig = episode("e0")
    assert isinstance(back, MultiAgentEpisode) and back.id_ == "e0"
    assert set(back.agent_ids) == {"a", 7, "b"} and back.env_t == orig.env_t == 3
    assert back.get_return() == orig.get_return() == 9.5
    for aid in ("a", 7, "b"):
        assert [int(v) for v in back.agent_episodes[aid].get_actions()] == [
            int(v) for v in orig.agent_episodes[aid].get_actions()
        ]
        assert list(back.agent_episodes[aid].get_rewards()) == list(orig.agent_episodes[aid].get_rewards())
    assert back.is_terminated and len(back) == 3


def test_write_episodes_single_agent_keeps_the_episode_and_refuses_bad_input(tmp_path) -> None:
    sa = SingleAgentEpisode(observation_space=OBS["a"], action_space=ACT["a"])
    sa.add_env_reset(observation=g_a(2))
    sa.add_env_step(observation=g_a(3), action=np.int64(1), reward=1.5, terminated=True)
    files = offline_graph.write_episodes(str(tmp_path / "sa"), [sa])
    assert sa.observation_space is OBS["a"]  # the user's episode is unchanged
    meta = parse_metadata(pq.read_schema(files[0]).metadata)
    assert meta["observation_space"] == "graph:F=3,D=2" and meta["action_space"] == "discrete:2"
    state = unpack(pq.read_table(files[0]).column("item")[0].as_py())
    assert [int(a) for a in SingleAgentEpisode.from_state(state).get_actions()] == [1]
    running = SingleAgentEpisode()
    running.add_env_reset(observation=g_a(2))
    with pytest.raises(ConfigError, match=r"episodes\[0\] .* must be finished"):
        offline_graph.write_episodes(str(tmp_path / "x"), [running])
    with pytest.raises(ConfigError, match=r"episodes\[1\] must be a SingleAgentEpisode"):
        offline_graph.write_episodes(str(tmp_path / "y"), [sa, episode("m")])


def _config(
    data_dir: str,
    algo=BCConfig,
    trained=("letters", "num"),
    mapping=kind,
    learners=0,
    episodes=True,
    **training,
):
    spec = {
        "letters": RLModuleSpec(
            module_class=offline_graph.GNNModule, observation_space=OBS["a"], action_space=ACT["a"]
        ),
        "num": RLModuleSpec(
            module_class=offline_graph.GNNModule, observation_space=OBS[7], action_space=ACT[7]
        ),
    }
    config = (
        algo()
        .environment(observation_space=gym.spaces.Dict(OBS), action_space=gym.spaces.Dict(ACT))
        .multi_agent(policies=set(spec), policy_mapping_fn=mapping, policies_to_train=list(trained))
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=spec))
        .offline_data(
            input_=[data_dir], input_read_episodes=episodes, prelearner_class=GraphOfflinePreLearner
        )
        .training(train_batch_size_per_learner=4, gamma=0.5, **training)
        .learners(num_learners=learners)
    )
    return offline_graph.configure(config)


def _rows(data_dir: str) -> dict:
    table = pq.read_table(f"{data_dir}/episodes-0000000-0000002.parquet")
    return {"item": np.array(table.column("item").to_pylist(), dtype=object)}


def test_prelearner_gives_every_trained_module_the_same_b_and_own_returns(ray_session, data_dir) -> None:
    pre = GraphOfflinePreLearner(config=_config(data_dir))
    out = pre(_rows(data_dir))
    # 3 episodes: "letters" agents a (3 steps) + b (1 step) = 12, "num" agent 7 (2 steps) = 6;
    # k = round(18 / (4 * 2)) = 2 -> 8 rows, each with one transition of each module.
    assert out.num_rows == 8
    assert out.column_names[0].endswith("/actions")  # RLlib counts env steps from it
    assert {c.split("/")[0] for c in out.column_names} == {"letters", "num"}
    assert "num/node_mask" in out.column_names and "letters/edge_attr" in out.column_names
    assert pre.stats.transitions_by_module == {"letters": 12, "num": 6}
    # Returns-to-go with gamma 0.5 of each agent's own rewards: a [1,0,2] -> [1.5, 1, 2];
    # b [4] -> [4]; 7 [0.5, 2] -> [1.5, 2].
    pairs = set(
        zip(out.column("letters/actions").to_pylist(), out.column("letters/value_targets").to_pylist())
    )
    assert pairs <= {(1, 1.5), (0, 1.0), (1, 2.0), (1, 4.0)}
    pairs = set(zip(out.column("num/actions").to_pylist(), out.column("num/value_targets").to_pylist()))
    assert pairs <= {(0, 1.5), (2, 2.0)}
    batch = GraphCollateFn()(out.slice(0, 4))
    assert batch["letters/actions"].shape == (4,) and batch["num/actions"].shape == (4,)
    assert batch["letters/obs/ptr"].shape == (5,) and batch["num/obs/ptr"].shape == (5,)
    assert batch["letters/obs/x"].shape[1] == 3 and batch["num/obs/x"].shape[1] == 5
    assert int(batch["num/obs/action_mask"].sum()) > 0 and "num/obs/edge_attr" not in batch
    x, ptr = batch["num/obs/x"].numpy(), batch["num/obs/ptr"].numpy()
    # agent 7's graphs have N = 2 or 3 nodes, each node's features = -N: no padding rows
    assert all((x[ptr[i] : ptr[i + 1]] == -(ptr[i + 1] - ptr[i])).all() for i in range(4))
    # agent 7's part odd = N % 2, one-hot: one globals row per graph, none for "letters"
    odd = np.diff(ptr) % 2
    np.testing.assert_array_equal(batch["num/obs/globals"].numpy(), np.stack([1 - odd, odd], 1))
    assert "letters/obs/globals" not in batch


def test_untrained_modules_get_no_data_and_mapping_applies_at_read_time(ray_session, data_dir) -> None:
    pre = GraphOfflinePreLearner(config=_config(data_dir, trained=("num",)))
    out = pre(_rows(data_dir))
    assert {c.split("/")[0] for c in out.column_names} == {"num"}
    assert pre.stats.transitions_by_module == {"num": 6} and pre.stats.agent_steps_unused == 12
    # Another mapping over the same files: everyone to "letters" fails on agent 7's F=5 graphs
    everyone = GraphOfflinePreLearner(config=_config(data_dir, mapping=lambda aid, ep, **kw: "letters"))
    with pytest.raises(GraphValidationError, match=r"agent 7 \(module 'letters'\)"):
        everyone(_rows(data_dir))
    unknown = GraphOfflinePreLearner(config=_config(data_dir, mapping=lambda aid, ep, **kw: "nobody"))
    with pytest.raises(
        ConfigError, match=r"must map to one of the modules \['letters', 'num'\] \(found 'nobody'\)"
    ):
        unknown(_rows(data_dir))


def check_trained_modules(config, result: dict, algo, episodes: bool = True) -> None:
    """Both modules trained (finite losses), get_module("num") is the node-action GNNModule and
    (episodes) data_report counts each module's transitions: every read of the 3 episodes
    gives "num" 6 (agent 7's 2 steps each) and "letters" 12 (a's 3 + b's 1)."""
    losses = {m: result["learners"][m]["policy_loss"] for m in ("letters", "num")}
    assert all(np.isfinite(float(v)) for v in losses.values())
    module = algo.get_module("num")
    assert isinstance(module, offline_graph.GNNModule) and module.action_space == ACT[7]
    if not episodes:  # rows: the prelearner counts no transitions per module
        return
    report = offline_graph.data_report(config)
    assert report["transitions_by_module"]["num"] % 6 == 0 and report["transitions_by_module"]["num"] > 0
    assert report["transitions_by_module"]["letters"] == 2 * report["transitions_by_module"]["num"]


@pytest.fixture(scope="module")
def rows_dir(data_dir, tmp_path_factory) -> str:
    """The episodes of ``data_dir`` converted to rows (gamma 0.5: the value targets)."""
    from offline_graph.jobs.ma_convert import MultiAgentConvertConfig, convert_multi_agent

    out = str(tmp_path_factory.mktemp("ma_rows") / "rows")
    convert_multi_agent(MultiAgentConvertConfig(input=data_dir, output=out, gamma=0.5, num_workers=1))
    return out


def test_marwil_trains_each_module_of_converted_rows_on_two_ddp_learners(ray_session, rows_dir) -> None:
    """MARWIL on 2 DDP learners (a MultiRLModule on each, value heads too) from the converted
    rows (the mapping applied at read time): both modules, the Discrete one and the NodeAction
    one (the selection head's DDP case: each learner's batch has its own [B, M] layout),
    train and hold bit-identical weights on both learners after the updates. Episodes on a
    local learner, with data_report's per-module counts (kept by the prelearner, the same for
    any number of learners): test_no_env_no_config_spaces_trains_saves_and_restores (MARWIL)
    and BC in tests/test_ope_multi_agent.py. Over 20 s: its 2 remote learner actors (~15 s on
    a 2-CPU machine)."""
    config = _config(rows_dir, algo=MARWILConfig, learners=2, episodes=False, beta=1.0)
    algo = config.build_algo()
    try:
        check_trained_modules(config, algo.train(), algo, episodes=False)
        states = [
            r.get()
            for r in algo.learner_group.foreach_learner(
                lambda lr: {
                    m: {k: v.detach().cpu().numpy() for k, v in lr.module[m].state_dict().items()}
                    for m in ("letters", "num")
                }
            )
        ]
        assert len(states) == 2
        for m in ("letters", "num"):
            assert states[0][m].keys() == states[1][m].keys() and states[0][m]
            for key in states[0][m]:
                np.testing.assert_array_equal(states[0][m][key], states[1][m][key], err_msg=f"{m} {key}")
    finally:
        algo.stop()


def test_converted_rows_give_joint_rows_with_the_mapping_applied_at_read_time(ray_session, rows_dir) -> None:
    """The prelearner on converted rows (training on them:
    test_marwil_trains_each_module_of_converted_rows_on_two_ddp_learners)."""
    out = rows_dir
    config = _config(out, episodes=False)
    rows = pq.read_table(out)
    pre = GraphOfflinePreLearner(config=config)
    table = pre(rows)
    # 18 agent steps: letters 12, num 6 -> k = round(18 / 8) = 2 -> 8 joint rows
    assert table.num_rows == 8 and {c.split("/")[0] for c in table.column_names} == {"letters", "num"}
    pairs = set(zip(table.column("num/actions").to_pylist(), table.column("num/value_targets").to_pylist()))
    assert pairs <= {(0, 1.5), (2, 2.0)}
    widths = GraphCollateFn()(table.slice(0, 4))
    assert widths["letters/obs/x"].shape[1] == 3 and widths["num/obs/x"].shape[1] == 5
    # the same rows under a mapping that sends agent 7 to the F=3 module: a clear width error
    wrong = GraphOfflinePreLearner(
        config=_config(out, mapping=lambda aid, ep, **kw: "letters", episodes=False)
    )
    with pytest.raises(
        SchemaError, match=r"module 'letters', column 'x': every row's inner lists must have width 3"
    ):
        wrong(rows)


def test_multi_agent_config_with_env_evaluation_gets_graph_runner(ray_session, data_dir) -> None:
    from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner

    from offline_graph.rllib.env.ma_env_runner import GraphMultiAgentEnvRunner

    def config(runner: type | None = None) -> BCConfig:
        spec = MultiRLModuleSpec(
            rl_module_specs={
                m: RLModuleSpec(
                    module_class=offline_graph.GNNModule, observation_space=OBS[a], action_space=ACT[a]
                )
                for m, a in (("letters", "a"), ("num", 7))
            }
        )
        return (
            BCConfig()
            .environment("offline_graph/Team-v0")
            .env_runners(env_runner_cls=runner)
            .multi_agent(policies={"letters", "num"}, policy_mapping_fn=kind)
            .rl_module(rl_module_spec=spec)
            .offline_data(
                input_=[data_dir], input_read_episodes=True, prelearner_class=GraphOfflinePreLearner
            )
            .evaluation(evaluation_interval=1)
        )

    configured = offline_graph.configure(config())
    assert configured.env_runner_cls is GraphMultiAgentEnvRunner
    assert configured.evaluation_config == {"explore": False} and configured.num_cpus_per_env_runner == 0.25
    with pytest.raises(ConfigError, match=r"must be offline_graph's GraphMultiAgentEnvRunner or a subclass"):
        offline_graph.configure(config(MultiAgentEnvRunner))


def test_no_env_no_config_spaces_trains_saves_and_restores(ray_session, data_dir, tmp_path) -> None:
    """Only the module specs carry spaces (as RLlib users write them): configure fills the
    policies' and the config's spaces from them; MARWIL trains both modules on a local learner
    (check_trained_modules); get_module and from_checkpoint work. RLlib reads the episodes at
    the build; the prelearner maps them in this process (``map_in_this_process``: its Ray Data
    actor maps multi-agent rows in the DDP test above)."""
    from ray.rllib.algorithms.algorithm import Algorithm

    specs = {
        "letters": RLModuleSpec(
            module_class=offline_graph.GNNModule, observation_space=OBS["a"], action_space=ACT["a"]
        ),
        "num": RLModuleSpec(
            module_class=offline_graph.GNNModule, observation_space=OBS[7], action_space=ACT[7]
        ),
    }
    config = (
        MARWILConfig()
        .multi_agent(policies={"letters", "num"}, policy_mapping_fn=kind)
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        .offline_data(input_=[data_dir], input_read_episodes=True, prelearner_class=GraphOfflinePreLearner)
        .training(train_batch_size_per_learner=4)
    )
    config = offline_graph.configure(config)
    assert config.policies["num"].observation_space == OBS[7]
    assert config.observation_space["letters"] == OBS["a"]
    algo = config.build_algo()
    try:
        map_in_this_process(algo)  # the prelearner (and so data_report's counts) in this process
        check_trained_modules(config, algo.train(), algo)  # on a local learner
        weights = algo.get_module("num").state_dict()
        algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(str(tmp_path / "ckpt"))
    try:
        back = restored.get_module("num").state_dict()
        assert set(back) == set(weights) and all((back[k] == weights[k]).all() for k in weights)
    finally:
        restored.stop()
