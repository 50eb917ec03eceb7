"""Multi-agent reading for the prelearner: agent -> module routing, one buffer per module,
and joint transition rows (every trained module's transitions side by side).

Rules (docs/guides/multi-agent.md):

* **Mapping at read time.** ``config.policy_mapping_fn(agent_id, episode)`` maps each agent
  of each episode to a module (``episode`` is a ``MultiAgentEpisode`` carrying the recorded
  episode's ``id_``; its steps are not filled in). Without a mapping function
  (RLlib's default), the module id recorded with the agent is used, else ``default_policy``.
  A module id that is not in the config's modules is a :class:`ConfigError`.
* **Trained modules only.** Agents mapped to modules outside ``policies_to_train`` (RLlib's
  rule: None = all, a collection, or ``fn(module_id, None)``) are not validated or buffered;
  their steps are counted (``agent_steps_unused``).
* **Equal B per module.** Each prelearner call samples ``n = k * B`` transitions from *every*
  trained module's buffer (uniformly, with replacement; ``B = train_batch_size_per_learner``,
  ``k = max(1, round(new transitions / (B * trained modules)))``) and returns ``n`` rows whose
  columns are ``<module_id>/<column>``: row ``i`` holds transition ``i`` of each module. A
  learner batch of B rows therefore holds exactly B transitions of every trained module, on
  every learner (DDP never finds a learner without a module's batch).
  Until every trained module has data the call returns zero rows.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Sequence

import gymnasium as gym
import numpy as np
import pyarrow as pa

from offline_graph.data.learning.buffer import TransitionBuffer
from offline_graph.data.errors import ConfigError, SchemaError
from offline_graph.data.episodes.multi_agent import read_agent_episodes, transitions_by_module
from offline_graph.data.episodes.reader import OnError, ReadStats, spec_from_spaces
from offline_graph.data.episodes.row_checks import check_rows
from offline_graph.data.learning.transitions import LEARNER_COLUMNS as KEEP
from offline_graph.data.learning.transitions import column_kind
from offline_graph.data.learning.transitions import Transitions, transition_schema
from offline_graph.data.episodes.validation import EpisodeSpec

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec

logger = logging.getLogger(__name__)


def trained_modules(config: "AlgorithmConfig", module_ids: Sequence[str]) -> list[str]:
    """The module ids RLlib's learners update (``Learner.should_module_be_updated``'s rule)."""
    rule = config.policies_to_train
    if rule is None:
        return list(module_ids)
    if not callable(rule):
        return [m for m in module_ids if m in set(rule)]
    return [m for m in module_ids if rule(m, None)]


def module_spaces(module_spec: "MultiRLModuleSpec", where: str) -> dict[str, tuple[gym.Space, gym.Space]]:
    """``{module_id: (observation_space, action_space)}``; every module must have both."""
    out = {}
    for mid, spec in (module_spec.rl_module_specs or {}).items():
        if spec.observation_space is None or spec.action_space is None:
            raise ConfigError(
                f"{where}: module {mid!r} must have observation_space and action_space in its "
                f"RLModuleSpec (found {spec.observation_space!r}, {spec.action_space!r}). "
                "Offline there is no env to take per-module spaces from: pass them in "
                "MultiRLModuleSpec(rl_module_specs={...: RLModuleSpec(observation_space=..., "
                "action_space=...)})."
            )
        out[mid] = (spec.observation_space, spec.action_space)
    return out


def user_mapping(config: "AlgorithmConfig") -> Any:
    """``config.policy_mapping_fn``, or None when it is RLlib's default (then the module id
    recorded with each agent is used: :func:`agent_module`)."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    mapping = config.policy_mapping_fn
    return None if mapping is AlgorithmConfig.DEFAULT_POLICY_MAPPING_FN else mapping


def agent_module(mapping: Any, agent_id: Any, recorded: str | None, episode_id: str) -> Any:
    """The module an agent of a recorded episode maps to (module doc: the mapping function,
    else the recorded module id, else ``default_policy``)."""
    if mapping is not None:
        from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

        return mapping(agent_id, MultiAgentEpisode(id_=episode_id))
    return recorded or "default_policy"


class ModuleRouter:
    """Routes agents to modules and keeps one :class:`TransitionBuffer` per trained module."""

    def __init__(
        self, config: "AlgorithmConfig", module_spec: "MultiRLModuleSpec", capacity: int, seed: int | None
    ) -> None:
        where = "GraphOfflinePreLearner (multi-agent)"
        spaces = module_spaces(module_spec, where)
        self.module_ids = list(spaces)
        self.trained = trained_modules(config, self.module_ids)
        if not self.trained:
            raise ConfigError(
                f"{where}: policies_to_train must name at least one module (found "
                f"{config.policies_to_train!r} for modules {sorted(self.module_ids)}). Offline training "
                "needs a module to train."
            )
        self.specs: dict[str, EpisodeSpec] = {m: spec_from_spaces(*spaces[m]) for m in self.trained}
        self._mapping = user_mapping(config)
        self.buffers = {
            m: TransitionBuffer(capacity, seed=None if seed is None else seed + i)
            for i, m in enumerate(self.trained)
        }
        self._cache: dict[tuple[str, Any], str] = {}

    def module_of(self, agent_id: Any, recorded: str | None, episode_id: str) -> str:
        key = (episode_id, agent_id)
        mid = self._cache.get(key)
        if mid is None:
            mid = agent_module(self._mapping, agent_id, recorded, episode_id)
            if mid not in self.module_ids:
                raise ConfigError(
                    f"GraphOfflinePreLearner: agent {agent_id!r} of episode {episode_id!r} must map "
                    f"to one of the modules {sorted(self.module_ids)} (found {mid!r}). Fix "
                    "config.multi_agent(policy_mapping_fn=...) or add the module to the "
                    "MultiRLModuleSpec."
                )
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[key] = mid
        return mid

    def route(self, agent_id: Any, recorded: str | None, episode_id: str) -> tuple[str, EpisodeSpec] | None:
        mid = self.module_of(agent_id, recorded, episode_id)
        return (mid, self.specs[mid]) if mid in self.specs else None

    def read(
        self,
        items: Sequence[Any],
        paths: Sequence[str | None],
        gamma: float,
        *,
        on_error: OnError,
        seen_ids: dict[str, bytes],
        stats: ReadStats,
    ) -> dict[str, Transitions]:
        """Decode, validate and group the rows' agent steps per trained module."""
        parts = read_agent_episodes(
            items, paths, self.route, on_error=on_error, seen_ids=seen_ids, stats=stats
        )
        return transitions_by_module(parts, gamma)

    def read_rows(self, table: pa.Table, where: str) -> dict[str, Transitions]:
        """Converted multi-agent rows (``offline_graph.jobs.ma_convert``'s layout) grouped per
        trained module with the mapping applied now (rows carry no module)."""
        missing = [c for c in ROW_COLUMNS if c not in table.column_names]
        if missing:
            raise SchemaError(
                f"{where}: converted multi-agent rows must have columns {list(ROW_COLUMNS)} "
                f"(found {table.column_names}, missing {missing}). Convert multi-agent episode "
                "files with offline-graph convert."
            )
        eids = table.column("eps_id").cast(pa.string()).to_pylist()
        flags = table.column("agent_id_int").to_pylist()
        aids = [
            int(a) if f else a for a, f in zip(table.column("agent_id").cast(pa.string()).to_pylist(), flags)
        ]
        mids = np.array([self.module_of(a, None, e) for a, e in zip(aids, eids)], dtype=object)
        out = {}
        for mid, spec in self.specs.items():
            idx = np.flatnonzero(mids == mid)
            if idx.size:
                out[mid] = rows_to_transitions(table.take(pa.array(idx)), spec, f"{where}, module {mid!r}")
        return out

    def add(self, grouped: dict[str, Transitions]) -> None:
        for mid, part in grouped.items():
            self.buffers[mid].add(part)

    def sample_table(self, num_new: int, batch_size: int) -> pa.Table:
        """Joint rows (see the module docstring); zero rows until every trained module has data."""
        missing = [m for m in self.trained if len(self.buffers[m]) == 0]
        if missing:
            logger.warning("GraphOfflinePreLearner: no transitions yet for module(s) %s; waiting.", missing)
            return self.empty_table()
        k = max(1, int(round(num_new / (batch_size * len(self.trained)))))
        columns: dict[str, Any] = {}
        for mid in self.trained:
            table = self.buffers[mid].sample(k * batch_size).to_arrow(columns=KEEP)
            for name, col in zip(table.column_names, table.columns):
                columns[f"{mid}/{name}"] = col
        return pa.table(columns)

    def empty_table(self) -> pa.Table:
        fields = []
        for mid in self.trained:
            schema = transition_schema(self.specs[mid])
            fields += [pa.field(f"{mid}/{f.name}", f.type) for f in schema if column_kind(f.name) in KEEP]
        return pa.schema(fields).empty_table()


ROW_COLUMNS = (
    "actions",
    "x",
    "edge_index",
    "value_targets",
    "eps_id",
    "t",
    "agent_id",
    "agent_id_int",
    "env_t",
)


WIDTH_NAMES = {"x": "F", "edge_attr": "D", "globals": "G"}


def rows_to_transitions(rows: pa.Table, spec: EpisodeSpec, where: str) -> Transitions:
    """Converted multi-agent rows of one module -> :class:`Transitions` (widths checked)."""
    cols: dict[str, Any] = {"x": (spec.num_features, rows.column("x"))}
    if spec.edge_dim is not None:
        cols["edge_attr"] = (spec.edge_dim, rows.column("edge_attr"))
    if spec.globals is not None:
        if "globals" not in rows.column_names:
            raise SchemaError(
                f"{where}: column 'globals' must be in the rows (found {sorted(rows.column_names)}). "
                "The module's observation space has graph-level parts: convert the episodes again."
            )
        cols["globals"] = (spec.globals.dim, rows.column("globals"))
    table = {"actions": rows.column("actions"), "edge_index": rows.column("edge_index")}
    for name, (width, column) in cols.items():
        try:
            table[name] = column.cast(pa.list_(pa.list_(pa.float32(), width)))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise SchemaError(
                f"{where}, column {name!r}: every row's inner lists must have width {width}, the "
                f"module's {WIDTH_NAMES[name]} (found another width or nulls: {err}). "
                "The policy mapping sends agents with other spaces to this module."
            ) from None
    if spec.action_level is not None:
        table[f"{spec.action_level}_mask"] = rows.column(f"{spec.action_level}_mask")
    for name in ("rewards", "terminateds", "truncateds", "value_targets", "eps_id", "t", "agent_id"):
        if name in rows.column_names:
            table[name] = rows.column(name)
    table["agent_id_int"] = rows.column("agent_id_int")
    table["env_t"] = rows.column("env_t")
    checked = pa.table(table)
    check_rows(checked, where)
    return Transitions.from_table(checked)


def split_module_columns(names: Sequence[str]) -> dict[str, dict[str, str]]:
    """``{module_id: {column: full_name}}`` of ``<module_id>/<column>`` names (others: ``{}``)."""
    out: dict[str, dict[str, str]] = {}
    for name in names:
        mid, sep, col = name.rpartition("/")
        if sep:
            out.setdefault(mid, {})[col] = name
    return out
