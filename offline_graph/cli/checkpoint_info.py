"""What a checkpoint directory tells the commands that read it: the training run's summary
and the policy mapping function named by a ``module:function`` text."""

from __future__ import annotations

import json
from typing import Any

from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError


def checkpoint_summary(checkpoint: str | None) -> dict[str, Any]:
    """The ``summary.json`` a ``train`` run wrote next to its checkpoint ({} if none)."""
    if checkpoint is None:
        return {}
    path = storage.join(checkpoint, "summary.json")
    try:
        return dict(json.loads(storage.read_bytes(path)))
    except (OSError, ValueError):
        return {}


def load_mapping_fn(spec: str, who: str = "evaluate") -> Any:
    """``module:function`` -> the policy mapping function (ConfigError if not importable;
    ``who`` starts the message)."""
    import importlib

    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(
            f"{who}: --policy-mapping must name an importable function module:function "
            f"(found {spec!r}: {type(err).__name__}: {err}). It is called as "
            "function(agent_id, episode) -> module_id."
        ) from None
    if not callable(fn):
        raise ConfigError(
            f"{who}: --policy-mapping must be callable (found {type(fn).__name__} for {spec!r}). "
            "It is called as function(agent_id, episode) -> module_id."
        )
    return fn
