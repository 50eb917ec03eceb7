"""Clean runs: the README main command prints no error-level Ray line, no traceback and no
deprecation warning, also killed after a checkpoint and resumed with ``--resume`` (and writes
the checkpoint, curve and summary that ``evaluate`` reads back: the suite's one end-to-end run
of ``train`` then ``evaluate``, and its killed-and-resumed run), and a script that stops its
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
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from offline_graph.cli.train_resume import PROGRESS
from tests.helpers import ROOT, _cli, run_cli, start_command

pytestmark = pytest.mark.slow

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


UPDATES, B, EPISODES = 10, 256, 20
ITERATIONS, EVERY = 4, 2
MAIN = [
    "train", "--algo", "bc", "--data", "sample_data/expert", "--iterations", str(ITERATIONS),
    "--num-learners", "0", "--updates-per-iteration", str(UPDATES), "--batch-size", str(B),
    "--lr", "3e-3", "--eval-episodes", str(EPISODES), "--checkpoint-every", str(EVERY),
]  # fmt: skip
"""The README main command (docs/getting-started.md) with ``--checkpoint-every`` as
docs/guides/recording-and-conversion.md resumes it: 4 iterations, killed after its checkpoint
at 2. The score is a plumbing check (a trained module was saved, restored and evaluated: above
random), not a learning-quality number: those are the experiments' and
docs/guides/training.md's, and the learning test of BC is tests/test_env_runner.py's. Observed
with lr 3e-3: 98.6 and 99.4 after 6 uninterrupted iterations, 92.5 and 89.8 killed after 3 and
resumed to 6, and once 42.4 killed after 4 and resumed to 8 (training loss 0.02, 11.1 against
the expert's 25.2: BC's spread on 20 seeded episodes)."""


def start_train(out_dir: Path, *args: str) -> subprocess.Popen:
    """``offline-graph train`` (:data:`MAIN`, then ``args``) started as :func:`run_cli` runs the
    CLI, in its own process group (SIGKILL to the group takes its Ray processes too), its
    stdout and stderr in ``out_dir`` (never a full pipe)."""
    cmd, env = _cli()
    out_dir.mkdir()
    with open(out_dir / "stdout", "w") as out, open(out_dir / "stderr", "w") as err:
        return subprocess.Popen(
            [*cmd, *MAIN, *args], cwd=ROOT, stdout=out, stderr=err, env=env, start_new_session=True
        )


def printed(out_dir: Path) -> tuple[str, str]:
    return (out_dir / "stdout").read_text(), (out_dir / "stderr").read_text()


def saved_iteration(ckpt: Path) -> int:
    try:
        return int(json.loads((ckpt / PROGRESS).read_text())["iteration"])
    except (OSError, ValueError, KeyError):
        return 0


def test_main_command_killed_and_resumed_is_clean_and_its_outputs_complete(tmp_path):
    """The README main command with ``--checkpoint-every 2``, killed with SIGKILL after its
    first checkpoint, then the same command plus ``--resume`` (the suite's one end-to-end run of
    ``train`` then ``evaluate``): neither run prints an error-level line, a traceback or a
    deprecation warning; the resumed run continues from iteration 3 with the whole history and
    the saved weights, writes the checkpoint, curve and summary, and scores above random
    (:data:`MAIN`); ``evaluate`` on the checkpoint gets train's own evaluation returns (same seed).

    Over 20 s: two ``train`` processes (each starts Ray and the data pipeline, ~1 s per
    iteration of 10 x 256 transitions) and an ``evaluate`` process. It was two tests (this
    output check on its own small run, and tests/test_resume.py's killed run): one train
    process fewer. ``evaluate`` stays a process: the console script hides RLlib's known
    deprecation lines, which an in-process call would print."""
    ckpt = tmp_path / "bc"
    procs = [start_train(tmp_path / "killed", "--checkpoint", str(ckpt))]
    try:
        deadline = time.time() + 240
        while saved_iteration(ckpt) < EVERY and procs[0].poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert saved_iteration(ckpt) == EVERY, printed(tmp_path / "killed")
        os.killpg(procs[0].pid, signal.SIGKILL)
        procs[0].wait()
        assert not (ckpt / "summary.json").exists()  # it never finished

        procs.append(start_train(tmp_path / "resumed", "--checkpoint", str(ckpt), "--resume"))
        assert procs[1].wait(timeout=300) == 0, printed(tmp_path / "resumed")
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    stdout, stderr = printed(tmp_path / "resumed")
    assert f"resuming from iteration {EVERY}" in stdout
    assert "normalized score" in stdout
    for run in ("killed", "resumed"):  # the killed run: what it printed before the kill
        text = "\n".join(printed(tmp_path / run))
        assert bad_lines(text) == [], text

    assert (ckpt / "learning_curve.png").stat().st_size > 1000
    assert (ckpt / "rllib_checkpoint.json").exists()
    assert (ckpt / "learner_group" / "learner" / "rl_module" / "default_policy" / "module_state.pkl").exists()
    summary = json.loads((ckpt / "summary.json").read_text())
    assert summary["data"]["kind"] == "episodes"
    assert summary["iterations"] == ITERATIONS and summary["resumed_from_iteration"] == EVERY
    its = summary["history"]
    assert [h["iteration"] for h in its] == list(range(1, ITERATIONS + 1))
    assert all(h["env_steps_trained"] == UPDATES * B for h in its)
    assert all(math.isfinite(h["policy_loss"]) for h in its)
    assert all(h["bytes_per_transition"] > 0 for h in its)
    # The weights were restored: from fresh weights a first iteration's loss is ~1.35 (log 4 =
    # 1.39 at the start; 1.34 to 1.37 in four runs), the killed run was below 0.9 of it after
    # 2 iterations (0.74 after 3, 0.13 to 0.61 after 4 in five runs) and the resumed run's
    # first iteration goes on from there.
    assert its[EVERY]["policy_loss"] < 0.9 * its[0]["policy_loss"], its
    ev = summary["evaluation"]
    assert len(ev["module"]["returns"]) == len(ev["expert"]["returns"]) == EPISODES
    assert ev["expert"]["mean_return"] > ev["random"]["mean_return"]
    assert summary["normalized_score"] == pytest.approx(
        100
        * (ev["module"]["mean_return"] - ev["random"]["mean_return"])
        / (ev["expert"]["mean_return"] - ev["random"]["mean_return"])
    )
    # a trained module, above random (0) on the same 20 seeded episodes (see MAIN)
    assert summary["normalized_score"] > 10, summary

    # evaluate reads the same checkpoint (no Ray needed) and, with the same seed, gets the
    # same module return as train's own evaluation.
    out_json = tmp_path / "eval.json"
    evaluated = run_cli(
        "evaluate", "--checkpoint", str(ckpt), "--episodes", str(EPISODES), "--output", str(out_json)
    )
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
    None").

    Over 20 s when it runs alone (two Ray starts and two algorithm builds in the script);
    beside the main command's test the script has finished by the time this test waits."""
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
