"""One lane of tests/test_docs.py's page runs: several pages' code, one after another, in one
interpreter and one Ray, as a reader who follows the guides in one directory runs them.

``python -m tests.doc_lane SPEC`` where SPEC is a JSON file ``{"cwd": dir, "io": dir, "pages":
[{"name": ..., "code": ...}, ...]}``. Each page's code runs in ``cwd`` in a fresh namespace
(``__name__ == "__main__"``, nothing from the pages before it), its file descriptors 1 and 2
(the page's prints, Ray's and its subprocesses' output) in ``io/<n>.out`` and ``io/<n>.err``,
and its exit status in ``io/<n>.rc`` (0, or 1 with the traceback in ``.err``) once it ends.

What the pages share is what a fresh interpreter would start again: the imports (~5 CPU s)
and the Ray instance (its own processes and Ray Data's per-session actors, ~8 CPU s). Ray is
started before a page when none runs (:data:`RAY_SETTINGS`; a page's own ``ray.init(...,
ignore_reinit_error=True)`` then reuses it), and stopped after a page that left CPUs held (an
algorithm it did not stop), so that every page starts with the whole Ray free.
"""

from __future__ import annotations

import builtins
import gc
import json
import os
import sys
import time
import traceback

PAGE_THREADS = 1
"""A lane's interpreter gets ``OMP_NUM_THREADS=1`` unless the environment sets it (the thread
count is all that differs from a reader's run). The page's own process holds the local learner
and the evaluation and PPO loops, and torch gives it one spinning intra-op thread per core;
with the lanes at once on two cores (beside the other test worker) those threads only take
CPU from the other runs (the training guide: the same slow-down of ``offline-graph train`` on a
busy 2-CPU machine, hence its ``--torch-threads 1``). Ray's fractional-CPU workers already get
one thread. Measured on training.md: its processes used 29.6 CPU s instead of 41.5 (the page's
own 10.0 instead of 20.5)."""


RAY_SETTINGS = {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False}
"""The pages' own settings (``ray.init(num_cpus=2, include_dashboard=False, ...)``), with the
Ray workers' output not forwarded (it would land in whichever page runs when it arrives)."""


def run_code(code: str, name: str) -> int:
    """``code`` in a fresh ``__main__`` namespace; 0, or 1 after printing the traceback."""
    namespace: dict[str, object] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(code, name, "exec"), namespace)
        return 0
    except SystemExit as stop:
        return 0 if stop.code in (None, 0) else 1
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        namespace.clear()
        gc.collect()  # what the page left (its algorithms' iterators) goes while Ray runs


def run_page(code: str, name: str, out: str, err: str) -> int:
    """:func:`run_code` with file descriptors 1 and 2 in ``out`` and ``err``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(out, "w") as out_file, open(err, "w") as err_file:
        os.dup2(out_file.fileno(), 1)
        os.dup2(err_file.fileno(), 2)
        try:
            return run_code(code, name)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def cpus_free(ray, wait_s: float = 5.0) -> bool:  # noqa: ANN001
    """Whether every CPU of the running Ray is free again (actors end asynchronously)."""
    deadline = time.monotonic() + wait_s
    while True:
        if ray.available_resources().get("CPU", 0.0) >= ray.cluster_resources().get("CPU", 0.0):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    import ray

    for i, page in enumerate(spec["pages"]):
        os.chdir(spec["cwd"])
        if not ray.is_initialized():
            ray.init(**RAY_SETTINGS)
        io = os.path.join(spec["io"], str(i))
        rc = run_page(page["code"], page["name"], f"{io}.out", f"{io}.err")
        if ray.is_initialized() and not cpus_free(ray):
            print(f"doc_lane: {page['name']} left CPUs held; Ray stopped", file=sys.stderr)
            ray.shutdown()
        with open(f"{io}.rc", "w") as f:
            f.write(str(rc))


if __name__ == "__main__":
    main(sys.argv[1])
