"""Suite-wide settings.

``one_torch_thread``: every test process runs torch on one intra-op thread, as
``offline-graph train`` runs it (``--torch-threads 1``) and as ``estimate_value`` and
``evaluate_module`` run it. The tests' modules are small (a few dozen nodes, batches of tens to
hundreds), and with two pytest workers on the 2-core machine torch's two spinning threads per
worker only wait on each other. Measured on the busy machine: 10 BC updates of a hidden-8 module
3.5 to 4.8 s with 2 threads and 0.07 s with 1; ``test_supervised_fit_needs_structure`` 19 to
220 s with 2 threads and 1 to 3 s with 1. Ray's worker processes (prelearner actors, remote
learners, EnvRunners) are not affected: Ray gives its fractional-CPU workers one thread.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
