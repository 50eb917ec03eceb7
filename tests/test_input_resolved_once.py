"""Every data command lists and opens its input once (issue 39, "Resolve the input once").

The commands run in this process (``offline_graph.cli.<command>.main``) on a copy of
``sample_data/expert`` (2 files of 60 episodes; the metadata names the env, whose spaces they are)
and on the same files without our metadata ("foreign": RLlib-written episodes, where the
multi-agent probe reads the first row and the spaces are inferred from the first 64
episodes). Each call of an :mod:`offline_graph.data.store.storage` function on a location inside
the input is counted. Counts before (the code of issue 39, measured with this harness) and
after (:class:`offline_graph.env.data_input.DataInput`, made once and handed on):

Counts as (exists, is_dir, list_dir, open_input_file, size) calls, total in brackets:

=====================  ======================  ======================
command                before                  after
=====================  ======================  ======================
inspect                2, 3, 3, 7, 0 (15)      1, 1, 1, 2, 0 (5)
inspect, foreign       2, 3, 3, 10, 0 (18)     1, 1, 1, 2, 0 (5)
convert                0, 2, 2, 4, 2 (10)      0, 1, 1, 2, 0 (4)
convert, foreign       0, 2, 2, 8, 2 (14)      0, 1, 1, 4, 0 (6)
train (to configure)   1, 2, 2, 7, 0 (12)      1, 1, 1, 4, 0 (7)
train, foreign         1, 2, 2, 10, 0 (15)     1, 1, 1, 6, 0 (9)
evaluate --data        0, 2, 2, 6, 0 (10)      0, 1, 1, 4, 0 (6)
migrate                1, 2, 1, 2, 2 (8)       0, 1, 1, 2, 2 (6)
=====================  ======================  ======================

Why the "after" numbers, by hand: the input is one directory, so one ``is_dir`` and one
``list_dir`` list it; each of its 2 files is opened once for its footer (``convert``,
``train``, ``evaluate``: the scan) or once for its footer and rows together (``inspect``).
On top: ``train``'s ``exists`` is its option check; ``train`` opens both files again for its
local side sample (bytes per transition: the rows themselves), ``evaluate`` for the logged
episodes it estimates from. Foreign files add 2 opens (not for ``inspect``, which has read
them already): the first 64 episodes (60 per file) that the multi-agent probe and the space
inference share. ``convert``'s job reads the rows in
Ray tasks (other processes, not counted), and its report takes the bytes in from the scan.

The walk (each storage call's calling function, consecutive repeats merged; a "return" is a
visit to a function already left): convert 5 visits / 2 returns -> 2 / 0 (foreign 8 / 3 -> 3
/ 0), inspect 11 / 6 -> 3 / 0 (foreign 13 / 6 -> 3 / 0), train 7 / 2 -> 4 / 0 (foreign 9 / 2 ->
5 / 0), evaluate 5 / 2 -> 3 / 0, migrate 3 / 0 -> 3 / 0 (its old rows were listed once already).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq
import pytest

from offline_graph.data.store import storage

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_data", "expert")
COUNTED = ("list_dir", "entries", "exists", "is_dir", "open_input_file", "read_bytes", "size")


@pytest.fixture(params=["recorded", "foreign"])
def data(request: Any, tmp_path: Any) -> Iterator[tuple[str, str]]:
    """(kind, a copy of sample_data/expert; "foreign": its files without our metadata)."""
    path = str(tmp_path / "expert")
    shutil.copytree(SAMPLE, path)
    if request.param == "foreign":
        for name in sorted(os.listdir(path)):
            file = os.path.join(path, name)
            pq.write_table(pq.read_table(file).replace_schema_metadata(None), file)
    yield request.param, path


class Calls:
    """Counts the storage calls on locations under ``root`` and the walk of their callers."""

    def __init__(self, monkeypatch: Any, root: str) -> None:
        self.root = os.path.abspath(root)
        self.counts: collections.Counter[str] = collections.Counter()
        self.callers: list[str] = []
        for name in COUNTED:
            monkeypatch.setattr(storage, name, self._wrap(name, getattr(storage, name)))

    def _wrap(self, name: str, real: Any) -> Any:
        import sys

        def counted(location: Any, *args: Any, **kwargs: Any) -> Any:
            if os.path.abspath(str(location)).startswith(self.root):
                self.counts[name] += 1
                frame = sys._getframe(1)
                caller = f"{frame.f_globals.get('__name__')}.{frame.f_code.co_name}"
                if not self.callers or self.callers[-1] != caller:
                    self.callers.append(caller)
            return real(location, *args, **kwargs)

        return counted

    @property
    def returns(self) -> int:
        return len(self.callers) - len(set(self.callers))


def test_inspect_lists_and_opens_each_file_once(data: Any, monkeypatch: Any, capsys: Any) -> None:
    from offline_graph.cli import inspect_data

    kind, path = data
    calls = Calls(monkeypatch, path)
    assert inspect_data.main([path, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 120 and summary["files"] == 2
    # foreign too: the spaces are inferred from the first 64 episodes inspect has read already
    assert dict(calls.counts) == {"exists": 1, "is_dir": 1, "list_dir": 1, "open_input_file": 2}
    assert calls.returns == 0, calls.callers
    if kind == "recorded":
        assert summary["spaces"]["source"] == "the env offline_graph/Graph-v0 recorded in the file metadata"
    else:
        assert summary["spaces"]["source"] == "inferred from the first 64 episodes of 2 files"


def test_evaluate_data_lists_the_input_once(monkeypatch: Any, tmp_path: Any, capsys: Any) -> None:
    import gymnasium as gym  # noqa: F401  (the module's spaces)
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.cli import evaluate
    from offline_graph.env.data_spaces import resolve_spaces
    from offline_graph.rllib.core.gnn_module import GNNModule
    from offline_graph.rllib.evaluation.checkpoints import MODULE_SUBDIR

    path = str(tmp_path / "expert")
    shutil.copytree(SAMPLE, path)
    spaces = resolve_spaces(path)
    spec = RLModuleSpec(
        module_class=GNNModule, observation_space=spaces.observation_space, action_space=spaces.action_space
    )
    spec.build().save_to_path(str(tmp_path / "ckpt" / MODULE_SUBDIR / "default_policy"))
    calls = Calls(monkeypatch, path)
    argv = ["--checkpoint", str(tmp_path / "ckpt"), "--data", path, "--method", "pdis", "--gamma", "1.0"]
    assert evaluate.main(argv) == 0
    assert "pdis estimate" in capsys.readouterr().out
    # the scan: the directory, then each file's footer; then each file's rows (the estimate)
    assert dict(calls.counts) == {"is_dir": 1, "list_dir": 1, "open_input_file": 4}
    assert calls.returns == 0, calls.callers


class _Configured(Exception):
    """Raised once ``offline_graph.configure`` has run: the rest of ``train`` is training."""


def test_train_resolves_the_input_once_up_to_configure(data: Any, monkeypatch: Any, tmp_path: Any) -> None:
    """``train`` to its RLlib config (``configure`` included, no Ray started, no training)."""
    from offline_graph.cli import train
    from offline_graph.rllib.core import ray_session

    kind, path = data
    real = train.build_config

    def build_then_stop(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise _Configured

    monkeypatch.setattr(train, "build_config", build_then_stop)
    monkeypatch.setattr(ray_session, "start_ray", lambda *a, **k: False)
    calls = Calls(monkeypatch, path)
    argv = ["--algo", "bc", "--data", path, "--checkpoint", str(tmp_path / "ckpt"), "--eval-episodes", "0"]
    with pytest.raises(_Configured):
        train.main(argv)
    # exists: the option check; the scan (1 + 1 + 2 footers); the side sample's 2 files;
    # foreign: + the first 64 episodes (2 files) for the probe and the inferred spaces
    opens = 4 if kind == "recorded" else 6
    assert dict(calls.counts) == {"exists": 1, "is_dir": 1, "list_dir": 1, "open_input_file": opens}
    assert calls.returns == 0, calls.callers


@pytest.mark.slow
def test_convert_lists_and_opens_the_input_once(
    data: Any, monkeypatch: Any, tmp_path: Any, capsys: Any
) -> None:
    from offline_graph.cli import convert

    kind, path = data
    calls = Calls(monkeypatch, path)
    output = str(tmp_path / "rows")
    assert convert.main(["--input", path, "--output", output]) == 0
    printed = capsys.readouterr().out
    assert "episodes in: 120  used: 120  rejected: 0 {}" in printed
    opens = 2 if kind == "recorded" else 4  # foreign: + the first 64 episodes (probe, spaces)
    assert dict(calls.counts) == {"is_dir": 1, "list_dir": 1, "open_input_file": opens}
    assert calls.returns == 0, calls.callers
    with open(os.path.join(output, "_conversion_report.json")) as fh:
        report = json.load(fh)
    assert report["bytes_in"] == sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    assert "data" not in report["config"] and report["config"]["input"] == path


def test_migrate_lists_its_input_once(monkeypatch: Any, tmp_path: Any, capsys: Any) -> None:
    """The old rows are listed once (one ``is_dir``: a directory), each file opened once;
    ``size`` gives the report's bytes before."""
    from offline_graph.cli import migrate
    from tests.migrate_data import make_recording, write_parquet

    _, rows = make_recording(seed=7, episodes=5)
    old = tmp_path / "old"
    old.mkdir()
    write_parquet(rows[:10], old / "a.parquet")
    write_parquet(rows[10:], old / "b.parquet")
    monkeypatch.chdir(os.path.dirname(os.path.dirname(SAMPLE)))  # the repository: tests.migrate_data
    calls = Calls(monkeypatch, str(old))
    space = "tests.migrate_data:OBS_SPACE"
    argv = ["--input", str(old), "--output", str(tmp_path / "new"), "--observation-space", space]
    assert migrate.main(argv) == 0
    assert "episodes     5 (3 terminated, 2 truncated)" in capsys.readouterr().out
    assert dict(calls.counts) == {"is_dir": 1, "list_dir": 1, "open_input_file": 2, "size": 2}
    assert calls.returns == 0, calls.callers
