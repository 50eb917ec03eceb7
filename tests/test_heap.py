"""Learner processes keep the memory they free (offline_graph.rllib.core.heap)."""

import os
import subprocess
import sys

import pytest

from offline_graph.rllib.algorithms.learners import GraphMARWILTorchLearner
from offline_graph.rllib.algorithms.ppo_learner import GraphPPOTorchLearner
from offline_graph.rllib.algorithms.value_learner import GraphValueTorchLearner
from offline_graph.rllib.core.heap import ENV, KeptHeap, has_glibc

ROUNDS, ARRAYS, MIB = 20, 10, 2
PAGES = ARRAYS * MIB * 1024 * 1024 // 4096  # pages written per round: 10 arrays of 2 MiB
CHILD = f"""
import numpy as np
from offline_graph.rllib.core.heap import keep_freed_heap
print(keep_freed_heap())
def faults():
    return int(open("/proc/self/stat").read().split(")")[-1].split()[7])
before = faults()
for _ in range({ROUNDS}):  # an update's pattern: allocate the activations, free them all
    arrays = [np.ones({MIB} * 1024 * 1024 // 8) for _ in range({ARRAYS})]
    del arrays
print(faults() - before)
"""


def child_faults(env_value: str | None) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if env_value is not None:
        env[ENV] = env_value
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    applied, faults = out.stdout.split()
    return applied, int(faults)


@pytest.mark.skipif(not has_glibc(), reason="glibc's allocator only")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    # glibc's defaults give the freed 20 MiB back to the kernel each round, so every round
    # faults its 5,120 pages in again; kept, only the first round does.
    applied, kept = child_faults(None)
    assert applied == "True"
    assert kept < 2 * PAGES, kept
    applied, default = child_faults("default")
    assert applied == "False"
    assert default > (ROUNDS - 2) * PAGES, default


def test_our_learners_keep_the_heap():
    for cls in (GraphMARWILTorchLearner, GraphValueTorchLearner, GraphPPOTorchLearner):
        assert cls.__mro__.index(KeptHeap) < min(
            i for i, base in enumerate(cls.__mro__) if base.__name__ == "TorchLearner"
        ), cls
