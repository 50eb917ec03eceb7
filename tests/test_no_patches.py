"""Importing offline_graph changes nothing in RLlib: no class or function is patched.

In a fresh interpreter the attributes of RLlib's algorithm, config, BC, MARWIL, offline data,
prelearner, learner and checkpoint modules are snapshotted (the id of every module attribute,
of every attribute in each class's ``__dict__`` and of each function's code, defaults and
``__dict__`` entries), every module under ``offline_graph`` is imported, and the snapshot is
taken again. A deliberate patch afterwards shows the snapshot would see one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RLLIB_MODULES = [
    "ray.rllib.algorithms.algorithm",
    "ray.rllib.algorithms.algorithm_config",
    "ray.rllib.algorithms.bc",
    "ray.rllib.algorithms.bc.bc",
    "ray.rllib.algorithms.marwil",
    "ray.rllib.algorithms.marwil.marwil",
    "ray.rllib.offline.offline_prelearner",
    "ray.rllib.offline.offline_data",
    "ray.rllib.core.learner.learner",
    "ray.rllib.core.learner.learner_group",
    "ray.rllib.utils.checkpoints",
    # what GraphEnvRunner (offline_graph/rllib/env/env_runner.py) builds on
    "ray.rllib.env.env_runner",
    "ray.rllib.env.single_agent_env_runner",
    "ray.rllib.env.single_agent_episode",
    "ray.rllib.offline.offline_env_runner",
    "ray.rllib.connectors.connector_pipeline_v2",
    "ray.rllib.connectors.common.batch_individual_items",
]

SCRIPT = r"""
import importlib, json, pkgutil, sys, types

mods = [importlib.import_module(name) for name in sys.argv[1].split(",")]


def snapshot():
    out = {}
    for mod in mods:
        for name, obj in list(vars(mod).items()):
            if isinstance(obj, types.ModuleType) and obj.__name__.startswith(mod.__name__ + "."):
                continue  # a submodule: importing it sets this attribute of its package
            key = f"{mod.__name__}.{name}"
            out[key] = id(obj)
            if isinstance(obj, type):
                for attr, value in list(vars(obj).items()):
                    out[f"{key}.{attr}"] = id(value)
            elif isinstance(obj, types.FunctionType):
                for attr in ("__code__", "__defaults__", "__kwdefaults__"):
                    out[f"{key}.{attr}"] = id(getattr(obj, attr))
                for attr, value in list(vars(obj).items()):
                    out[f"{key}.{attr}"] = id(value)
    return out


def changed(a, b):
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


before = snapshot()
import offline_graph

names = sorted(m.name for m in pkgutil.walk_packages(offline_graph.__path__, "offline_graph."))
for name in names:
    importlib.import_module(name)
after = snapshot()

# The control: a patch like the ones offline_graph used to install is seen.
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

original = AlgorithmConfig.validate
AlgorithmConfig.validate = lambda self: original(self)
patched = snapshot()
print(json.dumps({"imported": names, "attributes": len(before), "changed": changed(before, after),
                  "control": changed(after, patched)}))
"""


def test_importing_offline_graph_changes_no_rllib_attribute() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, ",".join(RLLIB_MODULES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # Every module under offline_graph was imported, the RLlib glue among them.
    for name in (
        "offline_graph.rllib.algorithms.offline_algorithms",
        "offline_graph.rllib.algorithms.configure",
        "offline_graph.rllib.offline.prelearner",
        "offline_graph.rllib.evaluation.evaluate",
        "offline_graph.cli.train",
        "offline_graph.jobs.convert",
        "offline_graph.env",
    ):
        assert name in result["imported"], name
    # Some thousands of attributes were compared, none changed.
    assert result["attributes"] > 1000
    assert result["changed"] == []
    # The same snapshot sees a patch of AlgorithmConfig.validate, in every module that
    # holds AlgorithmConfig.
    assert "ray.rllib.algorithms.algorithm_config.AlgorithmConfig.validate" in result["control"]
    assert "ray.rllib.algorithms.algorithm.AlgorithmConfig.validate" in result["control"]
    assert all(key.endswith("AlgorithmConfig.validate") for key in result["control"])
