"""Repository-root conftest: makes the repo root importable so tests can `import tests.helpers`,
sizes Ray Data's Parquet footer readers to the test machine (below), shares one local 2-CPU
Ray between the test modules that ask for ``ray_session``, and runs torch on one thread in every
test process (``one_torch_thread``)."""

from __future__ import annotations

import gc
import os
import sys

_ROOT = os.path.dirname(os.path.abspath(__file__))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

# Ray Data 2.60 lists Parquet input (every RLlib offline read, our conversions) through
# RAY_DATA_PARQUET_FOOTER_NUM_ACTORS FooterReader actors per read, 32 by default, each placed on
# a whole CPU. Files go to them in batches of 10, so a test's few files use the first actor and
# the others only start worker processes (importing Ray Data) that are killed when the listing
# ends: on 2 CPUs about half the worker processes of the algorithm-building modules. One per
# read, set before any Ray starts, reaches every driver, Ray worker and CLI subprocess of the
# session (they inherit os.environ); the footers are still read by a FooterReader actor.
os.environ.setdefault("RAY_DATA_PARQUET_FOOTER_NUM_ACTORS", "1")


import pytest  # noqa: E402


def _stop_ray() -> None:
    import ray

    if ray.is_initialized():
        gc.collect()  # finalize the learners' Ray Data iterators while Ray still runs
        ray.shutdown()


@pytest.fixture(scope="session")
def _shared_ray():
    """Stops the shared Ray (if one runs) when the session ends."""
    yield
    _stop_ray()


@pytest.fixture(scope="module")
def ray_session(_shared_ray):
    """A plain local Ray (2 CPUs, no dashboard) for one test module. Started by the first module
    that asks for it and left running for the next (``ray.init`` costs seconds); a module that
    needs its own Ray (a cluster, env vars its workers must see) is marked ``own_ray``, runs
    after the others and gets none running. Algorithms are built, trained and stopped inside
    each test; at the module's end the learners' Ray Data iterators are finalized while Ray
    still runs."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    gc.collect()


def _runs_own_ray(item: pytest.Item) -> bool:
    module = item.getparent(pytest.Module)
    return module is not None and module.get_closest_marker("own_ray") is not None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules marked ``own_ray`` (a module mark) run after the others, in their own order:
    each stops the shared Ray, so between ``ray_session`` modules each made the next one start
    Ray (and Ray Data's per-session actors) again, four more times in a full run."""
    items.sort(key=_runs_own_ray)  # stable: the order within each group is kept


@pytest.fixture(scope="module", autouse=True)
def _own_ray(request):
    """A module marked ``own_ray`` starts (and stops) its own Ray: the shared one is stopped
    before it runs."""
    if request.node.get_closest_marker("own_ray") is not None:
        _stop_ray()
    yield


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """Every test process runs torch on one intra-op thread, as
    ``offline-graph train`` runs it (``--torch-threads 1``) and as ``estimate_value`` and
    ``evaluate_module`` run it. The tests' modules are small (a few dozen nodes, batches of tens to
    hundreds), and with two pytest workers on the 2-core machine torch's two spinning threads per
    worker only wait on each other. Measured on the busy machine: 10 BC updates of a hidden-8 module
    3.5 to 4.8 s with 2 threads and 0.07 s with 1; ``test_supervised_fit_needs_structure`` 19 to
    220 s with 2 threads and 1 to 3 s with 1. Ray's worker processes (prelearner actors, remote
    learners, EnvRunners) are not affected: Ray gives its fractional-CPU workers one thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


_TIMELINE = os.environ.get("OFFLINE_GRAPH_TEST_TIMELINE")
"""A file to which every test process appends ``<worker> <end> <cpu> <test id>`` as each test
ends (epoch seconds; ``cpu``: the CPU seconds the test process and its child processes, Ray's
included, used since the previous line): how the two xdist workers' runs line up, whether one
waits idle at the end, and which tests use the machine's CPU. Unset (as in CI): nothing is
written."""


class _TreeCpu:
    """CPU seconds used by this process and its descendants (Ray's processes, CLI and page
    subprocesses), sampled every 0.2 s by a thread: a process's last sample counts after it
    ends (a process that lives under 0.2 s is missed)."""

    def __init__(self) -> None:
        import threading

        self.seen: dict[tuple[int, float], float] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        import time

        while True:
            self.sample()
            time.sleep(0.2)

    def sample(self) -> float:
        import psutil

        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    key = (proc.pid, proc.create_time())
            except psutil.Error:
                continue
            with self.lock:
                self.seen[key] = t.user + t.system
        with self.lock:
            return sum(self.seen.values())


_CPU = [_TreeCpu()] if _TIMELINE else []
_LAST_CPU = [0.0]


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:  # noqa: ARG001
    if _TIMELINE:
        import time

        cpu = _CPU[0].sample()
        used, _LAST_CPU[0] = cpu - _LAST_CPU[0], cpu
        with open(_TIMELINE, "a") as out:
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            out.write(f"{worker} {time.time():.2f} {used:.1f} {nodeid}\n")
