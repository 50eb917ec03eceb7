"""The prelearner's reading strategies: one per input kind, chosen once at set-up.

=================  ==========================================  ================================
strategy           input                                       emits per call
=================  ==========================================  ================================
``episodes``       episode rows                                ``k * B`` sampled transitions
``rows``           converted transition rows                   the rows (held-out ones dropped)
``runs``           episode or converted rows, memory modules   ``k * B`` runs of steps
``multi_agent``    multi-agent episode or converted rows       ``k * B`` joint per-module rows
``value``          episode or converted rows, IQL / CQL        ``k * B`` value runs (+ next graph)
=================  ==========================================  ================================

:func:`choose_reading` picks one from the config; each lives in its own module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from offline_graph.data.episodes.validation import EpisodeSpec
from offline_graph.rllib.offline.reading.base import Reading
from offline_graph.rllib.offline.reading.episodes import EpisodeTransitions, keep_columns
from offline_graph.rllib.offline.reading.multi_agent import MultiAgentJointRows
from offline_graph.rllib.offline.reading.rows import RowTransitions
from offline_graph.rllib.offline.reading.runs import MemoryRuns
from offline_graph.rllib.offline.reading.value import ValueRuns
from offline_graph.rllib.core.settings import GraphSettings

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

__all__ = [
    "EpisodeTransitions",
    "MemoryRuns",
    "MultiAgentJointRows",
    "Reading",
    "RowTransitions",
    "ValueRuns",
    "choose_reading",
    "keep_columns",
]


def choose_reading(
    config: "AlgorithmConfig",
    settings: GraphSettings,
    spec: EpisodeSpec | None = None,
    module_spec: Any = None,
) -> Reading:
    """The reading strategy of ``config``: multi-agent configs -> ``multi_agent`` (with the
    ``MultiRLModuleSpec``), value-based training (``settings.value_runs``) -> ``value``, memory
    modules (``settings.seq_length``) -> ``runs``, else ``episodes`` or ``rows`` by
    ``config.input_read_episodes``."""
    episodes = bool(config.input_read_episodes)
    if config.is_multi_agent:
        return MultiAgentJointRows(config, settings, module_spec, episodes)
    if settings.value_runs:
        return ValueRuns(config, settings, spec, episodes=episodes)
    if settings.seq_length:
        return MemoryRuns(config, settings, spec, episodes=episodes)
    return (EpisodeTransitions if episodes else RowTransitions)(config, settings, spec)
