"""Keep the checkpoint whose policy has the best off-policy estimate: model selection without
a simulator (``offline-graph train --select-by``, or your own training loop).

:class:`CheckpointSelector` estimates the module of each algorithm offered to it with
:func:`offline_graph.estimate_value` on one fixed set of logged episodes (the held-out ones,
:func:`offline_graph.rllib.ope.ope_runner.evaluation_episodes`), keeps a full algorithm checkpoint
(``algo.save_to_path``: weights and optimizer states) of the best one so far under
``directory/iteration_<N>`` and, at the end, restores it into the algorithm
(:meth:`~CheckpointSelector.restore_best`), so that saving the algorithm then writes the
best-estimate module. Ties keep the earlier iteration; a NaN estimate never wins.

The estimator settings default to :data:`SELECT_DEFAULTS`, cheap enough to run at every
checkpoint: greedy target (``explore=False``), 100 bootstrap resamples, 10 FQE epochs
(FQE / DR), 5 epochs for the behaviour clone when the logs carry no ``action_logp``
(WIS / PDIS / DR), ``estimate_value``'s defaults otherwise (batch 256, lr 1e-3, its default Q
network). The same ``seed`` at every checkpoint: the estimates differ only by the module.

Usage::

    episodes, _ = evaluation_episodes(files, obs_space, act_space, holdout=0.1, holdout_seed=0)
    selector = CheckpointSelector(episodes, "fqe", gamma=0.99, directory="runs/x/selection")
    for it in range(1, n + 1):
        algo.train()
        if it % 5 == 0 or it == n:
            selector.offer(algo, it, keep=it < n)  # the last one stays in algo
    selector.restore_best(algo)
    algo.save_to_path("runs/x")
    selector.clear()
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from offline_graph.data.store import storage
from offline_graph.rllib.ope.estimate import estimate_value

SELECT_DEFAULTS: dict[str, Any] = {"explore": False, "n_boot": 100, "epochs": 10, "bc_epochs": 5}
"""``estimate_value`` keywords of a selection estimate (module doc); ``options`` override them."""
PREFIX = "iteration_"


def _key(value: float) -> float:
    """The value an estimate competes with: NaN loses to everything."""
    return value if math.isfinite(value) else -math.inf


@dataclass
class CheckpointSelector:
    """The estimates so far and the best one's checkpoint (module doc).

    ``data``: the episodes (anything ``estimate_value`` reads; load them once, e.g. with
    ``evaluation_episodes``); ``method``: fqe, wis, pdis or dr; ``directory``: where the best
    algorithm so far is saved; ``options``: more ``estimate_value`` keywords;
    ``estimates``: earlier ``{"iteration", "value", "ci_low", "ci_high"}`` (a resumed run's).
    """

    data: Any
    method: str
    gamma: float
    directory: str
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    estimates: list[dict[str, Any]] = field(default_factory=list)

    @property
    def best(self) -> dict[str, Any] | None:
        """The best estimate so far (the earliest of equal ones), None before the first."""
        best = None
        for e in self.estimates:
            if best is None or _key(e["value"]) > _key(best["value"]):
                best = e
        return best

    def path(self, iteration: int) -> str:
        """Where the algorithm of ``iteration`` is kept while it is the best."""
        return storage.join(self.directory, f"{PREFIX}{iteration:06d}")

    def estimate(self, module: Any) -> dict[str, Any]:
        """``estimate_value`` of ``module`` with this selector's settings."""
        kwargs = {**SELECT_DEFAULTS, **self.options}
        method: Any = self.method
        return estimate_value(module, self.data, method=method, gamma=self.gamma, seed=self.seed, **kwargs)

    def offer(self, algo: Any, iteration: int, keep: bool = True) -> dict[str, Any]:
        """Estimate ``algo``'s current module and record it as ``iteration``; a new best is
        saved into :meth:`path` (unless ``keep`` is False: the last offer, which ``algo``
        itself still holds). Returns ``estimate_value``'s result plus ``iteration`` and
        ``best`` (whether it is the best so far)."""
        res = self.estimate(algo.get_module())
        record = {
            "iteration": int(iteration),
            "value": float(res["value"]),
            "ci_low": float(res["ci_low"]),
            "ci_high": float(res["ci_high"]),
        }
        self.estimates.append(record)
        is_best = self.best is record
        if is_best and keep:
            storage.makedirs(self.directory)
            algo.save_to_path(**storage.target(self.path(iteration)))
        return {**res, "iteration": int(iteration), "best": is_best}

    def restore_best(self, algo: Any) -> int:
        """Load the best algorithm into ``algo`` (nothing to load when the last offer, which
        ``algo`` holds, is the best); returns the best iteration. Call it right after the
        last :meth:`offer`."""
        best = self.best
        if best is None:
            raise ValueError("CheckpointSelector.restore_best: no estimate was offered")
        if best is not self.estimates[-1]:
            algo.restore_from_path(**storage.target(self.path(best["iteration"])))
        return int(best["iteration"])

    def prune(self) -> None:
        """Delete the kept algorithms other than the best's (earlier bests, or one saved
        by a run killed before it recorded the estimate)."""
        best = self.best
        keep = None if best is None else f"{PREFIX}{best['iteration']:06d}"
        for name in storage.entries(self.directory):
            if name.startswith(PREFIX) and name != keep:
                storage.remove_tree(storage.join(self.directory, name))

    def clear(self) -> None:
        """Delete ``directory`` (after the best is restored and saved elsewhere)."""
        storage.remove_tree(self.directory)
