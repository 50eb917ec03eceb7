"""`offline-graph train --checkpoint-every K` and `--resume`: a run killed with SIGKILL after its
second checkpoint continues to --iterations N from there, with the whole history, and scores as
BC on expert data does (> 80)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from offline_graph.cli.train_config import Config
from offline_graph.cli.train_resume import PROGRESS, identity, resume_point, save_progress
from offline_graph.data.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    "--algo", "bc", "--data", str(ROOT / "sample_data" / "expert"), "--iterations", "9",
    "--num-learners", "0", "--batch-size", "256", "--eval-episodes", "20", "--num-cpus", "2",
    "--checkpoint-every", "3",
]  # fmt: skip


def train(ckpt: Path, *extra: str) -> subprocess.Popen:
    """``offline-graph train`` in a subprocess; its output goes to ``<ckpt>.log`` (read with
    :func:`output`), so a run nobody reads yet never blocks on a full pipe."""
    cmd = [sys.executable, "-c", "from offline_graph.cli import main; raise SystemExit(main())", "train"]
    with open(f"{ckpt}.log", "a") as log:
        return subprocess.Popen(
            [*cmd, *ARGS, "--checkpoint", str(ckpt), *extra],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: SIGKILL takes its Ray processes too
        )


def output(ckpt: Path) -> str:
    return Path(f"{ckpt}.log").read_text()


def saved_iteration(ckpt: Path) -> int:
    try:
        return int(json.loads((ckpt / PROGRESS).read_text())["iteration"])
    except (OSError, ValueError, KeyError):
        return 0


@pytest.mark.slow
def test_a_killed_run_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    killed = tmp_path / "killed"
    proc = train(killed)
    deadline = time.time() + 240
    while saved_iteration(killed) < 6 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert saved_iteration(killed) == 6, output(killed)[-2000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "summary.json").exists()  # it never finished

    resumed = train(killed, "--resume")
    assert resumed.wait(timeout=300) == 0, output(killed)[-2000:]
    assert "resuming from iteration 6" in output(killed)
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["iterations"] == 9 and summary["resumed_from_iteration"] == 6
    assert [h["iteration"] for h in summary["history"]] == [1, 2, 3, 4, 5, 6, 7, 8, 9]

    # BC on expert data: near the expert (20 seeded evaluation episodes)
    assert summary["normalized_score"] > 80, summary


def config(tmp_path: Path, **kw: object) -> Config:
    return Config(**{"algo": "bc", "data": "d", "checkpoint": str(tmp_path), **kw})  # type: ignore[arg-type]


class Saver:
    """What save_progress needs of an algorithm: save_to_path (writes a marker file)."""

    def save_to_path(self, path: str) -> str:
        Path(path, "algo_state").write_text("weights")
        return path


def test_resume_refuses_another_model_or_algorithm_naming_the_differences(tmp_path: Path) -> None:
    spaces = {"observation_space": "graph:F=16,D=2", "action_space": "discrete:4"}
    first = config(tmp_path, iterations=10)
    save_progress(Saver(), first, 4, [{"iteration": 1}], identity(first, spaces))
    assert (tmp_path / "algo_state").read_text() == "weights"
    assert resume_point(config(tmp_path, iterations=10), identity(first, spaces)) == (4, [{"iteration": 1}])
    other = config(tmp_path, iterations=10, algo="marwil", hidden=32)
    with pytest.raises(ConfigError, match=r"algo: 'bc' -> 'marwil'; hidden: 64 -> 32"):
        resume_point(other, identity(other, spaces))
    with pytest.raises(ConfigError, match="action_space: 'discrete:4' -> 'discrete:5'"):
        resume_point(first, identity(first, {**spaces, "action_space": "discrete:5"}))
    with pytest.raises(ConfigError, match="--iterations must be > the checkpoint's iteration 4"):
        resume_point(config(tmp_path, iterations=4), identity(first, spaces))


def test_resume_without_saved_progress_says_how_to_get_it(tmp_path: Path) -> None:
    cfg = config(tmp_path, iterations=3)
    with pytest.raises(ConfigError, match="started with --checkpoint-every K"):
        resume_point(cfg, identity(cfg, {}))
