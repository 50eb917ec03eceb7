"""Reading strategy ``multi_agent``: multi-agent episode rows (or converted multi-agent rows)
-> joint per-module rows (``<module_id>/<column>``).

The policy mapping is applied at read time (:class:`~offline_graph.rllib.offline.multi_agent.ModuleRouter`),
one buffer per trained module; each call samples ``k * B`` transitions of every trained
module, so a learner batch of B rows holds B transitions of each (see
:mod:`offline_graph.rllib.offline.multi_agent`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from offline_graph.data.episodes.reader import ReadStats
from offline_graph.rllib.offline.multi_agent import ModuleRouter
from offline_graph.rllib.offline.reading.base import WHERE, Reading
from offline_graph.rllib.core.settings import GraphSettings

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig


class MultiAgentJointRows(Reading):
    """Agents' steps routed to their modules' buffers -> joint rows of every trained module."""

    kind = "multi_agent"

    def __init__(
        self, config: "AlgorithmConfig", settings: GraphSettings, module_spec: Any, episodes: bool
    ) -> None:
        super().__init__(config, settings, None)
        self.episodes = episodes
        self.router = ModuleRouter(config, module_spec, self.capacity, settings.seed)

    def read(self, batch: Any) -> int:
        if not self.episodes:
            table = batch if isinstance(batch, pa.Table) else pa.table(batch)
            grouped = self.router.read_rows(table, WHERE)
            for mid, part in grouped.items():
                self.stats.transitions_used += len(part)
                self.stats.transitions_by_module[mid] += len(part)
        else:
            items, paths = self.items(batch)
            call_stats = ReadStats()
            grouped = self.router.read(
                items,
                paths,
                self.gamma,
                on_error=self.settings.on_error,
                seen_ids=self.seen_ids,
                stats=call_stats,
            )
            self.account(call_stats, items, paths)
        self.router.add(grouped)
        return sum(len(t) for t in grouped.values())

    def ready(self) -> bool:
        return True  # the router emits zero rows (and says why) until every module has data

    def sample(self, new: int) -> pa.Table:
        return self.router.sample_table(new, self.batch_size)

    def rows(self, sample: pa.Table) -> pa.Table:
        return sample

    def empty_table(self) -> pa.Table:
        return self.router.empty_table()
