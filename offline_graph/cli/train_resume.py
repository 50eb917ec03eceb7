"""Periodic checkpoints and resuming of ``offline-graph train``.

``--checkpoint-every K`` saves the algorithm every K iterations into ``--checkpoint DIR``
(RLlib's ``algo.save_to_path``: module weights, optimizer states, the learners' state) and
then ``DIR/progress.json``: the last saved iteration, the iterations' records so far and the
run's identity (algorithm, spaces, model settings). Written after the checkpoint, so a run
killed while saving resumes from the previous complete one.

The end of the run saves the same way (iteration N; with ``--select-by`` the kept iteration,
see :mod:`offline_graph.cli.train_select`).

``--resume`` continues from ``DIR``'s last checkpoint to ``--iterations N`` with the same
flags: the identity must match (a different algorithm, spaces or model is a ConfigError that
names each difference); the algorithm is rebuilt and ``algo.restore_from_path(DIR)`` loads the
weights and optimizer states. The data pipeline starts a new pass (which transitions were
sampled before the kill is not saved).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from offline_graph.cli.train_config import Config
from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError

PROGRESS = "progress.json"
IDENTITY_FIELDS = (
    "algo",
    "hidden",
    "layers",
    "conv",
    "bag_of_nodes",
    "graph_only",
    "frame_stack",
    "memory",
    "max_seq_len",
    "batch_size",
    "num_learners",
)
"""The settings a resumed run must share with the run it continues."""
DEFAULTS = {f.name: f.default for f in dataclasses.fields(Config)}
"""Each field's default: what a checkpoint saved before the field existed had."""


def identity(cfg: Config, spaces: dict[str, str]) -> dict[str, Any]:
    """What makes a checkpoint resumable by ``cfg``: :data:`IDENTITY_FIELDS` and the spaces."""
    return {**{f: getattr(cfg, f) for f in IDENTITY_FIELDS}, **spaces}


def save_progress(
    algo: Any,
    cfg: Config,
    iteration: int,
    history: list[dict],
    ident: dict[str, Any],
    selected_iteration: int | None = None,
) -> None:
    """Checkpoint ``algo`` into ``cfg.checkpoint``, then record ``iteration`` as resumable
    (``selected_iteration``: the iteration ``algo`` holds when it is not ``iteration``, the
    end of a ``--select-by`` run that kept an earlier one; not resumable)."""
    storage.makedirs(cfg.checkpoint)
    algo.save_to_path(**storage.target(cfg.checkpoint))
    body = {"iteration": iteration, "identity": ident, "history": history}
    if selected_iteration is not None and selected_iteration != iteration:
        body["selected_iteration"] = selected_iteration
    storage.write_bytes(storage.join(cfg.checkpoint, PROGRESS), json.dumps(body, default=str).encode())


def resume_point(cfg: Config, ident: dict[str, Any]) -> tuple[int, list[dict]]:
    """(last saved iteration, its history) of ``cfg.checkpoint``; raises a ConfigError when
    there is nothing to resume, the run is already at ``--iterations``, or the flags differ."""
    path = storage.join(cfg.checkpoint, PROGRESS)
    if not storage.exists(path):
        raise ConfigError(
            f"train --resume: {path} must exist (found no saved progress). Resume a run that was "
            "started with --checkpoint-every K and the same --checkpoint."
        )
    saved = json.loads(storage.read_bytes(path))
    # a field added since the checkpoint was saved (e.g. graph_only) had its default then
    was = {key: saved["identity"].get(key, DEFAULTS.get(key)) for key in ident}
    diffs = [f"{key}: {was[key]!r} -> {value!r}" for key, value in ident.items() if was[key] != value]
    if diffs:
        raise ConfigError(
            f"train --resume: algorithm, spaces and model must match the checkpoint's (found "
            f"{'; '.join(diffs)}). Resume with the first run's flags, or train into a new --checkpoint."
        )
    done = int(saved["iteration"])
    if saved.get("selected_iteration") is not None:
        raise ConfigError(
            f"train --resume: the checkpoint must hold its last iteration {done} (found the "
            f"iteration {saved['selected_iteration']} that --select-by kept at the end of the "
            "run). A finished --select-by run cannot continue; rerun with more --iterations into a new "
            "--checkpoint."
        )
    if done >= cfg.iterations:
        raise ConfigError(
            f"train --resume: --iterations must be > the checkpoint's iteration {done} (found "
            f"{cfg.iterations}). Ask for more iterations to continue."
        )
    return done, list(saved["history"])
