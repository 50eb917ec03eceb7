"""Ray's and RLlib's own log lines that every ``offline-graph`` run prints and nothing of ours
can avoid, kept off the console while a command runs (``--debug`` keeps them).

Only the ``offline-graph`` dispatcher installs this (:func:`hide_known_lines` in
:func:`offline_graph.cli.failures.run_command`); library users see Ray's output as it is. The
filter works on file descriptor 2, because one of the lines comes from Ray's C++ core worker,
not from Python logging: stderr goes through a pipe, and a thread passes every line on except
those that contain one of :data:`KNOWN_LINES`. Each entry says why it cannot be avoided.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Iterator

KNOWN_LINES: tuple[tuple[str, str], ...] = (
    (
        "has constructor arguments in the object store and max_restarts > 0",
        # core_worker.cc (ERROR) for every Ray Data map actor: Ray Data itself passes the map
        # transformer and its DataContext to MapWorker as object refs and asks max_restarts=-1
        # (ray-project/ray#57733, open). max_restarts=0 would silence it and lose the restart
        # of a dead prelearner actor (tests/test_faults.py).
        "Ray Data map actors",
    ),
    (
        "`RLModule(config=[RLModuleConfig object])` has been deprecated",
        # RLlib 2.60's own RLModule.__init__ builds a deprecated RLModuleConfig for every
        # module, also when constructed the new way (observation_space=.., model_config=..).
        "RLlib's RLModule constructor",
    ),
)
"""(substring, whose line) pairs of the lines kept off the console."""

JOIN_SECONDS = 2.0
"""How long the end of a command waits for the pipe's last lines (Ray's own processes may
still hold the pipe open)."""


def is_known(line: str) -> bool:
    """Whether ``line`` is one of :data:`KNOWN_LINES`."""
    return any(text in line for text, _ in KNOWN_LINES)


def _forward(read_fd: int, out_fd: int) -> None:
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        pending = b""
        while True:
            chunk = pipe.read(65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not is_known(line.decode("utf-8", "replace")):
                    os.write(out_fd, line + b"\n")
        if pending and not is_known(pending.decode("utf-8", "replace")):
            os.write(out_fd, pending)


@contextlib.contextmanager
def hide_known_lines() -> Iterator[None]:
    """Pass file descriptor 2 through a filter that drops :data:`KNOWN_LINES` while the block
    runs; stderr is restored when it ends."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 (a closed stderr): nothing to filter
        yield
        return
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    thread = threading.Thread(target=_forward, args=(read_fd, saved), daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # our write end of the pipe closes here
        thread.join(JOIN_SECONDS)
        if not thread.is_alive():
            os.close(saved)
