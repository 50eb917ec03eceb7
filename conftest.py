"""Repository-root conftest: makes the repo root importable so tests can `import tests.helpers`."""

from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.abspath(__file__))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


import pytest  # noqa: E402


@pytest.fixture(scope="module")
def ray_session():
    """A 2-CPU local Ray for one test module (reused if Ray already runs, then left running)."""
    import gc

    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        gc.collect()  # finalize the learners' Ray Data iterators while Ray still runs
        ray.shutdown()
