"""estimate_value(..., module_id=...) on multi-agent episodes whose values are known exactly.

Episodes built with RLlib's MultiAgentEpisode (as its EnvRunners record them): agents "a0"
and "a1" (mapped to module "m") act 2 and 3 steps, uniformly at random between Discrete(2)
actions with the logged ``action_logp = log 1/2``, reward = the action; agent 7 (module
"other", another observation space: not read for "m") acts too. Each "m" agent is one logged
episode of its own steps; with target = behaviour the estimate is the mean of their returns.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

import offline_graph
from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.space_text import graph_space
from tests.helpers import make_graph
from tests.test_ope import SPACE, fixed

OTHER = graph_space(5, None)


def kind(agent_id, episode=None, **kwargs) -> str:
    return "other" if agent_id == 7 else "m"


def episode(i: int, rng: np.random.Generator) -> tuple[MultiAgentEpisode, list[float]]:
    """Agents a0 (2 steps), a1 (3 steps), 7 (3 steps); returns the "m" agents' returns."""
    ep = MultiAgentEpisode(id_=f"e{i}")
    ids = ["a0", "a1", 7]

    def obs(t: int) -> dict:
        out = {a: make_graph(2 + t, 2, F=2, D=None, seed=100 * i + 10 * t + j) for j, a in enumerate(ids[:2])}
        return {**out, 7: {"x": np.ones((3, 5), np.float32), "edge_index": np.zeros((2, 0), np.int64)}}

    ep.add_env_reset(observations=obs(0), infos={a: {} for a in ids})
    returns = {"a0": 0.0, "a1": 0.0}
    for t in range(3):
        acting = [a for a in ids if not (a == "a0" and t == 2)]
        acts = {a: int(rng.integers(0, 2)) for a in acting}
        for a in ("a0", "a1"):
            returns[a] += acts.get(a, 0)
        observations = {a: o for a, o in obs(t + 1).items() if a in acting}
        last = t == 2
        ep.add_env_step(
            observations=observations,
            actions=acts,
            rewards={a: float(v) for a, v in acts.items()},
            terminateds={"a0": True} if t == 1 else ({"__all__": True} if last else {}),
            infos={a: {} for a in observations},
            extra_model_outputs={a: {"action_logp": np.float32(math.log(0.5))} for a in acting},
        )
    return ep, [returns["a0"], returns["a1"]]


@pytest.fixture(scope="module")
def ma_data(tmp_path_factory) -> tuple[str, np.ndarray]:
    rng = np.random.default_rng(0)
    eps, returns = zip(*(episode(i, rng) for i in range(24)))
    path = str(tmp_path_factory.mktemp("ma_ope"))
    offline_graph.write_episodes(
        path,
        list(eps),
        observation_space={"a0": SPACE, "a1": SPACE, 7: OTHER},
        action_space={"a0": gym.spaces.Discrete(2), "a1": gym.spaces.Discrete(2), 7: gym.spaces.Discrete(3)},
    )
    return path, np.array([r for pair in returns for r in pair])


def test_module_value_is_the_mean_agent_return_when_target_is_behaviour(ma_data) -> None:
    path, returns = ma_data
    kw = dict(module_id="m", policy_mapping_fn=kind, gamma=1.0, explore=True, n_boot=20)
    for method in ("wis", "pdis"):
        out = offline_graph.estimate_value(fixed([0.0, 0.0]), [path], method=method, **kw)
        assert out["value"] == pytest.approx(returns.mean(), abs=1e-6)  # float32 logp
        assert out["episodes"] == 48 and out["transitions"] == 24 * (2 + 3)
        assert out["behaviour"] == "logged" and out["ess"] == pytest.approx(48.0)
    # greedy "always 1": only agents whose every action was 1 keep weight; their return is
    # their length, weighted by 2**length (WIS): sum(2^T * T) / sum(2^T) over those agents
    out = offline_graph.estimate_value(fixed([0.0, 1.0]), path, method="wis", **{**kw, "explore": False})
    lengths = np.tile([2, 3], 24)
    all_ones = returns == lengths
    w = 2.0 ** lengths[all_ones]
    assert out["value"] == pytest.approx((w * lengths[all_ones]).sum() / w.sum(), abs=1e-6)


def test_module_id_errors_name_the_fix(ma_data) -> None:
    path, _ = ma_data
    with pytest.raises(ConfigError, match=r"module_id=\.\.\."):
        offline_graph.estimate_value(fixed([0.0, 0.0]), path, method="wis")
    with pytest.raises(ConfigError, match=r"found 'nope'; the agents map to \['m', 'other'\]"):
        offline_graph.estimate_value(
            fixed([0.0, 0.0]), path, method="wis", module_id="nope", policy_mapping_fn=kind
        )


def test_an_agent_logp_that_is_no_log_probability_is_named(tmp_path) -> None:
    ep = MultiAgentEpisode(id_="bad")
    g = {"a0": make_graph(2, 2, F=2, D=None, seed=1)}
    ep.add_env_reset(observations=g, infos={"a0": {}})
    for t in range(2):
        ep.add_env_step(
            observations={"a0": make_graph(3, 2, F=2, D=None, seed=2 + t)},
            actions={"a0": 1},
            rewards={"a0": 1.0},
            terminateds={"__all__": True} if t == 1 else {},
            infos={"a0": {}},
            extra_model_outputs={
                "a0": {"action_logp": np.float32(0.5 if t == 1 else -0.7)}
            },  # t=1: no log-prob
        )
    offline_graph.write_episodes(
        str(tmp_path), [ep], observation_space={"a0": SPACE}, action_space={"a0": gym.spaces.Discrete(2)}
    )
    with pytest.raises(
        ConfigError, match=r"episode 'bad', step t=1: action_logp must be a finite log-probability"
    ):
        offline_graph.estimate_value(
            fixed([0.0, 0.0]), [str(tmp_path)], method="wis", module_id="default_policy"
        )


@pytest.mark.slow
def test_rllib_offline_evaluation_per_module_of_a_multi_agent_config(ray_session, ma_data) -> None:
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    path, returns = ma_data
    spaces = {"m": (SPACE, gym.spaces.Discrete(2)), "other": (OTHER, gym.spaces.Discrete(3))}
    specs = {
        mid: RLModuleSpec(
            module_class=offline_graph.GNNModule,
            observation_space=obs,
            action_space=act,
            model_config={"hidden": 8, "layers": 1},
        )
        for mid, (obs, act) in spaces.items()
    }
    config = (
        BCConfig()
        .environment(
            observation_space=gym.spaces.Dict({"a0": SPACE, "a1": SPACE, 7: OTHER}),
            action_space=gym.spaces.Dict({a: spaces["other" if a == 7 else "m"][1] for a in ("a0", "a1", 7)}),
        )
        .multi_agent(policies=set(specs), policy_mapping_fn=kind)
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        .offline_data(input_=[path], input_read_episodes=True, dataset_num_iters_per_learner=2)
        .training(train_batch_size_per_learner=8, gamma=1.0)
        .evaluation(offline_evaluation_interval=1, offline_evaluation_type="wis", num_offline_eval_runners=0)
    )
    # explore=True: the modules' distributions (a greedy target repeats no logged agent's whole
    # episode here, so every WIS weight is 0 and the value NaN with a warning)
    config = offline_graph.configure(config, seed=0, offline_evaluation={"n_boot": 10, "explore": True})
    algo = config.build_algo()
    try:
        ope = algo.train()["evaluation"]["offline_eval_runners"]
        for mid, agents in (("m", 48), ("other", 24)):
            expected = offline_graph.estimate_value(
                algo.get_module(mid),
                path,
                method="wis",
                gamma=1.0,
                n_boot=10,
                module_id=mid,
                policy_mapping_fn=kind,
                explore=True,
            )
            assert ope[mid]["ope_episodes"] == expected["episodes"] == agents
            assert ope[mid]["ope_value"] == pytest.approx(expected["value"], abs=1e-9)
        # "m"'s logged agents' returns, weighted by the module's probabilities of their actions
        assert min(returns) <= ope["m"]["ope_value"] <= max(returns)
    finally:
        algo.stop()


def test_cli_evaluate_data_estimates_every_module(ma_data, tmp_path, capsys) -> None:
    """``offline-graph evaluate --data`` on a multi-agent checkpoint, in this process (the
    console script in a subprocess: tests/test_ope.py, the same main())."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.cli import evaluate as evaluate_cli
    from offline_graph.rllib.evaluation.checkpoints import MODULE_SUBDIR

    path, _ = ma_data
    spaces = {"m": (SPACE, gym.spaces.Discrete(2)), "other": (OTHER, gym.spaces.Discrete(3))}
    expected = {}
    for mid, (obs, act) in spaces.items():
        module = RLModuleSpec(
            module_class=offline_graph.GNNModule, observation_space=obs, action_space=act
        ).build()
        module.save_to_path(str(tmp_path / "ckpt" / MODULE_SUBDIR / mid))
        expected[mid] = offline_graph.estimate_value(
            module, path, method="wis", gamma=1.0, seed=5, module_id=mid, policy_mapping_fn=kind
        )
    capsys.readouterr()
    code = evaluate_cli.main([
        "--checkpoint", str(tmp_path / "ckpt"), "--data", path, "--method", "wis",
        "--gamma", "1.0", "--seed", "5", "--policy-mapping", "tests.test_ope_multi_agent:kind",
    ])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    for mid, agents in (("m", 48), ("other", 24)):
        est = expected[mid]
        assert (
            f"module {mid}: wis estimate {est['value']:.3f} [{est['ci_low']:.3f}, {est['ci_high']:.3f}]"
            in out.out
        )
        assert f"{agents} episodes" in out.out


def test_an_agent_logp_longer_than_its_steps_is_named(tmp_path) -> None:
    """One logp too many in an agent's row (its 2 steps, 3 entries) is an error, not cut off."""
    import msgpack
    import msgpack_numpy
    import pyarrow.parquet as pq

    from offline_graph.data.episodes.codec import unpack_item

    ep, _ = episode(0, np.random.default_rng(0))
    offline_graph.write_episodes(
        str(tmp_path),
        [ep],
        observation_space={"a0": SPACE, "a1": SPACE, 7: OTHER},
        action_space={"a0": gym.spaces.Discrete(2), "a1": gym.spaces.Discrete(2), 7: gym.spaces.Discrete(3)},
    )
    (path,) = tmp_path.glob("*.parquet")
    table = pq.read_table(path)
    state = unpack_item(table.column("item")[0].as_py())
    (a0,) = [e for e in state["agents"] if e["agent_id"] == "a0"]
    buf = a0["episode"]["extra_model_outputs"]["action_logp"]
    buf["data"] = np.append(np.asarray(buf["data"], np.float32), np.float32(-0.7))
    item = msgpack.packb(state, default=msgpack_numpy.encode)
    pq.write_table(table.set_column(0, "item", [[item]]).replace_schema_metadata(table.schema.metadata), path)
    with pytest.raises(
        ConfigError,
        match=r"episode 'e0': extra_model_outputs\['action_logp'\] must hold "
        r"one log-probability per step \(found 3 for 2 steps\)",
    ):
        offline_graph.estimate_value(
            fixed([0.0, 0.0]), [str(tmp_path)], method="wis", module_id="m", policy_mapping_fn=kind
        )
