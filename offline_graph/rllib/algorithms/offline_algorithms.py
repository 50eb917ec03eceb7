"""``GraphBC`` / ``GraphMARWIL``: RLlib's BC and MARWIL for graph episodes, without EnvRunners.

:func:`offline_graph.configure` sets ``config.algo_class`` to one of these (stock ``BC`` ->
``GraphBC``, ``MARWIL`` -> ``GraphMARWIL``), so ``config.build_algo()`` builds them. They train
exactly like their parents; their overrides (in :class:`GraphOfflineAlgorithm`) only change
what RLlib 2.60 gets wrong for offline algorithms that have no EnvRunner group, and nothing of
RLlib itself is modified:

==========================  ==================================================================
override                    why
==========================  ==================================================================
``__init__``                maps an ``evaluation(offline_evaluation_type="fqe" | ...)`` set
                            after ``configure`` as configure does, before RLlib's validate()
                            refuses a type it does not know
``setup``                   runs :func:`~offline_graph.rllib.offline.checks.check_graph_config` first:
                            one ConfigError naming every missing / conflicting setting, before
                            RLlib builds the Ray Data pipeline and the learners (where a bad
                            config fails deep inside RLlib or stalls Ray Data)
``get_module``              RLlib reads the local / first remote EnvRunner's module
                            (``AttributeError: 'NoneType' object has no attribute
                            'foreach_env_runner'`` without EnvRunners): returns a CPU copy of
                            the trained module from the (first) Learner instead
``restore_from_path``       RLlib's override syncs the restored weights to
                            ``self.env_runner_group`` (``'NoneType' object has no attribute
                            'sync_weights'``): without EnvRunners only the generic
                            ``Checkpointable.restore_from_path`` runs
``set_state``               same sync after setting the LearnerGroup state: without
                            EnvRunners the LearnerGroup state is set here, the rest by RLlib
``cleanup``                 (run by ``algo.stop()``) closes the local Learner's Ray Data
                            batch iterator (else its finalizer prints a traceback after
                            ``ray.shutdown()``) and the run's accounting: the totals stay
                            readable with ``data_report``, the cluster's stats actor
                            forgets them. A script that never calls ``algo.stop()`` gets the
                            iterator closed at interpreter exit, before Ray's own exit
                            handler shuts Ray down (``setup`` registers it)
==========================  ==================================================================

With an EnvRunner group (e.g. an env configured for evaluation) each override defers to RLlib.
``Algorithm.from_checkpoint(path)`` rebuilds the class pickled in the checkpoint
(``class_and_ctor_args.pkl``), i.e. ``GraphBC`` / ``GraphMARWIL``, then calls these overrides.

To customise further, subclass ``GraphBC`` / ``GraphMARWIL`` (``configure`` keeps any
``GraphOfflineAlgorithm`` subclass set as ``algo_class``).
"""

from __future__ import annotations

import atexit
import logging
import weakref
from typing import Any, Optional

import ray
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.bc import BC
from ray.rllib.algorithms.marwil import MARWIL
from ray.rllib.core import COMPONENT_LEARNER_GROUP, DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.utils.annotations import override
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.typing import ModuleID, StateDict

from offline_graph.data.errors import ConfigError
from offline_graph.rllib.offline import accounting
from offline_graph.rllib.offline.checks import check_graph_config
from offline_graph.rllib.ope.ope_runner import late_offline_evaluation
from offline_graph.rllib.core.settings import read_settings

logger = logging.getLogger(__name__)


class GraphOfflineAlgorithm(Algorithm):
    """The overrides of :class:`GraphBC` / :class:`GraphMARWIL` (see the module docstring).

    Not an algorithm of its own: combine it with an RLlib offline algorithm as the first base.
    """

    def __init__(self, config: Any = None, *args: Any, **kwargs: Any) -> None:
        # Before RLlib's validate(), which refuses our offline_evaluation_type set after configure
        late_offline_evaluation(config)
        super().__init__(config, *args, **kwargs)

    # (Algorithm.setup narrows Trainable.setup's dict argument to an AlgorithmConfig too.)
    @override(Algorithm)
    def setup(self, config: AlgorithmConfig) -> None:  # type: ignore[override]
        # Algorithm.__init__ has already turned the given config (object, dict or checkpoint
        # state) into ``self.config`` and run RLlib's validate(); nothing is set up yet.
        cfg: Any = self.config
        check_graph_config(cfg)
        # RLlib's AlgorithmConfig.get_state() drops algo_class and Algorithm.__init__ rebuilds
        # the config from that state, which resets it to the config class's default (stock
        # BC / MARWIL): put our class back so `algo.config.copy().build_algo()` rebuilds it.
        if cfg.algo_class is not type(self):
            cfg._is_frozen = False
            cfg.algo_class = type(self)
            cfg.freeze()
        super().setup(config)
        # After Ray's own exit handler (registered by ray.init, which ran before this):
        # atexit runs the later registration first, so the iterator closes while Ray runs.
        atexit.register(_close_at_exit, weakref.ref(self))

    @override(Algorithm)
    def get_module(self, module_id: ModuleID = DEFAULT_MODULE_ID) -> Optional[RLModule]:
        """The trained RLModule ``module_id`` (None if there is none), a copy on CPU.

        Without EnvRunners it is built from the (first) Learner's module: its constructor
        arguments and state (weights). The Learner's module is not changed, and later
        training does not change the copy. With an EnvRunner group, RLlib's own
        ``get_module`` (the EnvRunner's module) runs.
        """
        if self.env_runner_group is not None:
            return super().get_module(module_id)
        return learner_module_copy(self, module_id)

    @override(Algorithm)
    def restore_from_path(self, path: Any, *args: Any, **kwargs: Any) -> None:
        if self.env_runner_group is not None:
            super().restore_from_path(path, *args, **kwargs)
            return
        # Everything Algorithm.restore_from_path adds to the generic restore is syncing the
        # EnvRunners (weights, connector states): nothing to sync without them.
        Checkpointable.restore_from_path(self, path, *args, **kwargs)

    @override(Algorithm)
    def set_state(self, state: StateDict) -> None:
        if self.env_runner_group is not None or COMPONENT_LEARNER_GROUP not in state:
            super().set_state(state)
            return
        # Algorithm.set_state sets the LearnerGroup state, then syncs its weights to
        # self.env_runner_group (None here) and to the eval EnvRunners.
        group: Any = self.learner_group
        group.set_state(state[COMPONENT_LEARNER_GROUP])
        if self.eval_env_runner_group is not None:
            self.eval_env_runner_group.sync_weights(
                from_worker_or_learner_group=self.learner_group, inference_only=True
            )
        super().set_state({k: v for k, v in state.items() if k != COMPONENT_LEARNER_GROUP})

    @override(Algorithm)
    def cleanup(self) -> None:
        # Each Learner keeps its Ray Data batch iterator (a generator) for the next update.
        # Left open, a local Learner's finalizer runs at interpreter exit, after
        # ray.shutdown() ("Exception ignored in ... DataIterator._iter_batches": a traceback),
        # and a remote Learner's runs as its process exits, after its Ray connection is gone:
        # Ray Data's stats call there started a whole new local Ray instance in that process
        # (GCS, raylet, agents: seconds of CPU per Learner, its agent processes left running).
        _close_iterators(self)
        super().cleanup()
        settings = read_settings(self.config, where=type(self).__name__)
        if settings.stats_name and ray.is_initialized():
            accounting.close(settings.stats_name)


def _close_iterators(algo: Any, remote: bool = True) -> None:
    """Close the Learners' batch iterators: the local Learner's, and with ``remote`` the remote
    Learners' (a Learner that does not answer within 10 s is left to its process's exit)."""
    group: Any = getattr(algo, "learner_group", None)
    if group is None:
        return
    if group.is_local:
        group.foreach_learner(close_data_iterator)
    elif remote and ray.is_initialized():
        try:
            group.foreach_learner(close_data_iterator, timeout_seconds=10)
        except Exception:  # noqa: BLE001 (a dead Learner: stop() goes on, as RLlib's does)
            logger.debug("closing the remote Learners' batch iterators failed", exc_info=True)


def _close_at_exit(ref: "weakref.ReferenceType[Any]") -> None:
    """At interpreter exit: close a still-living algorithm's local batch iterator (its
    generator's finalizer would otherwise log after the interpreter's shutdown began, which
    prints "Exception ignored in ... DataIterator._iter_batches" with a traceback)."""
    algo = ref()
    if algo is not None:
        try:
            _close_iterators(algo, remote=False)
        except Exception:  # noqa: BLE001, S110 (exit: nothing left to report to)
            pass


def close_data_iterator(learner: Any) -> None:
    """Close and drop ``learner.iterator`` (RLlib's ``MiniBatchRayDataIterator``): its open
    batch generator finishes now, while Ray still runs."""
    iterator, learner.iterator = getattr(learner, "iterator", None), None
    generator = getattr(iterator, "_epoch_iterator", None)
    if generator is not None and hasattr(generator, "close"):
        generator.close()


class GraphMARWIL(GraphOfflineAlgorithm, MARWIL):
    """RLlib's MARWIL for graph episodes (set by :func:`offline_graph.configure`)."""


class GraphBC(GraphOfflineAlgorithm, BC):
    """RLlib's BC for graph episodes (set by :func:`offline_graph.configure`)."""


def learner_module_copy(algo: Algorithm, module_id: ModuleID = DEFAULT_MODULE_ID) -> Optional[RLModule]:
    """A CPU copy of the (first) Learner's RLModule ``module_id`` (None if it has none).

    Built from the module's constructor arguments and its state, so the Learner's module is
    left as it is; works for a local Learner (``num_learners=0``) and for remote / DDP ones.
    """

    def grab(learner: Any) -> tuple[type, tuple, dict, dict] | None:
        if module_id not in learner.module.keys():
            return None
        m = learner.module[module_id].unwrapped()
        args, kwargs = m.get_ctor_args_and_kwargs()
        return type(m), tuple(args), dict(kwargs), m.get_state()  # numpy state

    group: Any = algo.learner_group
    if group is None:
        raise ConfigError(
            "get_module: algo.learner_group must exist (found None). Build the algorithm "
            "with config.build_algo() on the new API stack."
        )
    results = list(group.foreach_learner(grab))
    if not results:
        raise RuntimeError("get_module: no healthy Learner answered.")
    grabbed = results[0].get()
    if grabbed is None:
        return None
    cls, args, kwargs, state = grabbed
    module: RLModule = cls(*args, **kwargs)
    module.set_state(state)
    module.eval()  # type: ignore[attr-defined]
    return module
