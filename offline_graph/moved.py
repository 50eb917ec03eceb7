"""Module paths from before the ``data`` / ``rllib`` / ``jobs`` / ``cli`` layers keep working.

``import offline_graph.collate`` (or ``offline_graph.spaces``, ...) gives a small module whose
attributes come from the new home, with a ``DeprecationWarning`` naming it. This also keeps
checkpoints and pickles that name an old path (e.g. ``offline_graph.spaces.NodeAction`` inside
a saved module's action space) loadable. Only ``sys.meta_path`` gains one finder; nothing of
RLlib or any other package is changed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from typing import Any, Sequence

MOVED: dict[str, tuple[str, ...]] = {
    **{
        f"offline_graph.{name}": (f"offline_graph.data.{name}",)
        for name in (
            "errors",
            "graph",
            "columns",
            "collate",
            "format",
            "validation",
            "fast_episode",
            "transitions",
            "buffer",
            "returns",
            "reader",
            "spaces",
            "stats",
        )
    },
    "offline_graph.episode_codec": ("offline_graph.data.codec", "offline_graph.rllib.episodes"),
    "offline_graph.files": ("offline_graph.data.files", "offline_graph.jobs.source"),
    "offline_graph.accounting": ("offline_graph.rllib.accounting",),
    "offline_graph.jobs.accounting": ("offline_graph.rllib.accounting",),
    "offline_graph.jobs.spaces": ("offline_graph.env.data_spaces",),
    "offline_graph.convert": ("offline_graph.jobs.convert",),
    "offline_graph.recording": ("offline_graph.jobs.recording",),
    "offline_graph.evaluation": ("offline_graph.rllib.evaluation",),
}
"""Old module path -> the modules its names now live in (searched in order)."""


def _forward(old: str, targets: Sequence[str]) -> Any:
    def __getattr__(name: str) -> Any:
        for target in targets:
            try:
                module = importlib.import_module(target)
            except ModuleNotFoundError:
                continue
            if hasattr(module, name):
                warnings.warn(
                    f"{old}.{name} moved to {target}.{name}; import it from there (the old path "
                    "is kept for existing code and checkpoints).",
                    DeprecationWarning,
                    stacklevel=2,
                )
                return getattr(module, name)
        raise AttributeError(
            f"{old}: {name!r} must be a name of {' or '.join(targets)} (found no such name). "
            "The module moved; see docs/architecture.md."
        )

    return __getattr__


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of :data:`MOVED` and builds their forwarding modules."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name, f"Moved to {', '.join(MOVED[spec.name])}.")
        module.__getattr__ = _forward(spec.name, MOVED[spec.name])  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: every attribute is forwarded on access."""


class _Package(types.ModuleType):
    """``offline_graph`` itself: importing an old path that is also a public name (the module
    ``offline_graph.collate`` vs the function ``offline_graph.collate``) must not rebind the
    package attribute to the forwarding module, as the import system otherwise does."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and f"{self.__name__}.{name}" in MOVED:
            return
        super().__setattr__(name, value)


def install(package: str = "offline_graph") -> None:
    """Add the finder to ``sys.meta_path`` once and guard the package's public names (called
    by ``import offline_graph``)."""
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.append(MovedModules())
    sys.modules[package].__class__ = _Package
