"""Learner-side collate: Arrow transition rows -> a PyG-batched dict of torch tensors.

Passed by ``offline_graph.configure`` as ``offline_data(iter_batches_kwargs={"collate_fn":
GraphCollateFn()})``; RLlib hands it to ``iter_torch_batches`` on every learner and Ray moves
the resulting ``Dict[str, Tensor]`` to the learner's device (GPU learners included).

Output keys are flat, ``"<module_id>/<column>"``; RLlib's ``unflatten_dict`` nests them into
``{module_id: {"actions": [B], "obs": {"x", "edge_index", "edge_attr", "batch", "ptr"}, ...}}``.
``actions`` comes first because RLlib counts env steps from the first column of a batch.
Multi-agent joint rows (columns ``<module_id>/<column>``) give one PyG batch per module.
"""

from __future__ import annotations

from typing import Dict

import numpy as np
import pyarrow as pa
import torch
from ray.data.collate_fn import ArrowBatchCollateFn
from ray.rllib.core import DEFAULT_MODULE_ID

from offline_graph.data.learning.sequences import collate_runs, is_run_table
from offline_graph.data.learning.transitions import table_to_batch
from offline_graph.data.learning.value_runs import collate_value_runs, is_value_table
from offline_graph.rllib.offline.multi_agent import split_module_columns


def _tensor(arr: np.ndarray) -> torch.Tensor:
    arr = np.asarray(arr)
    if not arr.flags.writeable or not arr.flags.c_contiguous:
        arr = np.array(arr, copy=True, order="C")
    return torch.from_numpy(arr)


class GraphCollateFn(ArrowBatchCollateFn):
    """Collate transition rows into ``{"<mid>/actions", "<mid>/obs/x", ...}`` tensors."""

    def __init__(self, module_id: str = DEFAULT_MODULE_ID) -> None:
        super().__init__()
        self.module_id = module_id

    def __repr__(self) -> str:
        return f"GraphCollateFn(module_id={self.module_id!r})"

    # Ray types the return as an unbound TypeVar ``CollatedData``: any collated batch.
    def __call__(self, batch: pa.Table) -> Dict[str, torch.Tensor]:  # type: ignore[override]
        per_module = split_module_columns(batch.column_names)
        if not per_module:
            if is_run_table(batch.column_names):  # memory modules: runs of steps
                return _flat(self.module_id, collate_runs(batch))
            if is_value_table(batch.column_names):  # IQL / CQL: steps + next graphs
                return _flat(self.module_id, collate_value_runs(batch))
            return _flat(self.module_id, table_to_batch(batch))
        # Multi-agent joint rows (offline_graph.rllib.offline.multi_agent): one PyG batch per module.
        out: Dict[str, torch.Tensor] = {}
        for mid, names in per_module.items():
            table = pa.table({col: batch.column(full) for col, full in names.items()})
            out.update(_flat(mid, table_to_batch(table)))
        return out


def _flat(module_id: str, cols: dict) -> Dict[str, torch.Tensor]:
    out: Dict[str, torch.Tensor] = {}
    for name, value in cols.items():
        if isinstance(value, dict):
            for key, arr in value.items():
                out[f"{module_id}/{name}/{key}"] = _tensor(arr)
        else:
            out[f"{module_id}/{name}"] = _tensor(value)
    return out
