"""User code named by text (``module:function``): behaviour policies given on the command
line or in a config (:func:`load_user_policy`)."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from offline_graph.data.errors import ConfigError


def load_user_policy(spec: str) -> Callable[..., Any]:
    """``module:function`` -> the function (called as ``function(obs_dict, info) -> action``)."""
    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(
            f"policy: {spec!r} must name an importable function module:function (found "
            f"{type(err).__name__}: {err}). It is called as function(obs_dict, info) -> action."
        ) from None
    if not callable(fn):
        raise ConfigError(
            f"policy: {spec!r} must be callable (found {type(fn).__name__}). It is called as "
            "function(obs_dict, info) -> action."
        )
    return fn
