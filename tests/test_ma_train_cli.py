"""`offline-graph train --multi-agent` on recorded Team-v0 episodes: modules and spaces from the
data, per-module outputs, and `offline-graph evaluate` restoring every module with the same
mapping (same seeded episodes: the same returns as train's own evaluation)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from offline_graph.cli import evaluate, ma_train, record, train
from offline_graph.cli.train import parse_args
from offline_graph.data.errors import ConfigError
from offline_graph.data.store.files import scan_files

ENV = "offline_graph/Team-v0"


@pytest.fixture(scope="module")
def team_data(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("team") / "expert")
    cfg = record.Config(output=out, env=ENV, policy="expert", episodes=12, seed=0, progress=False)
    record.run(cfg)
    return out


def plan(data: str, *extra: str) -> ma_train.ModulePlan:
    cfg = parse_args(["--multi-agent", "--algo", "bc", "--data", data, "--checkpoint", "/tmp/x", *extra])
    mapping = evaluate.load_mapping_fn(cfg.policy_mapping) if cfg.policy_mapping else None
    return ma_train.plan_modules(cfg, scan_files(data, "raise"), mapping)


def test_modules_and_spaces_from_recorded_ids(team_data):
    p = plan(team_data)
    assert sorted(p.spaces) == ["color", "pick"] and p.trained == ["color", "pick"]
    assert p.agents == {"color": ["color_0", "color_1"], "pick": ["pick_0", "pick_1"]}
    assert p.texts("color")["observation_space"] == "graph:F=8,D=2"
    assert p.texts("color")["action_space"] == "discrete:4"
    assert p.texts("pick")["observation_space"] == "graph:F=3,D=1"
    assert p.texts("pick")["action_space"] == "node:64"
    assert sorted(p.agent_spaces[0]) == ["color_0", "color_1", "pick_0", "pick_1"]
    # --policy-mapping gives the same modules here; --train-modules picks what trains.
    q = plan(
        team_data,
        "--policy-mapping",
        "offline_graph.env.team:team_policy_mapping_fn",
        "--train-modules",
        "pick",
    )
    assert q.agents == p.agents and q.trained == ["pick"]


def test_module_flags_refused(team_data):
    # agents of both kinds mapped to one module: their spaces differ
    with pytest.raises(ConfigError, match=r"module 'default_policy' must share one observation"):
        plan(team_data, "--policy-mapping", "tests.test_ma_train_cli:one_module")
    with pytest.raises(ConfigError, match=r"every agent must map to one of --modules \['color'\]"):
        plan(team_data, "--modules", "color")
    with pytest.raises(ConfigError, match=r"every module must have spaces \(found none for \['other'\]"):
        plan(team_data, "--modules", "color,pick,other")
    extra = '{"other": {"observation_space": "graph:F=2", "action_space": "discrete:3"}}'
    p = plan(team_data, "--modules", "color,pick,other", "--module-spaces", extra, "--train-modules", "color")
    assert p.texts("other")["source"] == "--module-spaces" and p.agents["other"] == []
    with pytest.raises(SystemExit):  # multi-agent flags without --multi-agent
        parse_args(["--algo", "bc", "--data", team_data, "--checkpoint", "/tmp/x", "--modules", "a"])
    with pytest.raises(ConfigError, match="multi-agent episode files .* Pass --multi-agent"):
        train.run(parse_args(["--algo", "bc", "--data", team_data, "--checkpoint", "/tmp/x"]))


def one_module(agent_id, episode=None, **kw) -> str:
    return "default_policy"


@pytest.mark.slow
def test_train_then_evaluate_per_module(ray_session, team_data, tmp_path, capsys):
    """Also RLlib's own evaluation during training (--eval-interval 2, GraphMultiAgentEnvRunner):
    its per-module return (per episode the sum over the module's agents) agrees within noise
    with the same modules played by evaluate_multi_agent_module on other seeded episodes."""
    from offline_graph.env.team import TeamEnv
    from offline_graph.rllib.evaluation.ma_evaluation import (
        env_mapping,
        evaluate_multi_agent_module,
        restore_modules,
    )

    ckpt = tmp_path / "run"
    args = ["--multi-agent", "--algo", "marwil", "--data", team_data, "--checkpoint", str(ckpt)]
    args += [
        "--iterations",
        "2",
        "--updates-per-iteration",
        "2",
        "--batch-size",
        "32",
        "--eval-episodes",
        "30",
    ]
    assert train.main([*args, "--layers", "1", "--hidden", "16", "--eval-interval", "2"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((ckpt / "summary.json").read_text())
    assert summary["config"]["multi_agent"] is True and summary["data"]["env"] == ENV
    report = summary["data"]["report"]
    assert report["episodes_used"] == 12 and report["episodes_rejected"] == 0
    assert set(report["transitions_by_module"]) == {"color", "pick"}
    for mid in ("color", "pick"):
        entry = summary["modules"][mid]
        assert (
            Path(entry["curve"]).name == f"learning_curve_{mid}.png" and Path(entry["curve"]).stat().st_size
        )
        assert [h["iteration"] for h in entry["history"]] == [1, 2]
        assert all(h["policy_loss"] is not None and h["vf_loss"] is not None for h in entry["history"])
        # RLlib evaluated at iteration 2 only (--eval-interval 2)
        assert [h["eval_return"] is None for h in entry["history"]] == [True, False]
        assert (Path(entry["module_dir"]) / "module_state.pkl").exists()
        ev = entry["evaluation"]
        assert ev["expert_return"] == 10.0 and ev["agent_episodes"] >= 30
        assert entry["normalized_score"] == ev["normalized"]
        assert f"module {mid}: mean return {ev['mean_return']:.2f}" in printed

    modules, env = restore_modules(str(ckpt)), TeamEnv()
    sums: dict[str, list[float]] = {"color": [], "pick": []}
    for seed in range(40):  # per episode, each module's sum over its agents (RLlib's unit)
        one = evaluate_multi_agent_module(modules, env, 1, seed, env_mapping(env), baselines=False)
        for mid, m in one["per_module"].items():
            sums[mid].append(m["mean_return"] * m["agent_episodes"])
    for mid, xs in sums.items():
        ours, spread = float(np.mean(xs)), float(np.std(xs, ddof=1))
        rllib = summary["modules"][mid]["history"][-1]["eval_return"]
        assert abs(rllib - ours) <= 4 * spread * np.sqrt(1 / 30 + 1 / 40) + 1e-9, (mid, rllib, ours, spread)

    out = tmp_path / "eval.json"
    assert evaluate.main(["--checkpoint", str(ckpt), "--episodes", "30", "--output", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["modules"] == ["color", "pick"]
    for mid in ("color", "pick"):  # same seeds, same mapping, restored weights: equal returns
        assert res["per_module"][mid]["mean_return"] == summary["modules"][mid]["evaluation"]["mean_return"]
        assert (
            res["per_module"][mid]["agent_episodes"]
            == summary["modules"][mid]["evaluation"]["agent_episodes"]
        )
