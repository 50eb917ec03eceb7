"""Trained RLModules from ``algo.save_to_path`` checkpoints, without Ray or the training
data: one module (:func:`restore_module`) or every module of a multi-agent run
(:func:`restore_modules`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError

if TYPE_CHECKING:
    from ray.rllib.core.rl_module.rl_module import RLModule

MODULE_SUBDIR = os.path.join("learner_group", "learner", "rl_module")
"""Where ``Algorithm.save_to_path`` puts the RLModules (one subdirectory per module id)."""


def restore_module(checkpoint: str, module_id: str | None = None) -> RLModule:
    """The RLModule ``module_id`` of an ``algo.save_to_path(checkpoint)`` directory (CPU).

    ``checkpoint`` may also point at the module directory itself
    (``<dir>/learner_group/learner/rl_module/<module_id>``). Needs no Ray cluster and no
    training data (unlike ``Algorithm.from_checkpoint``, which rebuilds the whole algorithm).
    """
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.core.rl_module.rl_module import RLModule

    mid = module_id or DEFAULT_MODULE_ID
    path = storage.absolute(checkpoint)  # a local directory or a URI
    candidates = [storage.join(path, MODULE_SUBDIR, mid), path]
    for cand in candidates:
        if storage.exists(storage.join(cand, "module_state.pkl")) and storage.exists(
            storage.join(cand, "class_and_ctor_args.pkl")
        ):
            module: Any = RLModule.from_checkpoint(**storage.target(cand))
            module.eval()
            return module  # type: ignore[no-any-return]
    raise ConfigError(
        f"restore_module: checkpoint must contain {os.path.join(MODULE_SUBDIR, mid)}/ "
        f"(found no module_state.pkl under {candidates}). Pass the directory given to "
        "`offline-graph train --checkpoint` (written by algo.save_to_path)."
    )


def restore_modules(checkpoint: str) -> dict[str, Any]:
    """``{module_id: RLModule}`` of every module in an ``algo.save_to_path(checkpoint)``
    directory (``<checkpoint>/learner_group/learner/rl_module/<module_id>/``), on CPU."""
    root = storage.join(storage.absolute(checkpoint), MODULE_SUBDIR)
    ids = [m for m in storage.entries(root) if storage.exists(storage.join(root, m, "module_state.pkl"))]
    if not ids:
        raise ConfigError(
            f"restore_modules: checkpoint must contain {MODULE_SUBDIR}/<module_id>/ (found no "
            f"module_state.pkl under {root}). Pass the directory given to `offline-graph train "
            "--checkpoint` (written by algo.save_to_path)."
        )
    return {mid: restore_module(checkpoint, mid) for mid in ids}
