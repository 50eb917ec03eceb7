"""Ray for this process: :func:`start_ray` (quiet, unless one runs already),
:func:`quiet_ray_data` (Ray Data's progress lines off) and :func:`stop_ray` (at the end of a
command that started it)."""

from __future__ import annotations

import gc
import logging


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


def quiet_ray_data() -> None:
    """Ray Data's progress logging floods the per-iteration lines; keep warnings only."""
    try:
        from ray.data import DataContext

        ctx = DataContext.get_current()
        ctx.enable_progress_bars = False
        for attr in ("enable_operator_progress_bars", "print_on_execution_start"):
            if hasattr(ctx, attr):
                setattr(ctx, attr, False)
    except Exception:  # noqa: BLE001, S110 (only cosmetics)
        pass
    for name in ("ray.data", "ray.rllib", "ray.tune"):
        logging.getLogger(name).setLevel(logging.WARNING)
