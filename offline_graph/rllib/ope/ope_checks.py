"""Range checks of ``estimate_value``'s settings (:mod:`offline_graph.rllib.ope.estimate`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.rllib.ope.fqe import FQESettings


def check_settings(n_boot: Any, settings: FQESettings, bc_epochs: Any, where: str = "estimate_value") -> None:
    """ConfigError for a setting outside its range (before any work: an FQE of 0 iterations
    was the untrained model's value, 1 bootstrap resample a zero-width interval)."""
    ints: list[tuple[str, Any, int, bool]] = [("batch_size", settings.batch_size, 1, False)]
    ints += [("fqe_heads", settings.boot_heads, 0, False)]
    ints += [("bc_epochs", bc_epochs, 1, False), ("epochs", settings.epochs, 1, True)]
    ints += [("horizon", settings.horizon, 1, True), ("fqe_steps", settings.steps, 1, True)]
    for name, value, low, optional in ints:
        if optional and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ConfigError(
                f"{where}: {name} must be an int >= {low}{' or None' if optional else ''} (found {value!r})."
            )
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 0 or n_boot == 1:
        raise ConfigError(f"{where}: n_boot must be 0 (no interval: NaN) or an int >= 2 (found {n_boot!r}).")
    if isinstance(settings.lr, bool) or not isinstance(settings.lr, (int, float)) or not settings.lr > 0:
        raise ConfigError(f"{where}: lr must be a number > 0 (found {settings.lr!r}).")
    if not isinstance(settings.by_step, (bool, np.bool_)):
        raise ConfigError(f"{where}: fqe_by_step must be True or False (found {settings.by_step!r}).")
    tau = settings.tau
    if tau is not None and (isinstance(tau, bool) or not isinstance(tau, (int, float)) or not 0 < tau <= 1):
        raise ConfigError(f"{where}: tau must be in (0, 1] or None (found {tau!r}).")


def by_step_warnings(settings: FQESettings, ptr: np.ndarray) -> list[str]:
    """With ``by_step``: a ConfigError without a horizon (given or found in the data), else
    a warning when the horizon outruns the longest logged episode (later steps count 0)."""
    if not settings.by_step:
        return []
    if settings.horizon is None:
        raise ConfigError(
            "estimate_value: horizon must be given with fqe_by_step=True (found no horizon, and "
            "no truncated logged episode to take the time limit from). Pass horizon= (offline-graph "
            "evaluate: --horizon), the most steps an episode can last."
        )
    longest = int(np.diff(ptr).max())
    if settings.horizon <= longest:
        return []
    return [
        f"fqe: fqe_by_step values only the steps the logs reach (the longest logged episode has "
        f"{longest} steps, fewer than horizon={settings.horizon}): later steps count 0, so a target "
        "that outlives the logged episodes is under-estimated. Leave fqe_by_step off for it."
    ]
