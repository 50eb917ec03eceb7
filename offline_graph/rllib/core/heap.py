"""A learner process keeps the memory it frees for the next update (glibc's allocator only).

Every update allocates and frees the same large tensors: activations and gradients of a few
MB each for a batch of 256 graphs. With glibc's defaults a freed block above a dynamic
threshold (from 128 KiB) goes back to the kernel (``munmap``, or a trim of the heap's top
above twice the threshold), and the next update faults every page of it in again, zeroed by
the kernel. On the project's 2-CPU VM a plain PyTorch loop of ``GNNModule`` (B=256, one torch
thread, 6 x 10 updates) took 66k-355k minor page faults and 0.13-0.65 s of system time per
~2 s, at 5.5k-7.6k transitions/s from one run to the next; with the thresholds below it took
1.4k-3k faults, 0.01 s and 8.0k-8.3k transitions/s (docs/benchmarks.md).

:func:`keep_freed_heap` sets glibc's ``M_MMAP_THRESHOLD`` to 32 MiB (its largest value on
64-bit Linux) and ``M_TRIM_THRESHOLD`` to 256 MiB, so the process keeps up to that much freed
memory for reuse. Setting either one alone does not help: a fixed trim threshold also fixes the
mmap threshold at 128 KiB, which measured 3x slower. The setting is process-wide; our learners
call it when RLlib builds them (a local learner: in the driver's process). Set the environment
variable ``OFFLINE_GRAPH_MALLOC=default`` (before the processes start) to keep glibc's defaults.
"""

from __future__ import annotations

import ctypes
import os
import platform

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""``mallopt`` parameters (glibc's malloc.h)."""
MMAP_THRESHOLD = 32 * 1024 * 1024
TRIM_THRESHOLD = 256 * 1024 * 1024
ENV = "OFFLINE_GRAPH_MALLOC"


def has_glibc() -> bool:
    """Whether this process runs on Linux with glibc (whose ``mallopt`` this module sets)."""
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def keep_freed_heap() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (see the module doc); False
    (nothing changed) without glibc or with ``OFFLINE_GRAPH_MALLOC=default``."""
    if os.environ.get(ENV, "") == "default" or not has_glibc():
        return False
    libc = ctypes.CDLL("libc.so.6")
    mmap_ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return mmap_ok and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1


class KeptHeap:
    """Learner mixin: :func:`keep_freed_heap` when RLlib builds the learner (put it before a
    ``TorchLearner`` class in the bases)."""

    def build(self) -> None:
        keep_freed_heap()
        super().build()  # type: ignore[misc]
