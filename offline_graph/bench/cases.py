"""The bench cases in run order: ``offline-graph bench CASE ...`` looks them up here.

Every case takes a :class:`~offline_graph.bench.harness.BenchContext` and returns
:class:`~offline_graph.bench.harness.Row` s (ours vs RLlib's stock padded path on the same
generated data). One module per concern:

* :mod:`offline_graph.bench.case_data_path`: ``convert``, ``prelearner``, ``pipeline``,
  ``stream``, ``collate`` (throughput of each stage of the data path);
* :mod:`offline_graph.bench.case_bytes`: ``bytes`` (bytes per transition at each stage);
* :mod:`offline_graph.bench.case_memory`: ``memory`` (peak RSS of a prelearner worker);
* :mod:`offline_graph.bench.case_league`: ``league`` (peak RSS of a prelearner actor and of a
  learner with 2 vs 32 league modules);
* :mod:`offline_graph.bench.case_sampling`: ``sampling`` (EnvRunner env steps/s, graphs vs a
  padded Box);
* :mod:`offline_graph.bench.case_value`: ``value`` (IQL / CQL: value-run bytes per trained
  transition and update speed against BC / MARWIL);
* :mod:`offline_graph.bench.case_ope`: ``ope`` (off-policy evaluation: seconds per 10k logged
  transitions of WIS, PDIS, FQE and DR);
* :mod:`offline_graph.bench.case_learner`: ``learner`` (``algo.train()`` of BC, MARWIL and IQL
  against a plain PyTorch loop of the same module, and the per-iteration time that is not
  the model) and ``gpu`` (learner step time on CUDA);
* :mod:`offline_graph.bench.case_sampling` also ``inference`` (``evaluate_module`` and
  ``GraphEnvRunner`` steps/s against a plain env loop of the same module).

Importing this module imports neither Ray nor torch (the cases import them when they run).
"""

from __future__ import annotations

from typing import Callable

from offline_graph.bench.case_bytes import case_bytes
from offline_graph.bench.case_data_path import (
    case_collate,
    case_convert,
    case_pipeline,
    case_prelearner,
    case_stream,
)
from offline_graph.bench.case_league import case_league
from offline_graph.bench.case_learner import case_gpu, case_learner
from offline_graph.bench.case_memory import case_memory
from offline_graph.bench.case_ope import case_ope
from offline_graph.bench.case_sampling import case_inference, case_sampling
from offline_graph.bench.case_value import case_value
from offline_graph.bench.harness import BenchContext, Row

CaseFunction = Callable[[BenchContext], list[Row]]

CASE_FUNCTIONS: dict[str, CaseFunction] = {
    "convert": case_convert,
    "bytes": case_bytes,
    "prelearner": case_prelearner,
    "pipeline": case_pipeline,
    "stream": case_stream,
    "collate": case_collate,
    "memory": case_memory,
    "league": case_league,
    "gpu": case_gpu,
    "sampling": case_sampling,
    "value": case_value,
    "ope": case_ope,
    "learner": case_learner,
    "inference": case_inference,
}
"""Case name -> case function, in the order ``offline-graph bench`` runs them."""

CASES: tuple[str, ...] = tuple(CASE_FUNCTIONS)
"""The case names in run order."""
