"""Ray for this process: :func:`start_ray` (quiet, unless one runs already) and
:func:`stop_ray` (at the end of a command that started it)."""

from __future__ import annotations

import gc


def start_ray(num_cpus: int | None = None) -> bool:
    """``ray.init`` on ``num_cpus`` CPUs (None: all) without the dashboard or the workers' logs,
    unless Ray runs already; returns whether it was started here."""
    import ray

    if ray.is_initialized():
        return False
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    return True


def stop_ray(started: bool) -> None:
    """A garbage collection, then ``ray.shutdown()`` if ``started`` (:func:`start_ray`'s answer).

    The collection finalizes, while Ray still runs, what the caller let go of: the learners'
    Ray Data iterators of a stopped and deleted algorithm log a traceback ("Ray is not
    initialized") when they are finalized after ``ray.shutdown()``."""
    import ray

    gc.collect()
    if started:
        ray.shutdown()
