"""``offline-graph experiment``'s tables as data: one runner (:mod:`.runner`) and one small
declared spec per task (a :class:`~offline_graph.cli.experiments.spec.Task` in a module of its
own: ``graph``, ``team``, ``stitch``, ``jobshop``, ``channel``, ``dispatch``): its env,
options, logged data, rows, trainer, baselines and targets. results.json / results.md /
learning_curves.png are written the same way for every task whose table is the runner's;
``jobshop`` (gaps per Taillard group) declares its own ``run``. A new task is a new module here
and a line in :data:`TASKS`."""

from __future__ import annotations

import importlib

from offline_graph.cli.experiments.spec import Task

TASKS = ("graph", "team", "stitch", "jobshop", "channel", "dispatch")
"""The tasks of ``offline-graph experiment --task`` (the first is the default)."""


def task_of(name: str) -> Task:
    """The declared :class:`Task` of ``name`` (one of :data:`TASKS`)."""
    return importlib.import_module(f"offline_graph.cli.experiments.{name}").TASK
