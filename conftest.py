"""Repository-root conftest: makes the repo root importable so tests can `import tests.helpers`,
and shares one local 2-CPU Ray between the test modules that ask for ``ray_session``."""

from __future__ import annotations

import gc
import os
import sys

_ROOT = os.path.dirname(os.path.abspath(__file__))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


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
    needs its own Ray (a cluster, env vars its workers must see) is marked ``own_ray`` and gets
    none running. Algorithms are built, trained and stopped inside each test; at the module's
    end the learners' Ray Data iterators are finalized while Ray still runs."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    gc.collect()


@pytest.fixture(scope="module", autouse=True)
def _own_ray(request):
    """A module marked ``own_ray`` starts (and stops) its own Ray: the shared one is stopped
    before it runs."""
    if request.node.get_closest_marker("own_ray") is not None:
        _stop_ray()
    yield
