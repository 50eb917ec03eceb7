"""Clean runs: the README main command prints no error-level Ray line, no traceback and no
deprecation warning (and writes the checkpoint, curve and summary that ``evaluate`` reads back:
one end-to-end run of ``train`` then ``evaluate`` for the suite), and a script that stops its
algorithm and then Ray, or ends without either, prints no traceback.

Seen before the fixes (2026-11-25, this machine): the main command printed
``[... E ...] core_worker.cc:2465: Actor with class name: 'MapWorker(MapBatches(
GraphOfflinePreLearner))' ... has constructor arguments in the object store and max_restarts >
0`` and RLlib's ``DeprecationWarning: `RLModule(config=[RLModuleConfig object])` has been
deprecated``; with ``log_to_driver`` on, every prelearner actor printed
``DeprecationWarning: `OfflinePreLearner(module_spec=..)` has been deprecated``; a script ending
``algo.stop(); ray.shutdown()`` printed ``Exception ignored in: <generator object
DataIterator._iter_batches...>`` and a traceback at exit.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from tests.helpers import ROOT, run_cli, start_command

pytestmark = pytest.mark.slow

B = 64

BAD = re.compile(
    r"\bERROR\b|^\[[^\]]* E \d+ \d+\]|Traceback|Exception ignored|RuntimeError|DeprecationWarning|deprecated",
    re.IGNORECASE,
)
"""An error-level Python or C++ (``[time E pid tid] file.cc``) log line, a traceback, a
deprecation warning."""


def bad_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if BAD.search(line)]


def test_bad_lines_catches_what_was_seen():
    seen = (
        "[2026-11-25 23:30:03,996 E 7129 7129] core_worker.cc:2465: Actor with class name: ...\n"
        "2026-11-25 23:30:03,750\tWARNING rl_module.py:463 -- DeprecationWarning: `RLModule(...)`\n"
        "Exception ignored in: <generator object DataIterator._iter_batches.<locals>._create_iterator>\n"
        "Traceback (most recent call last):\n"
        "2026-11-25 23:32:41,012\tERROR tune.py:1035 -- Trials did not complete\n"
        "    1       1.3262          -          -    2560   15.09       170        4653\n"
    )
    assert len(bad_lines(seen)) == 5


def test_main_command_output_is_clean_and_its_outputs_complete(tmp_path):
    """The README main command (small): clean output; the checkpoint, curve and summary it
    writes; ``evaluate`` on the checkpoint gets train's own evaluation returns (same seed)."""
    ckpt = tmp_path / "bc"
    out = run_cli(
        "train",
        "--algo",
        "bc",
        "--data",
        "sample_data/expert",
        "--iterations",
        "2",
        "--num-learners",
        "0",
        "--updates-per-iteration",
        "2",
        "--batch-size",
        str(B),
        "--eval-episodes",
        "3",
        "--checkpoint",
        str(ckpt),
        timeout=300,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "normalized score" in out.stdout
    assert bad_lines(text) == [], text

    assert (ckpt / "learning_curve.png").stat().st_size > 1000
    assert (ckpt / "rllib_checkpoint.json").exists()
    assert (ckpt / "learner_group" / "learner" / "rl_module" / "default_policy" / "module_state.pkl").exists()
    summary = json.loads((ckpt / "summary.json").read_text())
    assert summary["data"]["kind"] == "episodes"
    its = summary["history"]
    assert [h["iteration"] for h in its] == [1, 2]
    assert all(h["env_steps_trained"] == 2 * B for h in its)
    assert all(math.isfinite(h["policy_loss"]) for h in its)
    assert all(h["bytes_per_transition"] > 0 for h in its)
    ev = summary["evaluation"]
    assert len(ev["module"]["returns"]) == len(ev["expert"]["returns"]) == 3
    assert ev["expert"]["mean_return"] > ev["random"]["mean_return"]
    assert summary["normalized_score"] == pytest.approx(
        100
        * (ev["module"]["mean_return"] - ev["random"]["mean_return"])
        / (ev["expert"]["mean_return"] - ev["random"]["mean_return"])
    )

    # evaluate reads the same checkpoint (no Ray needed) and, with the same seed, gets the
    # same module return as train's own evaluation.
    out_json = tmp_path / "eval.json"
    evaluated = run_cli("evaluate", "--checkpoint", str(ckpt), "--episodes", "3", "--output", str(out_json))
    assert evaluated.returncode == 0, evaluated.stderr
    assert bad_lines(evaluated.stdout + evaluated.stderr) == []
    res = json.loads(out_json.read_text())
    assert res["module"]["returns"] == ev["module"]["returns"]
    assert res["normalized_score"] == pytest.approx(summary["normalized_score"])


SCRIPT = """
import ray
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
import offline_graph

ray.init(num_cpus=2, include_dashboard=False)
config = (
    BCConfig()
    .offline_data(input_=["sample_data/expert"], input_read_episodes=True, dataset_num_iters_per_learner=2)
    .training(train_batch_size_per_learner=64)
    .learners(num_learners=0)
    .rl_module(rl_module_spec=RLModuleSpec(module_class=offline_graph.GNNModule, model_config={"hidden": 8}))
)
algo = offline_graph.configure(config).build_algo()
print("steps", algo.train()["learners"]["__all_modules__"]["num_env_steps_trained"])
algo.stop()
ray.shutdown()
# a second run that ends as many scripts do: neither algo.stop() nor ray.shutdown()
ray.init(num_cpus=2, include_dashboard=False)
again = offline_graph.configure(config).build_algo()
print("again", again.train()["learners"]["__all_modules__"]["num_env_steps_trained"])
"""


@pytest.fixture(scope="module", autouse=True)
def script_run(tmp_path_factory) -> Iterator[Callable[[float], subprocess.CompletedProcess]]:
    """SCRIPT in a subprocess (:func:`tests.helpers.start_command`), started when the module
    starts so that it runs beside the main command's runs (each waits on Ray starting and on
    its actors more than it computes); its test waits for it and gets the finished process."""
    finished = start_command(tmp_path_factory.mktemp("script"), [sys.executable, "-c", SCRIPT])
    yield finished
    finished(300)  # a run no selected test waited for ends here, not later


def test_stop_then_shutdown_prints_no_traceback(script_run):
    """Local learner (num_learners=0), Ray's default log_to_driver: algo.stop() closes the
    learner's Ray Data iterator, so nothing is finalized after ray.shutdown(); a script that
    ends without either gets it closed by the exit handler that setup registers (before, the
    iterator's finalizer ran during interpreter shutdown: "Exception ignored in: <generator
    object DataIterator._iter_batches ...>", a traceback, "ImportError: sys.meta_path is
    None")."""
    done = script_run(300)
    assert done.returncode == 0, done.stderr
    assert "steps 128" in done.stdout
    assert "again 128" in done.stdout
    traces = re.compile("Traceback|RuntimeError|Exception ignored")
    assert [line for line in done.stderr.splitlines() if traces.search(line)] == []
    # with log_to_driver on, the prelearner actor's lines reach the driver: none is ours
    assert "OfflinePreLearner(module_spec=..)" not in done.stderr + done.stdout


FILTER = """
import os, sys
from offline_graph.cli.known_lines import hide_known_lines

with hide_known_lines():
    os.write(2, b"[t E 1 1] core_worker.cc:2465: Actor with class name: 'MapWorker(MapBatches(X))' "
                b"and ID: '04' has constructor arguments in the object store and max_restarts > 0. If\\n")
    print("kept from Python", file=sys.stderr)
    os.write(2, b"WARNING rl_module.py:463 -- DeprecationWarning: `RLModule(config=[RLModuleConfig object])` "
                b"has been deprecated. Use ...\\nkept from C")
os.write(2, b"\\nafter\\n")
"""


def test_cli_filter_drops_only_the_known_lines():
    """The offline-graph dispatcher's stderr filter: the two known lines go, the rest (also a
    last line without its newline) is passed on in order, and stderr is restored after."""
    done = subprocess.run(
        [sys.executable, "-c", FILTER],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "kept from Python\nkept from C\nafter\n"
