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

DATA_MOVES: dict[str, str] = {
    "action_checks": "episodes.action_checks",
    "buffer": "learning.buffer",
    "codec": "episodes.codec",
    "collate": "graphs.collate",
    "columns": "graphs.columns",
    "fast_episode": "episodes.fast_episode",
    "files": "store.files",
    "format": "store.format",
    "graph": "graphs.graph",
    "graph_arrow": "graphs.graph_arrow",
    "holdout": "episodes.holdout",
    "logged": "episodes.logged",
    "ma_stats": "analysis.ma_stats",
    "migrate": "migration.migrate",
    "migrate_episodes": "migration.migrate_episodes",
    "multi_agent": "episodes.multi_agent",
    "ope": "analysis.ope",
    "reader": "episodes.reader",
    "returns": "learning.returns",
    "reward_scale": "learning.reward_scale",
    "row_checks": "episodes.row_checks",
    "sequences": "learning.sequences",
    "space_text": "graphs.space_text",
    "spaces": "graphs.spaces",
    "spec": "episodes.spec",
    "stats": "analysis.stats",
    "storage": "store.storage",
    "transitions": "learning.transitions",
    "validation": "episodes.validation",
    "value_runs": "learning.value_runs",
}
"""Module of ``offline_graph.data`` -> its place in a sub-package (issue 39)."""

RLLIB_MOVES: dict[str, str] = {
    "accounting": "offline.accounting",
    "acting": "evaluation.acting",
    "algo_classes": "algorithms.algo_classes",
    "checkpoint_selection": "evaluation.checkpoint_selection",
    "checkpoints": "evaluation.checkpoints",
    "checks": "offline.checks",
    "collate_fn": "offline.collate_fn",
    "configure": "algorithms.configure",
    "connectors": "offline.connectors",
    "critic": "core.critic",
    "env_connectors": "env.env_connectors",
    "env_runner": "env.env_runner",
    "env_setup": "env.env_setup",
    "env_states": "env.env_states",
    "episodes": "offline.episodes",
    "fqe": "ope.fqe",
    "fqe_model": "ope.fqe_model",
    "gnn_layers": "core.gnn_layers",
    "gnn_module": "core.gnn_module",
    "graph_minibatch": "core.graph_minibatch",
    "ma_env_runner": "env.ma_env_runner",
    "ma_evaluation": "evaluation.ma_evaluation",
    "memory": "core.memory",
    "model_options": "core.model_options",
    "multi_agent": "offline.multi_agent",
    "offline_data": "offline.offline_data",
    "offline_metrics": "evaluation.offline_metrics",
    "online": "algorithms.online",
    "ope_checks": "ope.ope_checks",
    "ope_policy": "ope.ope_policy",
    "ope_runner": "ope.ope_runner",
    "ppo_learner": "algorithms.ppo_learner",
    "prelearner": "offline.prelearner",
    "ray_session": "core.ray_session",
    "reading": "offline.reading",
    "resources": "offline.resources",
    "selection": "core.selection",
    "settings": "core.settings",
    "stepwise": "core.stepwise",
    "team_config": "algorithms.team_config",
    "value_algorithms": "algorithms.value_algorithms",
    "value_configure": "algorithms.value_configure",
    "value_learner": "algorithms.value_learner",
    "vector_env": "env.vector_env",
    "write": "offline.write",
}
"""Module of ``offline_graph.rllib`` -> its place in a sub-package (``reading`` is a package)."""

MOVED: dict[str, tuple[str, ...]] = {
    **{
        f"offline_graph.{name}": (f"offline_graph.data.{DATA_MOVES.get(name, name)}",)
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
    "offline_graph.episode_codec": (
        "offline_graph.data.episodes.codec",
        "offline_graph.rllib.offline.episodes",
    ),
    "offline_graph.files": ("offline_graph.data.store.files", "offline_graph.jobs.source"),
    "offline_graph.accounting": ("offline_graph.rllib.offline.accounting",),
    "offline_graph.jobs.accounting": ("offline_graph.rllib.offline.accounting",),
    "offline_graph.jobs.spaces": ("offline_graph.env.data_spaces",),
    "offline_graph.convert": ("offline_graph.jobs.convert",),
    "offline_graph.recording": ("offline_graph.jobs.recording",),
    "offline_graph.evaluation": ("offline_graph.rllib.evaluation.evaluate",),
    # the experiment programs before one runner (issue 39): ``main`` of the old module is the task's
    "offline_graph.cli.ma_experiment": ("offline_graph.cli.experiments.team",),
    "offline_graph.cli.stitch_experiment": ("offline_graph.cli.experiments.stitch",),
    "offline_graph.cli.experiment_run": (
        "offline_graph.cli.experiments.runs",
        "offline_graph.cli.experiments.runner",
        "offline_graph.bench.experiments.results",
    ),
    "offline_graph.cli.experiment_report": (
        "offline_graph.cli.experiments.report",
        "offline_graph.bench.experiments.results",
    ),
    # offline_graph/data/ before its sub-packages (issue 39)
    **{f"offline_graph.data.{name}": (f"offline_graph.data.{home}",) for name, home in DATA_MOVES.items()},
    # offline_graph/rllib/ before its sub-packages (issue 39); the three old modules whose path
    # is now a sub-package (algorithms, evaluation, ope) forward from that package's __init__
    **{f"offline_graph.rllib.{name}": (f"offline_graph.rllib.{home}",) for name, home in RLLIB_MOVES.items()},
    **{
        f"offline_graph.rllib.reading.{name}": (f"offline_graph.rllib.offline.reading.{name}",)
        for name in ("base", "episodes", "multi_agent", "rows", "runs", "value")
    },
}
"""Old module path -> the modules its names now live in (searched in order)."""


def forward_from(old: str, targets: Sequence[str], namespace: dict[str, Any] | None = None) -> Any:
    """A module ``__getattr__`` for ``old`` that finds a name in ``targets`` with one warning;
    the name found is kept in ``namespace`` (the old module's ``__dict__``), so that
    ``from old import name``, which looks the name up twice, warns once."""

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
                value = getattr(module, name)
                if namespace is not None:
                    namespace[name] = value
                return value
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
        module.__getattr__ = forward_from(spec.name, MOVED[spec.name], module.__dict__)  # type: ignore[method-assign]
        if any(other.startswith(f"{spec.name}.") for other in MOVED):
            module.__path__ = []  # an old package (offline_graph.rllib.reading): its old submodules import
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
