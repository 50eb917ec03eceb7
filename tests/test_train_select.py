"""``offline-graph train --select-by``: an off-policy estimate at every checkpoint, the best one
kept as the run's checkpoint (also across --resume), and the selector under it (checked on the
algorithm of the killed run of the --resume test: no build of its own)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from offline_graph.cli import train as train_cli
from offline_graph.cli.train_config import Config
from offline_graph.cli.train_resume import identity, resume_point, save_progress
from offline_graph.cli.train_select import resumed_estimates
from offline_graph.data.errors import ConfigError
from offline_graph.rllib.evaluation.checkpoint_selection import CheckpointSelector

ROOT = Path(__file__).resolve().parents[1]
MIXED = str(ROOT / "sample_data" / "mixed")  # 300 episodes of the eps-0.5 expert, no action_logp
ARGS = [
    "--algo", "bc", "--data", MIXED, "--num-learners", "0", "--batch-size", "64",
    "--updates-per-iteration", "2", "--hidden", "16", "--eval-episodes", "0", "--holdout", "0.2",
    "--checkpoint-every", "1",
]  # fmt: skip


def reestimate(ckpt: Path, sel: dict) -> dict:
    """The output checkpoint's module (restored as `offline-graph evaluate` does) estimated
    directly with the selection's settings on the same held-out episodes."""
    import offline_graph
    from offline_graph.data.episodes.logged import held_out_episodes, load_logged
    from offline_graph.data.episodes.reader import spec_from_spaces

    module = offline_graph.restore_module(str(ckpt))
    spec = spec_from_spaces(module.observation_space, module.action_space)
    held = held_out_episodes(load_logged(MIXED, spec), 0.2, 0)
    return offline_graph.estimate_value(
        module, held, method=sel["method"], gamma=sel["gamma"], explore=sel["explore"], seed=0,
        n_boot=100, bc_epochs=5, epochs=sel.get("epochs", 10),
    )  # fmt: skip


def check_selection(ckpt: Path, its: list[int], out: str) -> dict:
    """summary.json lists every checkpoint's estimate, picks the first argmax, and the
    checkpoint holds that module; returns the selection."""
    summary = json.loads((ckpt / "summary.json").read_text())
    sel = summary["selection"]
    assert [c["iteration"] for c in sel["checkpoints"]] == its
    values = [c["value"] for c in sel["checkpoints"]]
    assert [h["estimate"]["value"] for h in summary["history"]] == values
    assert all(lo <= v <= hi for v, (lo, hi) in zip(values, (c["ci"] for c in sel["checkpoints"])))
    assert sel["best_iteration"] == its[int(np.argmax(values))]  # argmax: the first of equal ones
    assert summary["checkpoint_iteration"] == sel["best_iteration"] and sel["best_value"] == max(values)
    assert sel["data"] == "held-out episodes" and sel["episodes"] > 0
    assert f"selected iteration {sel['best_iteration']} of {its[-1]}" in out
    assert not (ckpt / "selection").exists()  # the kept algorithms are gone, DIR holds the best
    again = reestimate(ckpt, sel)
    assert again["episodes"] == sel["episodes"]
    assert again["value"] == pytest.approx(sel["best_value"], abs=1e-6)
    return sel


def check_selector_ties_and_restore(algo, real_train, directory: Path) -> None:
    """CheckpointSelector on a trained BC algorithm: two offers of the same weights tie and the
    earlier one is the best (only its algorithm is kept); after more training restore_best
    puts exactly its weights back; clear deletes the directory."""
    import torch

    from offline_graph.env.making import make_env
    from offline_graph.rllib.ope.ope_runner import evaluation_episodes

    env = make_env("offline_graph/Graph-v0")
    episodes, in_sample = evaluation_episodes(MIXED, env.observation_space, env.action_space, 0.2, 0)
    assert not in_sample
    selector = CheckpointSelector(episodes, "wis", 0.99, str(directory), options={"explore": True})
    first = selector.offer(algo, 1)
    second = selector.offer(algo, 2, keep=False)  # the same weights: a tie
    assert first["value"] == second["value"] and first["best"] and not second["best"]
    assert [p.name for p in directory.iterdir()] == ["iteration_000001"]
    kept = algo.get_module().state_dict()
    real_train(algo)  # the weights move on
    moved = algo.get_module().state_dict()
    assert any(not torch.equal(kept[k], moved[k]) for k in kept)
    assert selector.restore_best(algo) == 1
    restored = algo.get_module().state_dict()
    assert all(torch.equal(kept[k], restored[k]) for k in kept)
    selector.clear()
    assert not directory.exists()


@pytest.mark.slow
def test_select_by_wis_keeps_the_best_estimate_across_a_resume(ray_session, tmp_path, monkeypatch, capsys):
    """A run killed in its second iteration, then resumed: the estimate of iteration 1 is kept,
    not taken again. The killed run's algorithm (BC as the CLI builds it, one iteration
    trained) also carries the CheckpointSelector's own checks (ties keep the earlier
    checkpoint, restore_best, clear) before it dies: one algorithm build fewer than a test of
    its own. Over 20 s on the busy 2-core machine: two CLI runs, each building an algorithm
    whose first train() starts a prelearner actor (importing RLlib), and 6 WIS estimates."""
    from offline_graph.rllib.algorithms.offline_algorithms import GraphBC

    ckpt = tmp_path / "run"
    argv = [*ARGS, "--iterations", "3", "--select-by", "wis", "--select-explore", "--checkpoint", str(ckpt)]
    real_train, calls = GraphBC.train, []

    def killed_at_second(self):  # the real train(); the second call dies (as a killed run)
        calls.append(1)
        if len(calls) == 2:
            check_selector_ties_and_restore(self, real_train, tmp_path / "sel")
            raise RuntimeError("killed")
        return real_train(self)

    monkeypatch.setattr(GraphBC, "train", killed_at_second)
    with pytest.raises(RuntimeError, match="killed"):
        train_cli.main(argv)
    monkeypatch.undo()
    assert len(calls) == 2  # the selector's checks ran (and passed) on the live algorithm
    progress = json.loads((ckpt / "progress.json").read_text())
    assert progress["iteration"] == 1
    before = [h["estimate"]["value"] for h in progress["history"]]
    assert len(before) == 1 and "iteration 1: wis estimate" in capsys.readouterr().out

    assert train_cli.main([*argv, "--resume"]) == 0
    out = capsys.readouterr().out
    assert "resuming from iteration 1" in out
    sel = check_selection(ckpt, [1, 2, 3], out)
    values = [c["value"] for c in sel["checkpoints"]]
    assert values[:1] == before  # kept from the first run, not estimated again
    for it in (2, 3):
        assert f"iteration {it}: wis estimate {values[it - 1]:.3f}" in out
    assert "iteration 1: wis" not in out
    assert sel["method"] == "wis" and sel["explore"] is True and sel["gamma"] == 0.99


@pytest.mark.slow
def test_select_by_fqe_writes_the_best_module_as_the_checkpoint(ray_session, tmp_path, capsys):
    ckpt = tmp_path / "run"
    argv = ["--iterations", "2", "--select-by", "fqe", "--select-epochs", "2", "--checkpoint", str(ckpt)]
    assert train_cli.main([*ARGS, *argv]) == 0
    sel = check_selection(ckpt, [1, 2], capsys.readouterr().out)
    assert sel["epochs"] == 2 and sel["explore"] is False


def test_best_is_the_first_of_equal_values_and_never_nan() -> None:
    est = [
        {"iteration": i, "value": v, "ci_low": 0.0, "ci_high": 0.0}
        for i, v in [(1, float("nan")), (2, 1.0), (3, 2.0), (4, 2.0), (5, float("nan"))]
    ]
    assert CheckpointSelector(None, "wis", 1.0, "-", estimates=est).best["iteration"] == 3  # type: ignore[index]
    assert CheckpointSelector(None, "wis", 1.0, "-", estimates=est[:1]).best["iteration"] == 1  # type: ignore[index]
    assert CheckpointSelector(None, "wis", 1.0, "-").best is None


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--select-by", "wis"], "--checkpoint-every must be >= 1 with --select-by (found 0)"),
        (["--select-gamma", "0.9"], "--select-gamma must be unset without --select-by (found 0.9)"),
        (["--select-explore"], "--select-explore must be unset without --select-by (found True)"),
        (
            ["--select-by", "pdis", "--checkpoint-every", "2", "--select-epochs", "3"],
            "--select-epochs must be unset unless --select-by fqe or dr (found 3)",
        ),
        (
            ["--select-by", "fqe", "--checkpoint-every", "2", "--memory", "gru"],
            "--select-by must be unset with --memory / --frame-stack (found 'fqe')",
        ),
        (
            ["--select-by", "fqe", "--checkpoint-every", "2", "--select-gamma", "1.5"],
            "--select-gamma must be in [0, 1] (found 1.5)",
        ),
    ],
)
def test_select_flags_are_checked(tmp_path, capsys, extra, message) -> None:
    with pytest.raises(SystemExit) as exc:
        train_cli.parse_args(["--algo", "bc", "--data", MIXED, "--checkpoint", str(tmp_path), *extra])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_resume_checks_the_selection_of_the_run_it_continues(tmp_path) -> None:
    def cfg(**kw: object) -> Config:
        return Config(algo="bc", data="d", checkpoint=str(tmp_path), iterations=6, checkpoint_every=2, **kw)  # type: ignore[arg-type]

    est = {"method": "wis", "gamma": 0.99, "explore": False, "value": 3.0, "ci_low": 2.0, "ci_high": 4.0}
    history = [{"iteration": 1}, {"iteration": 2, "estimate": est}]
    assert resumed_estimates(cfg(select_by="wis"), 0.99, history) == [
        {"iteration": 2, "value": 3.0, "ci_low": 2.0, "ci_high": 4.0}
    ]
    with pytest.raises(ConfigError, match="--select-by must be 'wis' \\(found None\\)"):
        resumed_estimates(cfg(), 0.99, history)
    with pytest.raises(ConfigError, match="--select-by must be unset \\(found 'wis'\\)"):
        resumed_estimates(cfg(select_by="wis"), 0.99, history[:1])
    with pytest.raises(ConfigError, match="gamma: 0.99 -> 0.5; method: 'wis' -> 'pdis'"):
        resumed_estimates(cfg(select_by="pdis"), 0.5, history)

    class Saver:  # what save_progress needs of an algorithm
        def save_to_path(self, path: str) -> str:
            return path

    first = cfg(select_by="wis")
    save_progress(Saver(), first, 6, history, identity(first, {}), selected_iteration=2)
    more = cfg(select_by="wis", resume=True)
    with pytest.raises(ConfigError, match="must hold its last iteration 6 \\(found the iteration 2"):
        resume_point(dataclasses.replace(more, iterations=9), identity(first, {}))
