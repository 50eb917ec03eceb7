"""How an ``offline-graph`` command ends on an error: one line on stderr and an exit status.

Exit statuses: 0 done; 2 bad input or settings (argparse's usage errors, and every
:class:`~offline_graph.data.errors.OfflineGraphError`, also one that Ray raised wrapped in its
own exception); 1 an unexpected error (not one of ours: its traceback is kept, followed by a
line saying where to report it); 130 interrupted (Ctrl-C). None of our error kinds means "the
job failed" rather than "the input is wrong" (the base class's contract is bad input or
configuration, and so is each raise site: decode, schema, validation, format version,
settings, duplicate ids, mixed spaces, a connector's batch, object storage that does not answer
within the retry policy: the endpoint setting or the service), so 1 is left to errors that are not
ours (a bug, a crashed Ray worker). ``--debug`` anywhere on the command
line, or ``OFFLINE_GRAPH_DEBUG=1``, prints our errors' tracebacks too and leaves Ray Data's log
lines as they are.

While a command runs, the ERROR lines Ray Data logs when one of our errors aborts a dataset
("An exception was raised from a task of operator ...", "Exception occurred in user code ...")
are kept off the console (:func:`quiet_ray_data_aborts`); Ray Data's lines about any other
error are printed as before. Ray's and RLlib's own lines that every run prints (an ERROR
line of Ray's core worker for Ray Data's map actors, RLlib's RLModuleConfig deprecation) are
dropped from stderr (:mod:`offline_graph.cli.known_lines`). Nothing is installed for library users: only the
``offline-graph`` dispatcher calls :func:`run_command`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
from typing import Callable, Iterator

from offline_graph.cli.known_lines import hide_known_lines
from offline_graph.data.errors import OfflineGraphError, find_project_error

BAD_INPUT, UNEXPECTED, INTERRUPTED = 2, 1, 130
"""Exit statuses (see the module docstring)."""

DEBUG_FLAG, DEBUG_ENV = "--debug", "OFFLINE_GRAPH_DEBUG"

RAY_DATA_ABORT_LOGGERS = (
    "ray.data._internal.execution.streaming_executor_state",
    "ray.data.exceptions",
)
"""The Ray Data loggers that log a dataset's abort at ERROR level (Ray 2.60: the operator's
"Dataset execution will now abort" line; the once-per-process "Exception occurred in user
code" header and the "Full stack trace" record, already hidden by Ray Data itself)."""


def split_debug(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--debug`` and whether debugging is on (the flag anywhere in
    ``argv``, or ``OFFLINE_GRAPH_DEBUG`` set to anything but empty or ``0``)."""
    rest = [a for a in argv if a != DEBUG_FLAG]
    return rest, len(rest) < len(argv) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def report_error(command: str, err: OfflineGraphError) -> int:
    """Print ``offline-graph <command>: <message>`` on stderr (a message that already starts
    with ``<command>:`` is not prefixed twice); returns the bad-input exit status."""
    text = str(err)
    if not text.startswith(f"{command}:"):
        text = f"{command}: {text}"
    print(f"offline-graph {text}", file=sys.stderr)
    return BAD_INPUT


def exceptions_of(record: logging.LogRecord) -> list[BaseException]:
    """The exceptions ``record`` is logged about: the one being handled where it is logged,
    its ``exc_info`` and any among its arguments."""
    found = [sys.exc_info()[1], record.exc_info[1] if record.exc_info else None]
    if isinstance(record.args, tuple):
        found += [a for a in record.args if isinstance(a, BaseException)]
    return [e for e in found if e is not None]


class HideProjectErrors(logging.Filter):
    """Marks ERROR records about our errors ``hide`` (Ray Data's console handler drops them;
    other handlers, e.g. Ray Data's log file, still get them). An ERROR record about no
    exception at hand is held in :attr:`held`, for :func:`quiet_ray_data_aborts` to drop or
    pass on when the command ends (Ray 2.60 logs "Dataset execution will now abort" before
    re-raising the error that a task's result carried, outside any ``except``)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        errors = exceptions_of(record)
        if not errors:
            self.held.append(record)
            return False
        if any(find_project_error(e) is not None for e in errors):
            record.hide = True
        return True


@contextlib.contextmanager
def quiet_ray_data_aborts() -> Iterator[None]:
    """:class:`HideProjectErrors` on :data:`RAY_DATA_ABORT_LOGGERS` while the block runs
    (importing nothing from Ray: a logger made here is the one Ray Data's module gets). Held
    records are dropped when the block ends with our error, else logged then."""
    hide = HideProjectErrors()
    loggers = [logging.getLogger(name) for name in RAY_DATA_ABORT_LOGGERS]
    for logger in loggers:
        logger.addFilter(hide)
    ours = False
    try:
        yield
    except Exception as err:
        ours = find_project_error(err) is not None
        raise
    finally:
        for logger in loggers:
            logger.removeFilter(hide)
        for record in [] if ours else hide.held:
            logging.getLogger(record.name).handle(record)


def run_command(command: str, main: Callable[[list[str]], int | None], argv: list[str], debug: bool) -> int:
    """``main(argv)`` as the exit status of ``offline-graph <command>`` (see the module
    docstring): our errors as one line, others with their traceback and where to report."""
    try:
        with contextlib.ExitStack() as quiet:
            if not debug:
                quiet.enter_context(hide_known_lines())  # Ray's unavoidable lines (known_lines.py)
                quiet.enter_context(quiet_ray_data_aborts())
            return int(main(argv) or 0)
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print(f"offline-graph {command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as err:
        found = find_project_error(err)
        if found is not None and debug:
            # Ours re-raised out of Ray's wrapper "from None": --debug shows that wrapper too
            # (it holds the worker's traceback).
            err.__suppress_context__ = False
        if found is None or debug:
            traceback.print_exc()
        if found is not None:
            return report_error(command, found)
        print(
            f"offline-graph {command}: unexpected error ({type(err).__name__}); please report it "
            "with the traceback above at the project's issue tracker.",
            file=sys.stderr,
        )
        return UNEXPECTED
