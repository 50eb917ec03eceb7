"""`offline-graph train --checkpoint-every K` and `--resume`: what a resumed run must share
with the run it continues, and the message without saved progress.

A run killed with SIGKILL after a checkpoint and resumed to --iterations N (the whole history,
the restored weights, a BC score near the expert) is
``tests/test_clean_runs.py::test_main_command_killed_and_resumed_is_clean_and_its_outputs_complete``:
the same two processes also check the README main command's output and ``evaluate``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from offline_graph.cli.train_config import Config
from offline_graph.cli.train_resume import identity, resume_point, save_progress
from offline_graph.data.errors import ConfigError


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


def test_a_checkpoint_saved_before_graph_only_existed_resumes(tmp_path: Path) -> None:
    """progress.json from before ``--graph-only``: the missing field had its default (False),
    so the same flags resume and ``--graph-only`` is named as a change."""
    import json

    spaces = {"observation_space": "graph:F=16,D=2", "action_space": "discrete:4"}
    first = config(tmp_path, iterations=10)
    ident = identity(first, spaces)
    save_progress(
        Saver(), first, 4, [{"iteration": 1}], {k: v for k, v in ident.items() if k != "graph_only"}
    )
    saved = json.loads((tmp_path / "progress.json").read_text())
    assert "graph_only" not in saved["identity"] and "graph_only" in ident
    assert resume_point(config(tmp_path, iterations=10), ident) == (4, [{"iteration": 1}])
    blind = config(tmp_path, iterations=10, graph_only=True)
    with pytest.raises(ConfigError, match=r"graph_only: False -> True"):
        resume_point(blind, identity(blind, spaces))


def test_resume_without_saved_progress_says_how_to_get_it(tmp_path: Path) -> None:
    cfg = config(tmp_path, iterations=3)
    with pytest.raises(ConfigError, match="started with --checkpoint-every K"):
        resume_point(cfg, identity(cfg, {}))
