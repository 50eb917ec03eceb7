"""``offline-graph train --select-by fqe|wis|pdis|dr``: keep the checkpoint with the best
off-policy estimate (:class:`offline_graph.rllib.evaluation.checkpoint_selection.CheckpointSelector`).

At every checkpoint (every ``--checkpoint-every K`` iterations, which ``--select-by`` needs,
and the last iteration) the current module's value is estimated on the ``--holdout``
episodes (without ``--holdout``: on the training episodes, in-sample, with a warning), with
``--select-gamma`` (default: the algorithm's gamma), ``--seed``, the greedy action (or the
module's distribution with ``--select-explore``) and the selector's cheap defaults
(``--select-epochs``, default 10, for FQE / DR). One line per checkpoint::

    iteration 3: wis estimate 30.412 [28.950, 31.800] (12 episodes, 0.9s; best so far)

The best algorithm so far is kept in ``DIR/selection/iteration_<N>``; at the end it is
restored and saved as the run's checkpoint (``DIR``: what ``offline-graph evaluate`` and
``Algorithm.from_checkpoint`` read), and ``DIR/selection`` is deleted. Ties keep the earlier
iteration. Each estimate is stored in its iteration's history record (``estimate``), so that
``--resume`` continues with the estimates so far (same method, gamma and epochs, checked);
``summary.json`` gets ``selection`` (method, settings, per checkpoint iteration / value / ci,
``best_iteration``) and ``checkpoint_iteration``.
"""

from __future__ import annotations

import sys
from typing import Any

from offline_graph.cli.arguments import bad_value
from offline_graph.cli.train_config import Config
from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError

SELECTION_DIR = "selection"
"""``DIR/selection``: the best algorithm so far during a ``--select-by`` run."""


def check_select(cfg: Config) -> None:
    """Refuse ``--select-*`` settings that cannot work (ConfigError, :func:`bad_value` form)."""

    def bad(name: str, expected: str, hint: str) -> ConfigError:
        return bad_value("train", cfg, name, expected, hint)

    if cfg.select_by is None:
        for name in ("select_gamma", "select_epochs", "select_explore"):
            if getattr(cfg, name) not in (None, False):
                raise bad(name, "unset without --select-by", "It sets the selection estimate.")
        return
    if not cfg.checkpoint_every:
        raise bad(
            "checkpoint_every",
            ">= 1 with --select-by",
            "Estimates are taken at every K-th iteration and the last; --checkpoint-every 1 "
            "estimates every iteration.",
        )
    if cfg.multi_agent:
        raise bad("select_by", "unset with --multi-agent", "Off-policy estimates are single-agent.")
    if cfg.frame_stack > 1 or cfg.memory:
        raise bad("select_by", "unset with --memory / --frame-stack", "OPE needs memoryless modules.")
    if cfg.select_epochs is not None and cfg.select_by not in ("fqe", "dr"):
        raise bad("select_epochs", "unset unless --select-by fqe or dr", "WIS / PDIS fit no Q model.")


def _settings(cfg: Config, gamma: float) -> dict[str, Any]:
    """What a resumed run's estimates must share with the earlier ones."""
    from offline_graph.rllib.evaluation.checkpoint_selection import SELECT_DEFAULTS

    settings: dict[str, Any] = {"method": cfg.select_by, "gamma": gamma, "explore": cfg.select_explore}
    if cfg.select_by in ("fqe", "dr"):
        settings["epochs"] = cfg.select_epochs or SELECT_DEFAULTS["epochs"]
    return settings


def resumed_estimates(cfg: Config, gamma: float, history: list[dict]) -> list[dict[str, Any]]:
    """The estimates recorded in a resumed run's history, checked against ``cfg``."""
    recorded = [(h["iteration"], h["estimate"]) for h in history if h.get("estimate")]
    if recorded and cfg.select_by is None:
        raise bad_value(
            "train --resume", cfg, "select_by", repr(recorded[0][1]["method"]),
            "The run being resumed selects by it; resume with its flags.",
        )  # fmt: skip
    if history and cfg.select_by is not None and not recorded:
        raise bad_value(
            "train --resume", cfg, "select_by", "unset",
            "The run being resumed has no estimates; select in a new --checkpoint.",
        )  # fmt: skip
    want = _settings(cfg, gamma)
    diffs = sorted(
        {f"{k}: {e.get(k)!r} -> {v!r}" for _, e in recorded for k, v in want.items() if e.get(k) != v}
    )
    if diffs:
        raise ConfigError(
            f"train --resume: the --select-* settings must match the run being resumed (found "
            f"{'; '.join(diffs)}). Resume with the first run's flags."
        )
    return [{"iteration": it, **{k: e[k] for k in ("value", "ci_low", "ci_high")}} for it, e in recorded]


class TrainSelection:
    """The ``--select-by`` part of one ``offline-graph train`` run (module doc)."""

    def __init__(
        self, cfg: Config, files: list[str], spaces: tuple[Any, Any], gamma: float, history: list[dict]
    ) -> None:
        from offline_graph.rllib.evaluation.checkpoint_selection import CheckpointSelector
        from offline_graph.rllib.ope.ope_runner import evaluation_episodes

        assert cfg.select_by is not None  # noqa: S101 (run checks)
        self.cfg = cfg
        self.settings = _settings(cfg, gamma)
        episodes, self.in_sample = evaluation_episodes(files, *spaces, cfg.holdout or 0.0, cfg.holdout_seed)
        self.episodes = episodes.episodes
        if self.in_sample:
            print(
                f"train: warning: --select-by estimates on the training episodes ({self.episodes}; "
                "no --holdout): the estimate is in-sample and favours overfitting.",
                file=sys.stderr,
            )
        options: dict[str, Any] = {k: self.settings[k] for k in ("explore", "epochs") if k in self.settings}
        self.selector = CheckpointSelector(
            episodes,
            cfg.select_by,
            gamma,
            storage.join(cfg.checkpoint, SELECTION_DIR),
            seed=cfg.seed,
            options=options,
            estimates=resumed_estimates(cfg, gamma, history),
        )
        best = self.selector.best
        if best is not None and not storage.exists(self.selector.path(best["iteration"])):
            raise ConfigError(
                f"train --resume: {self.selector.path(best['iteration'])} must exist (found no "
                f"saved algorithm of the best iteration {best['iteration']} so far). Train into a new "
                "--checkpoint."
            )
        self.selector.prune()  # a killed run's unrecorded best
        self.warned: set[str] = set()

    def due(self, iteration: int) -> bool:
        """Whether ``iteration`` is a checkpoint (every K-th and the last)."""
        return iteration % self.cfg.checkpoint_every == 0 or iteration == self.cfg.iterations

    def offer(self, algo: Any, iteration: int, record: dict[str, Any]) -> None:
        """Estimate ``algo``'s module, keep it if best, store the estimate in ``record``, print."""
        res = self.selector.offer(algo, iteration, keep=iteration < self.cfg.iterations)
        record["estimate"] = {
            **self.settings,
            **{k: float(res[k]) for k in ("value", "ci_low", "ci_high")},
            "episodes": res["episodes"],
        }
        print(
            f"iteration {iteration}: {res['method']} estimate {res['value']:.3f} "
            f"[{res['ci_low']:.3f}, {res['ci_high']:.3f}] ({res['episodes']} episodes, "
            f"{res['seconds']:.1f}s{'; best so far' if res['best'] else ''})",
            flush=True,
        )
        for warning in res["warnings"]:
            if warning not in self.warned:
                self.warned.add(warning)
                print(f"train: warning: --select-by {res['method']}: {warning}", file=sys.stderr)

    def finish(self, algo: Any) -> int:
        """Restore the best algorithm into ``algo``; returns its iteration."""
        best = self.selector.restore_best(algo)
        value = self.selector.best["value"]  # type: ignore[index]
        print(
            f"selected iteration {best} of {self.cfg.iterations} ({self.cfg.select_by} estimate {value:.3f})"
        )
        return best

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s ``selection``."""
        best = self.selector.best
        return {
            **self.settings,
            "seed": self.cfg.seed,
            "data": "training episodes (in-sample)" if self.in_sample else "held-out episodes",
            "episodes": self.episodes,
            "checkpoints": [
                {"iteration": e["iteration"], "value": e["value"], "ci": [e["ci_low"], e["ci_high"]]}
                for e in self.selector.estimates
            ],
            "best_iteration": None if best is None else best["iteration"],
            "best_value": None if best is None else best["value"],
        }
