"""estimate_value on tiny logged episodes whose values are known exactly.

Data: 2-step episodes of small random graphs, Discrete(2) actions drawn uniformly at random
(logged action_logp = log 1/2), reward = the action (1 or 0), terminated after step 2. The
greedy target "always 1" has value 1 + gamma; the uniform target has the behaviour's value.
"""

from __future__ import annotations

import math
import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

from offline_graph import estimate_value
from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.space_text import graph_space
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.rllib.offline.episodes import encode_episode
from offline_graph.rllib.core.gnn_module import GNNModule
from tests.helpers import make_graph, write_episode_file

GAMMA = 0.5
SPACE = graph_space(2, None)


class FixedLogits(TorchRLModule):
    """A policy with the same logits ``model_config["logits"]`` on every graph."""

    def setup(self) -> None:
        self.logits = torch.nn.Parameter(torch.tensor(self.model_config["logits"], dtype=torch.float32))

    def _forward(self, batch: dict, **kwargs) -> dict:
        num_graphs = batch[Columns.OBS]["ptr"].numel() - 1
        return {Columns.ACTION_DIST_INPUTS: self.logits.expand(num_graphs, -1)}


def fixed(logits: list[float]) -> FixedLogits:
    spec = RLModuleSpec(
        module_class=FixedLogits,
        observation_space=SPACE,
        action_space=gym.spaces.Discrete(2),
        model_config={"logits": logits},
    )
    return spec.build()  # type: ignore[return-value]


def logged_episodes(path, episodes: int = 48, logp: bool = True, seed: int = 0) -> tuple[str, np.ndarray]:
    """An episode file of the module doc's data; returns (path, the logged returns at GAMMA)."""
    rng = np.random.default_rng(seed)
    items, returns = [], []
    for i in range(episodes):
        obs = [
            make_graph(int(rng.integers(2, 5)), 2, F=2, D=None, seed=seed * 1000 + 3 * i + j)
            for j in range(3)
        ]
        acts = rng.integers(0, 2, size=2)
        rews = acts.astype(float)
        items.append(
            encode_episode(
                obs,
                acts.tolist(),
                rews.tolist(),
                terminated=True,
                truncated=False,
                episode_id=f"e{i}",
                action_logp=[math.log(0.5)] * 2 if logp else None,
            )
        )
        returns.append(rews[0] + GAMMA * rews[1])
    return write_episode_file(path, items), np.array(returns)


def actions_per_episode(path: str) -> np.ndarray:
    from offline_graph.data.episodes.logged import load_logged
    from offline_graph.data.episodes.reader import spec_from_spaces

    logged = load_logged(path, spec_from_spaces(SPACE, gym.spaces.Discrete(2)))
    return np.add.reduceat(logged.trans.actions, logged.ptr[:-1]).astype(float)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[str, np.ndarray]:
    return logged_episodes(tmp_path_factory.mktemp("ope") / "logs.parquet")


@pytest.mark.parametrize("method", ["wis", "pdis"])
def test_target_equal_to_behaviour_gives_the_logged_mean_return(data, method) -> None:
    path, returns = data
    out = estimate_value(fixed([0.0, 0.0]), [path], method=method, gamma=GAMMA, explore=True, n_boot=50)
    assert out["value"] == pytest.approx(returns.mean(), abs=1e-12)
    assert out["behaviour"] == "logged" and out["ess"] == pytest.approx(48.0)
    assert out["episodes"] == 48 and out["transitions"] == 96 and out["clipped"] == 0.0
    assert out["ci_low"] <= out["value"] <= out["ci_high"] and not out["warnings"]
    # gamma 1: the undiscounted return, the mean number of 1-actions
    undiscounted = estimate_value(fixed([0.0, 0.0]), path, method=method, gamma=1.0, explore=True, n_boot=0)
    assert undiscounted["value"] == pytest.approx(actions_per_episode(path).mean(), abs=1e-12)


@pytest.mark.parametrize("method", ["wis", "pdis"])
def test_deterministic_target_exact_value(data, method) -> None:
    path, _ = data
    # greedy "always 1": only episodes with both actions 1 keep weight; each returns 1 + gamma
    out = estimate_value(fixed([0.0, 1.0]), path, method=method, gamma=GAMMA, n_boot=20)
    assert out["value"] == pytest.approx(1 + GAMMA, abs=1e-12)
    assert out["ess"] < 48


def test_bc_behaviour_when_logs_have_no_logp(tmp_path) -> None:
    path, _ = logged_episodes(tmp_path / "nologp.parquet", episodes=24, logp=False, seed=1)
    module = fixed([0.0, 1.0])
    out = estimate_value(
        module, path, method="wis", gamma=GAMMA, n_boot=10, bc_epochs=1, q_model={"hidden": 8}
    )
    assert out["behaviour"] == "bc" and any("action_logp" in w for w in out["warnings"])
    assert out["value"] == pytest.approx(1 + GAMMA, abs=1e-9)  # weighted: any mu > 0 gives it
    with pytest.raises(ConfigError, match="behaviour='logged'"):
        estimate_value(module, path, method="wis", behaviour="logged", n_boot=0)


def test_fqe_and_dr_close_to_the_true_value(data) -> None:
    path, _ = data
    kw = dict(gamma=GAMMA, n_boot=20, epochs=40, batch_size=16, lr=1e-2, q_model={"hidden": 16, "layers": 1})
    fqe = estimate_value(fixed([0.0, 1.0]), path, method="fqe", **kw)
    assert fqe["value"] == pytest.approx(1 + GAMMA, abs=0.15)
    assert fqe["ess"] is None and fqe["fqe_loss"] < 0.05
    assert fqe["fqe_iterations"] == 40  # epochs=40: one iteration per epoch
    dr = estimate_value(fixed([0.0, 1.0]), path, method="dr", **kw)
    assert dr["value"] == pytest.approx(1 + GAMMA, abs=0.1)
    # the logs carry action_logp: the FQE interval also holds the DR interval (same model)
    assert fqe["ci_low"] <= min(fqe["value"], dr["ci_low"]) and fqe["ci_high"] >= max(
        fqe["value"], dr["ci_high"]
    )
    assert dr["fqe"]["ci_low"] == fqe["ci_low"] and dr["fqe"]["ci_high"] == fqe["ci_high"]


def test_fqe_interval_without_logp_is_the_heads_and_with_logp_holds_dr(tmp_path) -> None:
    path, _ = logged_episodes(tmp_path / "nologp.parquet", episodes=48, logp=False)
    kw = dict(gamma=GAMMA, n_boot=20, batch_size=16, lr=1e-2, q_model={"hidden": 16, "layers": 1})
    fqe = estimate_value(fixed([0.0, 1.0]), path, method="fqe", epochs=40, **kw)
    # 10 bootstrap heads (default): value -+ 1.96 sd of the heads' values, around the value
    assert fqe["ci_low"] < fqe["value"] < fqe["ci_high"]
    assert fqe["ci_high"] - fqe["value"] == pytest.approx(fqe["value"] - fqe["ci_low"], abs=1e-9)
    # under-fit (1 epoch of 6 gradient steps at lr 1e-5) on logs with action_logp: far below
    # 1 + gamma; the DR estimate corrects it, and FQE's interval is widened to hold DR's
    with_logp, _ = logged_episodes(tmp_path / "logp.parquet", episodes=48)
    kw["lr"] = 1e-5
    short = estimate_value(fixed([0.0, 1.0]), with_logp, method="fqe", epochs=1, **kw)
    dr = estimate_value(fixed([0.0, 1.0]), with_logp, method="dr", epochs=1, **kw)
    assert short["value"] < 1.0 and dr["value"] == pytest.approx(1 + GAMMA, abs=0.1)
    assert short["ci_low"] <= short["value"] and short["ci_high"] == dr["ci_high"]
    assert any("outside the doubly robust interval" in w for w in short["warnings"])
    assert not any("doubly robust" in w for w in fqe["warnings"])


def test_hold_dr_by_hand() -> None:
    from offline_graph.rllib.ope.estimate import _hold_dr

    fqe = {"value": 1.0, "ci_low": 0.8, "ci_high": 1.2}
    assert _hold_dr(fqe, {"ci_low": 1.5, "ci_high": 2.0}, warn=True)[0].startswith("fqe: the estimate 1 ")
    assert (fqe["ci_low"], fqe["ci_high"]) == (0.8, 2.0)
    inside = {"value": 1.0, "ci_low": 0.9, "ci_high": 1.1}
    assert _hold_dr(inside, {"ci_low": 0.5, "ci_high": 1.05}, warn=True) == []
    assert (inside["ci_low"], inside["ci_high"]) == (0.5, 1.1)
    nan = {"value": 1.0, "ci_low": 0.9, "ci_high": 1.1}
    assert _hold_dr(nan, {"ci_low": float("nan"), "ci_high": float("nan")}, warn=True) == []
    assert (nan["ci_low"], nan["ci_high"]) == (0.9, 1.1)


def test_node_action_target_probabilities_and_fqe_shapes(tmp_path) -> None:
    from offline_graph.data.episodes.logged import load_logged
    from offline_graph.data.episodes.reader import spec_from_spaces
    from offline_graph.rllib.ope.ope_policy import target_choices

    space = graph_space(2, None)
    spec = RLModuleSpec(module_class=GNNModule, observation_space=space, action_space=NodeAction(8))
    module = spec.build()
    rng = np.random.default_rng(0)
    items = []
    for i in range(6):
        obs = [make_graph(n, 2, F=2, D=None, seed=10 * i + n) for n in (3, 5, 2)]
        acts = [int(rng.integers(0, len(o["x"]))) for o in obs[:2]]
        items.append(
            encode_episode(obs, acts, [1.0, 0.0], terminated=False, truncated=True, episode_id=f"n{i}")
        )
    path = write_episode_file(tmp_path / "node.parquet", items)
    logged = load_logged(path, spec_from_spaces(space, NodeAction(8)))
    pi = target_choices(module, logged.trans.obs, explore=True)
    sums = np.add.reduceat(pi.probs, pi.ptr[:-1])
    np.testing.assert_allclose(sums, 1.0, atol=1e-6)
    assert np.array_equal(np.diff(pi.ptr), logged.trans.obs.num_nodes)
    greedy = target_choices(module, logged.trans.obs, explore=False)
    assert set(np.unique(greedy.probs)) <= {0.0, 1.0} and greedy.probs.sum() == len(logged.trans)
    out = estimate_value(module, path, method="dr", gamma=0.9, n_boot=5, epochs=1, bc_epochs=1)
    assert np.isfinite(out["value"]) and out["behaviour"] == "bc"


def test_bad_arguments(data) -> None:
    path, _ = data
    with pytest.raises(ConfigError, match="method must be one of"):
        estimate_value(fixed([0.0, 0.0]), path, method="is")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="gamma must be in"):
        estimate_value(fixed([0.0, 0.0]), path, method="wis", gamma=1.5)
    # each setting out of range is refused before any work (an FQE of 0 iterations returned
    # the untrained model's value, n_boot=1 a zero-width interval beside the value)
    bad = {
        "horizon": (0, "horizon must be an int >= 1 or None (found 0)"),
        "epochs": (-2, "epochs must be an int >= 1 or None (found -2)"),
        "n_boot": (1, "n_boot must be 0 (no interval: NaN) or an int >= 2 (found 1)"),
        "fqe_heads": (-1, "fqe_heads must be an int >= 0 (found -1)"),
        "batch_size": (0, "batch_size must be an int >= 1 (found 0)"),
        "bc_epochs": (0, "bc_epochs must be an int >= 1 (found 0)"),
        "lr": (-1.0, "lr must be a number > 0 (found -1.0)"),
        "tau": (2.0, "tau must be in (0, 1] or None (found 2.0)"),
    }
    for name, (value, message) in bad.items():
        with pytest.raises(ConfigError, match=re.escape(f"estimate_value: {message}")):
            estimate_value(fixed([0.0, 0.0]), path, method="fqe", **{name: value})
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec

    one = RLModuleSpec(module_class=GNNModule, observation_space=SPACE, action_space=gym.spaces.Discrete(2))
    multi = MultiRLModuleSpec(rl_module_specs={"p0": one, "p1": one}).build()
    with pytest.raises(
        ConfigError, match=re.escape("MultiRLModule of the modules ['p0', 'p1']). Pass module_id=")
    ):
        estimate_value(multi, path, method="wis")
    none = estimate_value(fixed([0.0, 0.0]), path, method="wis", gamma=1.0, n_boot=0)
    assert math.isnan(none["ci_low"]) and math.isnan(none["ci_high"]) and math.isfinite(none["value"])


def test_cli_evaluate_data_prints_the_estimate(data, tmp_path, capsys) -> None:
    """``offline-graph evaluate --data`` in this process (``evaluate.main``, as the console
    script calls it; the console script itself, its exit codes and stderr:
    tests/test_clean_runs.py and tests/test_cli_errors.py)."""
    from offline_graph.cli import evaluate as evaluate_cli
    from offline_graph.rllib.evaluation.checkpoints import MODULE_SUBDIR

    path, _ = data
    spec = RLModuleSpec(module_class=GNNModule, observation_space=SPACE, action_space=gym.spaces.Discrete(2))
    module = spec.build()
    module.save_to_path(str(tmp_path / "ckpt" / MODULE_SUBDIR / "default_policy"))
    expected = estimate_value(module, path, method="pdis", gamma=1.0, n_boot=200, seed=7)
    out = tmp_path / "res.json"
    assert evaluate_cli.main([
        "--checkpoint", str(tmp_path / "ckpt"), "--data", path, "--method", "pdis",
        "--gamma", "1.0", "--seed", "7", "--output", str(out),
    ]) == 0  # fmt: skip
    printed = capsys.readouterr()
    assert (
        f"pdis estimate {expected['value']:.3f} [{expected['ci_low']:.3f}, {expected['ci_high']:.3f}]"
        in printed.out
    ), printed
    assert "48 episodes, 96 transitions" in printed.out and "behaviour logged" in printed.out
    # FQE reports its progress on stderr: the first and the last iteration (and one per 10 s);
    # the last one's estimate, mean V(s_0) over the episodes, is the printed value
    assert evaluate_cli.main([
        "--checkpoint", str(tmp_path / "ckpt"), "--data", path, "--method", "fqe",
        "--gamma", "1.0", "--fqe-epochs", "3",
    ]) == 0  # fmt: skip
    fqe = capsys.readouterr()
    steps = re.findall(r"fqe iteration (\d) of 3: loss [-\d.e+]+, estimate ([-\d.e+]+)", fqe.err)
    assert [s for s, _ in steps] == ["1", "3"], fqe.err
    value = re.search(r"fqe estimate ([-\d.]+) ", fqe.out)
    assert value is not None and float(value.group(1)) == pytest.approx(float(steps[-1][1]), abs=2e-3)
    with pytest.raises(SystemExit) as bad:
        evaluate_cli.main(["--policy", "random", "--data", path])
    assert bad.value.code == 2 and "--data must come with --checkpoint" in capsys.readouterr().err
