"""``offline-graph`` ends on an error with one line and an exit status (2 bad input, 1
unexpected, 130 interrupted); ``--debug`` / ``OFFLINE_GRAPH_DEBUG=1`` show tracebacks; Ray Data's
abort lines about our errors stay off the console."""

from __future__ import annotations

import logging

import pytest

from offline_graph.cli import inspect_data, main
from offline_graph.cli.failures import RAY_DATA_ABORT_LOGGERS, quiet_ray_data_aborts
from offline_graph.data.errors import ConfigError
from tests.bad_data import ROW_DAMAGE, good, write_items
from tests.helpers import ROOT, start_cli

TRACEBACK = "Traceback (most recent call last)"
SPACES = ["--observation-space", "graph:F=3,D=1", "--action-space", "discrete:2"]


@pytest.fixture(scope="module")
def corrupt_input(tmp_path_factory):
    """A directory of one file: good episode, undecodable row 1, good episode."""
    data = tmp_path_factory.mktemp("corrupt")
    path = str(data / "rows.parquet")
    write_items(path, [good("g0"), ROW_DAMAGE["decode"][0]("bad"), good("g1")])
    return str(data), path


@pytest.fixture(scope="module")
def convert_runs(corrupt_input, tmp_path_factory):
    """``convert`` of the corrupt input, plain and with ``--debug``, started together (each
    waits on Ray more than it computes); ``{"plain" | "debug": finished(timeout)}``."""
    data, _ = corrupt_input
    runs = {}
    for name, debug in (("plain", []), ("debug", ["--debug"])):
        tmp = tmp_path_factory.mktemp(f"convert_{name}")
        args = [*debug, "convert", "--input", data, "--output", str(tmp / "rows"), "--on-error", "raise"]
        runs[name] = start_cli(tmp / "log", *args, *SPACES)
    yield runs
    for finished in runs.values():  # a run no selected test waited for ends here, not later
        finished(300)


def expected_line(path: str) -> str:
    return (
        f"offline-graph convert: file {path}, row 1, column 'item': value must be a "
        "msgpack-encoded episode state (found 24 undecodable bytes: "
    )


@pytest.mark.slow
def test_convert_corrupt_row_prints_one_line_and_exits_2(corrupt_input, convert_runs):
    """Over 20 s, and not for the error: the first test to wait for the two runs (plain and
    ``--debug``, started together) bears both. Each is an ``offline-graph`` process that starts
    its own local Ray (~10 s of CPU in all: the CLI process, Ray's prestarted workers, Ray
    Data's session actors, Ray's agents and monitors) and runs one conversion task; the error
    line comes as that task fails, and the ~3 s after it are Ray's shutdown at exit, as after a
    successful conversion. The runs stay subprocesses: in this process Ray Data's console lines
    (which the plain run must hide and the debug run must show) do not reach captured stderr."""
    _, path = corrupt_input
    proc = convert_runs["plain"](300)
    printed = proc.stdout + proc.stderr
    assert proc.returncode == 2, printed
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(expected_line(path)) and last.endswith("[reason: decode]"), last
    assert printed.count("offline-graph convert:") == 1
    assert TRACEBACK not in printed
    # Ray Data's own ERROR lines ("... Dataset execution will now abort", "Exception occurred
    # in user code"): its format is "<date> <time>\tERROR <file>:<line> -- <message>"
    assert "\tERROR " not in printed and "Exception occurred in user code" not in printed, printed


@pytest.mark.slow
def test_debug_anywhere_shows_the_traceback_and_ray_data_lines(corrupt_input, convert_runs):
    _, path = corrupt_input
    proc = convert_runs["debug"](300)
    assert proc.returncode == 2, proc.stderr
    assert TRACEBACK in proc.stderr
    assert "in decode_state" in proc.stderr  # the worker's frames, from Ray's wrapper
    assert "\tERROR " in proc.stderr and "Dataset execution will now abort" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(expected_line(path))


def test_train_conflicting_spaces_is_one_line_exit_2(tmp_path, capsys):
    data = str(ROOT / "sample_data" / "expert")  # recorded from Graph-v0: F=16, D=2
    argv = f"train --algo bc --data {data} --checkpoint {tmp_path / 'ck'} --observation-space graph:F=5"
    assert main(argv.split()) == 2
    printed = capsys.readouterr()
    assert printed.err == (
        "offline-graph train: the observation space must be the same in the env "
        "offline_graph/Graph-v0 recorded in the file metadata and --observation-space (found "
        "graph:F=16,D=2 and graph:F=5). Give only one of them, or the one that matches the data.\n"
    )
    assert not (tmp_path / "ck").exists()


def test_record_unknown_env_is_one_line_exit_2(tmp_path, capsys):
    """An env id gymnasium does not know, and a module:Class that does not import, are input
    errors (they were an 'unexpected error' with a traceback, exit 1)."""
    out = tmp_path / "rec"
    assert main(f"record --env nope-v0 --episodes 1 --output {out}".split()) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "offline-graph record: make_env: env must be a registered gymnasium id or module:Class "
        "(found 'nope-v0': Environment `nope` doesn't exist."
    )
    assert (
        "this package's envs: offline_graph/Channel-v0, offline_graph/Dispatch-v0, "
        "offline_graph/Graph-v0, " in err
    )
    assert err.count("\n") == 1
    assert main(f"record --env offline_graph.env:Nope --episodes 1 --output {out}".split()) == 2
    assert capsys.readouterr().err == (
        "offline-graph record: make_env: 'offline_graph.env:Nope' must name an importable "
        "module:Class (found AttributeError: module 'offline_graph.env' has no attribute 'Nope'). "
        "Check the module path (importable from the current directory or PYTHONPATH) and the "
        "class name.\n"
    )
    assert not out.exists()


def test_convert_into_a_full_directory_is_one_line_exit_2(tmp_path, capsys):
    """The output check was a bare FileExistsError (traceback, 'unexpected error', exit 1); it
    is now an OutputExistsError: a ConfigError and still a FileExistsError, raised before the
    input is scanned or Ray starts."""
    import offline_graph

    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    data = ROOT / "sample_data" / "expert"
    import ray

    running = ray.is_initialized()  # another test module's Ray may run already
    assert main(f"convert --input {data} --output {full}".split()) == 2
    out = capsys.readouterr()
    assert out.err.endswith(
        f"offline-graph convert: output {full} must be empty or absent (found 1 entries). "
        "Choose a new --output or delete it.\n"
    )
    # checked first: no spaces line printed before the refusal, and no Ray started for it
    assert out.out == "" and ray.is_initialized() == running
    assert issubclass(offline_graph.OutputExistsError, ConfigError)
    assert issubclass(offline_graph.OutputExistsError, FileExistsError)
    assert (full / "keep.txt").read_text() == "x" and len(list(full.iterdir())) == 1


BAD = "inspect: --path must be a directory (found 'x'). Give a directory."


def wrapped() -> Exception:
    """Ours as the cause of another exception (as Ray wraps a worker's error)."""
    wrapper = RuntimeError("wrapper")
    wrapper.__cause__ = ConfigError(BAD)
    return wrapper


UNEXPECTED = (
    "offline-graph inspect: unexpected error (RuntimeError); please report it with the "
    "traceback above at the project's issue tracker."
)


@pytest.mark.parametrize(
    "make, status, last_line",
    [
        (lambda: ConfigError(BAD), 2, f"offline-graph {BAD}"),
        (wrapped, 2, f"offline-graph {BAD}"),
        (lambda: RuntimeError("boom"), 1, UNEXPECTED),
        (KeyboardInterrupt, 130, "offline-graph inspect: interrupted"),
    ],
    ids=["ours", "ours_wrapped", "unexpected", "interrupted"],
)
@pytest.mark.parametrize("debug", ["", "flag", "env"])
def test_dispatcher_exit_status_and_lines(monkeypatch, capsys, make, status, last_line, debug):
    seen = []

    def failing_main(argv):
        seen.append(argv)
        raise make()

    monkeypatch.setattr(inspect_data, "main", failing_main)
    monkeypatch.delenv("OFFLINE_GRAPH_DEBUG", raising=False)
    if debug == "env":
        monkeypatch.setenv("OFFLINE_GRAPH_DEBUG", "1")
    argv = ["inspect", "a", "--debug", "b"] if debug == "flag" else ["inspect", "a", "b"]
    assert main(argv) == status
    assert seen == [["a", "b"]]
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == last_line
    unexpected = status == 1
    assert (TRACEBACK in err) == (unexpected or bool(debug))
    if not debug and not unexpected:
        assert err == last_line + "\n"


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_ray_data_lines_about_other_errors_still_reach_the_handlers():
    """Hidden only for our errors: a held abort line is passed on when the command ends with
    another error, dropped when it ends with ours; lines about other errors pass at once."""
    logger = logging.getLogger(RAY_DATA_ABORT_LOGGERS[0])
    handler = Collect()
    records = handler.records
    logger.addHandler(handler)
    old_level, logger.level = logger.level, logging.DEBUG
    try:
        for ending, passed in ((RuntimeError("not ours"), 1), (ConfigError(BAD), 0)):
            with pytest.raises(type(ending)), quiet_ray_data_aborts():
                logger.error("Dataset execution will now abort.")
                assert records == []  # held until the command ends
                raise ending
            assert len(records) == passed
            records.clear()
        with quiet_ray_data_aborts():
            try:
                raise ValueError("theirs")
            except ValueError:
                logger.error("about theirs")
            try:
                raise ConfigError(BAD)
            except ConfigError:
                logger.error("about ours")
        assert [(r.getMessage(), getattr(r, "hide", False)) for r in records] == [
            ("about theirs", False),
            ("about ours", True),
        ]
        assert logger.filters == []
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
