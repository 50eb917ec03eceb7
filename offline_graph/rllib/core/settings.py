"""offline_graph's own settings, carried inside the RLlib config.

``offline_graph.configure`` stores them in ``config.learner_config_dict["offline_graph"]``, so
they travel with the config to every Ray actor (prelearners, learners). Their presence also
marks a config as configured for graph training.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from offline_graph.data.errors import ConfigError

SETTINGS_KEY = "offline_graph"

Conv = Literal["gcn", "sage", "gin", "gine"]
"""Message-passing layer kinds of ``GNNModule`` (``model_config["conv"]``, ``train --conv``)."""
CONVS: tuple[str, ...] = get_args(Conv)


@dataclass(frozen=True)
class GraphSettings:
    """Per-run settings of the graph data path."""

    on_error: Literal["raise", "skip"] = "raise"
    """Bad episode rows: stop with an error naming file/row/episode/step, or skip and count."""
    seed: int = 0
    """Seed of the prelearner's sampling (same data + seed -> same first batch)."""
    stats_name: str = ""
    """Name of the accounting actor prelearners report to (``offline_graph.rllib.offline.accounting``)."""
    files_rejected: dict = field(default_factory=dict)
    """Skip mode: input files dropped before reading, count by reason."""
    file_errors: dict = field(default_factory=dict)
    """Skip mode: the first error message per file rejection reason."""
    holdout: float = 0.0
    """Fraction of episodes the prelearner keeps out of training (by a hash of the episode id
    and ``holdout_seed``, :mod:`offline_graph.data.episodes.holdout`), counted as held out."""
    holdout_seed: int = 0
    """Seed of the held-out split (the same seed and fraction hold out the same episodes)."""
    seq_length: int = 0
    """Memory modules (``frame_stack > 1`` or ``memory``): trained steps per run
    (``max_seq_len``); 0: single transitions (:mod:`offline_graph.data.learning.sequences`)."""
    seq_context: int = 0
    """Memory modules: steps before a run it may see (``frame_stack - 1``, or the burn-in)."""
    value_runs: int = 0
    """Value-based training (IQL, CQL): consecutive steps per value run, each shipped with the
    graph after it (:mod:`offline_graph.data.learning.value_runs`); 0: not value-based."""

    reward_scale: dict = field(default_factory=dict)
    """Value-based training: the reward scale measured once from the training episodes
    (:class:`offline_graph.data.learning.reward_scale.RewardScale` as a dict: ``method``, ``scale``,
    ...); trained rewards are ``logged * scale``. Empty: rewards as logged."""

    advantage_norm: str = "none"
    """IQL: the actor's advantage normalisation (``"shrink_std"``, configure's default,
    ``"batch_std"`` or ``"none"``:
    :func:`offline_graph.rllib.algorithms.value_learner.advantage_weights`); configs saved
    without it train as they did ("none")."""

    offline_evaluation: dict = field(default_factory=dict)
    """Off-policy evaluation in RLlib's offline evaluation (:mod:`offline_graph.rllib.ope.ope_runner`):
    ``{"method": "fqe" | "wis" | "pdis" | "dr", **estimate_value keywords}``; empty: none."""

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (stored in ``learner_config_dict``)."""
        return asdict(self)


def read_settings(config: Any, where: str) -> GraphSettings:
    """The settings of a configured config, or a ConfigError naming what to call."""
    raw = (getattr(config, "learner_config_dict", None) or {}).get(SETTINGS_KEY)
    if raw is None:
        raise ConfigError(
            f"{where}: config.learner_config_dict['offline_graph'] must be set by "
            "offline_graph.configure(config) (found it missing). Call "
            "`config = offline_graph.configure(config)` before `config.build_algo()`."
        )
    on_error = raw.get("on_error", "raise")
    if on_error not in ("raise", "skip"):
        raise ConfigError(f"{where}: on_error must be 'raise' or 'skip' (found {on_error!r}).")
    # Configs saved before GraphSettings lost its (never settable) module_id still load.
    return GraphSettings(**{k: v for k, v in raw.items() if k != "module_id"})
