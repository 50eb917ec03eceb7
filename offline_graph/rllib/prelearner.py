"""``GraphOfflinePreLearner``: RLlib's OfflinePreLearner for ragged graph episodes.

Runs inside Ray Data's ``map_batches`` (one actor per CPU share). Per call it

1. decodes and validates the batch's episode rows (``offline_graph.data.reader``; columnar),
2. adds their transitions to a columnar FIFO buffer (``offline_graph.data.buffer``),
3. samples ``k * train_batch_size_per_learner`` transitions, ``k = max(1, round(new/B))``, so
   an epoch is about one pass over the data and each learner batch holds exactly B rows,
4. runs the learner connector pipeline's *user* pieces (RLlib's default pieces are replaced by
   :class:`~offline_graph.rllib.connectors.AddGraphTransitionsToBatch`),
5. returns one Arrow row per transition (``offline_graph.data.transitions``): ragged list columns,
   no padding, no pickled objects. The learner's collate function builds the PyG batch.

With ``input_read_episodes=False`` the input is already converted transition rows and is
passed through (columns selected, zero-copy) unless user connector pieces must run.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, cast

import gymnasium as gym
import numpy as np
import pyarrow as pa
import ray
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.offline.offline_prelearner import OfflinePreLearner

from offline_graph.data.errors import ConfigError
from offline_graph.rllib import accounting
from offline_graph.data.buffer import TransitionBuffer
from offline_graph.data.sequences import runs_to_arrow, sample_runs
from offline_graph.data.holdout import drop_held_out, split_rows
from offline_graph.data.storage import uri_names
from offline_graph.data.reader import (
    ReadStats,
    batch_columns,
    log_rejections,
    read_transitions,
    spec_from_spaces,
)
from offline_graph.rllib.connectors import (
    AddGraphTransitionsToBatch,
    batch_to_table,
    user_pieces_only,
)
from offline_graph.rllib.checks import check_graph_config
from offline_graph.rllib.multi_agent import ModuleRouter
from offline_graph.rllib.offline_data import NO_MODULE_STATE
from offline_graph.rllib.env_setup import single_env_spaces
from offline_graph.rllib.settings import SETTINGS_KEY, GraphSettings, read_settings
from offline_graph.data.transitions import BOOKKEEPING_COLUMNS, Transitions, transition_schema
from offline_graph.data.validation import EpisodeSpec

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

logger = logging.getLogger(__name__)


class GraphOfflinePreLearner(OfflinePreLearner):
    """Decodes recorded graph episodes and emits unpadded transition rows (see module doc)."""

    def __init__(
        self,
        *,
        config: "AlgorithmConfig",
        spaces: Optional[Tuple[gym.Space, gym.Space]] = None,
        module_state: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> None:
        if SETTINGS_KEY not in (config.learner_config_dict or {}):
            # offline_graph.configure was skipped (so the algorithm is a stock BC / MARWIL,
            # which does not run the check at build time): name every missing setting.
            check_graph_config(config)
        self.settings: GraphSettings = read_settings(config, where="GraphOfflinePreLearner")
        self.router: ModuleRouter | None = None
        if config.is_multi_agent:
            self._init_multi_agent(config, kwargs.get("module_spec"))
            return
        # With EnvRunners RLlib passes their vectorized spaces: use the single env's.
        spaces = single_env_spaces(spaces, config)
        obs_space, act_space = spaces or (config.observation_space, config.action_space)
        if obs_space is None or act_space is None:
            raise ConfigError(
                "GraphOfflinePreLearner: config.environment(observation_space=..., "
                f"action_space=...) must be set (found observation_space={obs_space!r}, "
                f"action_space={act_space!r}). Pass a gymnasium.spaces.Graph and a Discrete(k), "
                "NodeAction(max_nodes) or EdgeAction(max_edges)."
            )
        spaces = (obs_space, act_space)
        # The parent builds the RLModule (user connector pieces may use it) and the learner
        # connector pipeline. It also builds RLlib's episode buffer, which we replace.
        # Keep RLlib's ``module_spec`` kwarg (it logs a deprecation warning): it is the only
        # spec with the spaces filled in; ``config.rl_module_spec`` has none. In-process use
        # (tests, benchmarks) gets one built from the spaces.
        if kwargs.get("module_spec") is None:
            kwargs["module_spec"] = config.get_multi_rl_module_spec(spaces={DEFAULT_MODULE_ID: spaces})
        if module_state is NO_MODULE_STATE or module_state == NO_MODULE_STATE:
            module_state = None  # GraphOfflineData shipped no weights (none are used here)
        super().__init__(config=config, spaces=spaces, module_state=module_state, **kwargs)
        self.episode_buffer = None  # type: ignore[assignment]  # self.buffer replaces it
        # config.build_learner_connector always returns a pipeline (typed as a ConnectorV2).
        pipeline = cast(ConnectorPipelineV2, self._learner_connector)
        user_pieces_only(pipeline)
        self._has_user_pieces = len(pipeline) > 1
        self.spec = spec_from_spaces(*spaces)
        self.module_id = DEFAULT_MODULE_ID
        self.buffer = TransitionBuffer(self._init_reading(config), seed=self.settings.seed)

    def _init_reading(self, config: "AlgorithmConfig") -> int:
        """What every reading path keeps (batch size, gamma, counts, seen ids, the input's
        URIs); returns the buffer capacity in transitions."""
        self._uris = uri_names(config.input_)  # bucket/key (Ray Data's path) -> s3://bucket/key
        self.batch_size = int(config.train_batch_size_per_learner)
        self.gamma = float(getattr(config, "gamma", 0.99))
        self.stats = ReadStats()
        self._seen_ids: dict[str, bytes] = {}
        self._collector: Any = None
        return int(config.prelearner_buffer_kwargs.get("capacity", 10 * self.batch_size))

    def _init_multi_agent(self, config: "AlgorithmConfig", module_spec: Any) -> None:
        """Multi-agent set-up (:mod:`offline_graph.rllib.multi_agent`). RLlib's parent
        constructor is not run: it would build every module of the MultiRLModule (K league
        policies = K copies per actor) and RLlib's episode buffer, and our value targets come
        from the data, not from a value net."""
        if config._learner_connector is not None:
            raise ConfigError(
                "GraphOfflinePreLearner (multi-agent): config.training(learner_connector=...) "
                "must be None with multi-agent data (found a user connector). User learner "
                "connector pieces run on single-agent graph batches only."
            )
        if self.settings.holdout > 0.0:
            raise ConfigError(
                "GraphOfflinePreLearner (multi-agent): holdout must be 0 with multi-agent data "
                f"(found {self.settings.holdout}). Offline metrics on held-out episodes are "
                "single-agent only."
            )
        self.config = config
        self._module = None  # type: ignore[assignment]  # no RLModule in this actor
        spec = module_spec if module_spec is not None else config.get_multi_rl_module_spec()
        self.router = ModuleRouter(config, spec, self._init_reading(config), self.settings.seed)

    def __call__(self, batch: Dict[str, np.ndarray]) -> pa.Table:  # type: ignore[override]
        """Episode rows (``item``) or transition rows -> transition rows for the learner."""
        if self.router is not None:
            return self._call_multi_agent(batch)
        if not self.config.input_read_episodes:
            table = batch if isinstance(batch, pa.Table) else pa.table(batch)
            if self.settings.holdout > 0.0:
                table = self._drop_held_out_rows(table)
            if self.settings.seq_length:  # memory modules: runs need the episodes' steps
                part = Transitions.from_table(table)
                self.buffer.add(part)
                return self._sample_runs(len(part))
            table = table.select([c for c in table.column_names if c not in BOOKKEEPING_COLUMNS])
            if self._has_user_pieces:
                return self._run_pipeline(table_transitions=table)
            return table
        items, paths = self._items(batch)
        call_stats = ReadStats()
        parts = read_transitions(
            items,
            paths,
            self.spec,
            self.gamma,
            on_error=self.settings.on_error,
            seen_ids=self._seen_ids,
            stats=call_stats,
        )
        if self.settings.holdout > 0.0:
            parts = drop_held_out(parts, self.settings.holdout, self.settings.holdout_seed, call_stats)
        self._account(call_stats, items, paths)
        for part in parts:
            self.buffer.add(part)
        if len(self.buffer) == 0:
            # Every row of this batch was rejected (skip mode) and nothing is buffered yet.
            return _empty_table(self.spec, runs=bool(self.settings.seq_length))
        new = sum(len(p) for p in parts)
        if self.settings.seq_length:
            return self._sample_runs(new)
        num_batches = max(1, int(round(new / self.batch_size)))
        sample = self.buffer.sample(num_batches * self.batch_size)
        if self._has_user_pieces:
            return self._run_pipeline(transitions=sample)
        return sample.to_arrow(columns=_keep_columns(sample))

    def _items(self, batch: Any) -> tuple[list[Any], list[str | None]]:
        """(items, paths) of episode rows; paths named as the input gave them (s3://...)."""
        items, paths = batch_columns(batch)
        if self._uris:
            paths = [self._uris.get(p, p) if p is not None else None for p in paths]
        return items, paths

    def _account(self, call_stats: ReadStats, items: Any, paths: Any) -> None:
        """Log this call's rejections, add its counts, and report them to the run's collector."""
        log_rejections(call_stats, "GraphOfflinePreLearner")
        self.stats.merge(call_stats)
        if self.settings.stats_name and ray.is_initialized():
            if self._collector is None:
                self._collector = accounting.get_collector()
            accounting.report(self._collector, self.settings.stats_name, items, paths, call_stats)

    def _call_multi_agent(self, batch: Any) -> pa.Table:
        """Episode rows (or converted multi-agent rows) -> joint per-module rows
        (``<module_id>/<column>``)."""
        assert self.router is not None  # noqa: S101 (set in __init__)
        if not self.config.input_read_episodes:
            table = batch if isinstance(batch, pa.Table) else pa.table(batch)
            grouped = self.router.read_rows(table, "GraphOfflinePreLearner")
            for mid, part in grouped.items():
                self.stats.transitions_used += len(part)
                self.stats.transitions_by_module[mid] += len(part)
            self.router.add(grouped)
            return self.router.sample_table(sum(len(t) for t in grouped.values()), self.batch_size)
        items, paths = self._items(batch)
        call_stats = ReadStats()
        grouped = self.router.read(
            items,
            paths,
            self.gamma,
            on_error=self.settings.on_error,
            seen_ids=self._seen_ids,
            stats=call_stats,
        )
        self._account(call_stats, items, paths)
        self.router.add(grouped)
        return self.router.sample_table(sum(len(t) for t in grouped.values()), self.batch_size)

    def _sample_runs(self, new: int) -> pa.Table:
        """Memory modules: ``k * B`` run rows (one run of up to ``seq_length`` trained steps
        plus its context per row, :mod:`offline_graph.data.sequences`), ``k`` so that an epoch
        is about one pass over the data."""
        length, context = self.settings.seq_length, self.settings.seq_context
        data = self.buffer.all()
        per_run = min(length, max(1.0, len(data) / max(1, np.unique(data.episode_index).size)))
        num = max(1, int(round(new / (self.batch_size * per_run)))) * self.batch_size
        ctx0, start, stop = sample_runs(data, self.buffer.rng, num, length, context)
        return runs_to_arrow(data, ctx0, start, stop)

    def _drop_held_out_rows(self, table: pa.Table) -> pa.Table:
        """Converted rows without the held-out episodes' rows, accounted like episode input."""
        kept, call_stats, _ = split_rows(table, self.settings.holdout, self.settings.holdout_seed)
        self.stats.merge(call_stats)
        if self.settings.stats_name and ray.is_initialized():
            if self._collector is None:
                self._collector = accounting.get_collector()
            ids = table.column("eps_id").cast(pa.string()).to_pylist()
            steps = table.column("t").to_pylist() if "t" in table.column_names else range(len(ids))
            keys = [f"{e}:{t}".encode() for e, t in zip(ids, steps)]
            accounting.report(self._collector, self.settings.stats_name, keys, [None], call_stats)
        return kept

    def _run_pipeline(
        self, transitions: Transitions | None = None, table_transitions: pa.Table | None = None
    ) -> pa.Table:
        shared: dict[str, Any] = {}
        if transitions is not None:
            shared[AddGraphTransitionsToBatch.SHARED_KEY] = transitions
        else:
            shared[AddGraphTransitionsToBatch.SHARED_TABLE_KEY] = table_transitions
        batch = self._learner_connector(
            rl_module=self._module, batch={}, episodes=[], shared_data=shared, metrics=None
        )
        return batch_to_table(
            batch[self.module_id], where="GraphOfflinePreLearner", mask_level=self.spec.action_level
        )


def _keep_columns(sample: Transitions) -> list[str]:
    cols = ["actions", "x", "edge_index", "value_targets"]
    if sample.obs.edge_attr is not None:
        cols.append("edge_attr")
    cols += [m for m in ("node_mask", "edge_mask") if getattr(sample.obs, m) is not None]
    return cols


def _empty_table(spec: EpisodeSpec, runs: bool = False) -> pa.Table:
    """Zero transition (or run) rows with the columns a non-empty call emits."""
    schema = transition_schema(spec)
    keep = {"actions", "x", "edge_index", "edge_attr", "node_mask", "edge_mask", "value_targets"}
    fields = [f for f in schema if f.name in keep]
    if runs:  # offline_graph.data.sequences' run rows: every column one level deeper
        fields = [pa.field(f.name, pa.list_(f.type)) for f in fields] + [pa.field("context", pa.int32())]
    return pa.schema(fields).empty_table()
