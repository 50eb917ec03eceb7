"""``GraphOfflinePreLearner``: RLlib's OfflinePreLearner for ragged graph episodes.

Runs inside Ray Data's ``map_batches`` (one actor per CPU share). At set-up it picks one
reading strategy for the config's input (:mod:`offline_graph.rllib.offline.reading`: ``episodes``,
``rows``, ``runs``, ``multi_agent``). Per call it

1. reads the batch: episode rows are decoded and validated column-wise
   (:mod:`offline_graph.data.episodes.reader`), converted rows have their held-out episodes dropped;
   rejections are raised or counted and reported to the run's accounting;
2. buffers what it read (a columnar FIFO buffer, :mod:`offline_graph.data.learning.buffer`; converted
   rows of memoryless modules pass straight through);
3. samples what one call emits: ``k * train_batch_size_per_learner`` transitions (or runs, or
   joint per-module rows), ``k = max(1, round(new / B))``, so an epoch is about one pass over
   the data and each learner batch holds exactly B rows;
4. runs the learner connector pipeline's *user* pieces, if any (RLlib's default pieces are
   replaced by :class:`~offline_graph.rllib.offline.connectors.AddGraphTransitionsToBatch`);
5. returns Arrow rows (``offline_graph.data.learning.transitions``): ragged list columns, no padding, no
   pickled objects. The learner's collate function builds the PyG batch.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, cast

import gymnasium as gym
import numpy as np
import pyarrow as pa
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.offline.offline_prelearner import OfflinePreLearner

from offline_graph.data.errors import ConfigError
from offline_graph.data.episodes.reader import ReadStats, spec_from_spaces
from offline_graph.data.learning.transitions import Transitions
from offline_graph.rllib.offline.checks import check_graph_config
from offline_graph.rllib.offline.connectors import (
    AddGraphTransitionsToBatch,
    batch_to_table,
    user_pieces_only,
)
from offline_graph.rllib.env.env_setup import single_env_spaces
from offline_graph.rllib.offline.offline_data import NO_MODULE_STATE
from offline_graph.rllib.offline.reading import Reading, choose_reading
from offline_graph.rllib.core.settings import SETTINGS_KEY, GraphSettings, read_settings

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
        self._has_user_pieces = False
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
        # RLlib's constructor is not run: it reads the module spec from a ``module_spec``
        # kwarg (deprecated in Ray 2.60: a warning per actor) or from ``config.rl_module_spec``
        # (no spaces filled in), builds an RLModule every actor holds, and an episode buffer
        # that self.buffer replaces. What it sets that we use is set here; the RLModule only
        # when user connector pieces run here (they may read it).
        self.config = config
        self.observation_space, self.action_space = spaces
        self._learner_connector = config.build_learner_connector(
            input_observation_space=obs_space, input_action_space=act_space
        )
        # config.build_learner_connector always returns a pipeline (typed as a ConnectorV2).
        pipeline = cast(ConnectorPipelineV2, self._learner_connector)
        user_pieces_only(pipeline)
        self._has_user_pieces = len(pipeline) > 1
        self._module = None  # type: ignore[assignment]
        self.episode_buffer = None  # type: ignore[assignment]  # self.buffer replaces it
        if self._has_user_pieces:
            spec = kwargs.get("module_spec") or config.get_multi_rl_module_spec(
                spaces={DEFAULT_MODULE_ID: spaces}
            )
            module: Any = spec.build()  # a MultiRLModule
            if module_state and module_state != NO_MODULE_STATE:
                module.set_state(module_state)
            self._module = module
        self.spec = spec_from_spaces(*spaces)
        self.module_id = DEFAULT_MODULE_ID
        self.reading: Reading = choose_reading(config, self.settings, self.spec)

    def _init_multi_agent(self, config: "AlgorithmConfig", module_spec: Any) -> None:
        """Multi-agent set-up (:mod:`offline_graph.rllib.offline.multi_agent`). RLlib's parent
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
        self.reading = choose_reading(config, self.settings, module_spec=spec)

    def __call__(self, batch: Dict[str, np.ndarray]) -> pa.Table:  # type: ignore[override]
        """Episode rows (``item``) or converted rows -> rows for the learners (module doc)."""
        new = self.reading.read(batch)  # 1. read (decode, validate, account) and 2. buffer
        if not self.reading.ready():  # every row so far rejected (skip mode) or held out
            return self.reading.empty_table()
        sample = self.reading.sample(new)  # 3. sample
        if self._has_user_pieces and self.reading.takes_user_pieces:
            return self._run_pipeline(sample)  # 4. user connector pieces
        return self.reading.rows(sample)  # 5. Arrow rows

    @property
    def stats(self) -> ReadStats:
        """Episodes / transitions read, used and rejected by this actor so far."""
        return self.reading.stats

    @property
    def buffer(self) -> Any:
        """The reading strategy's transition buffer (what the next calls sample from)."""
        return self.reading.buffer

    def _run_pipeline(self, sample: Transitions | pa.Table) -> pa.Table:
        key = "SHARED_KEY" if isinstance(sample, Transitions) else "SHARED_TABLE_KEY"
        shared: dict[str, Any] = {getattr(AddGraphTransitionsToBatch, key): sample}
        batch = self._learner_connector(
            rl_module=self._module, batch={}, episodes=[], shared_data=shared, metrics=None
        )
        return batch_to_table(
            batch[self.module_id], where="GraphOfflinePreLearner", mask_level=self.spec.action_level
        )
