"""User code named by text (``module:function``): behaviour policies given on the command
line or in a config (:func:`load_user_policy`)."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from offline_graph.data.errors import ConfigError


def load_named(spec: str, where: str, kind: str, hint: str) -> Any:
    """``module:name`` -> that attribute of the imported module; a ConfigError naming ``spec``
    (``kind``: what it must name, e.g. ``module:Class``) when it does not import."""
    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(
            f"{where}: {spec!r} must name an importable {kind} (found {type(err).__name__}: {err}). {hint}"
        ) from None


def load_user_policy(spec: str) -> Callable[..., Any]:
    """``module:function`` -> the function (called as ``function(obs_dict, info) -> action``)."""
    call = "It is called as function(obs_dict, info) -> action."
    fn = load_named(spec, "policy", "function module:function", call)
    if not callable(fn):
        raise ConfigError(f"policy: {spec!r} must be callable (found {type(fn).__name__}). {call}")
    return fn  # type: ignore[no-any-return]
