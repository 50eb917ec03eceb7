"""``offline-graph evaluate --data``: a checkpoint's value estimated from logged episodes
(off-policy evaluation, :func:`offline_graph.estimate_value`), and, with ``--env``, its
(greedy, undiscounted) return in the env side by side; ``--gamma`` then defaults to 1.0 so
that the two numbers estimate the same quantity.

Prints one line per result::

    fqe estimate 31.20 [30.85, 31.61] (gamma 1.0, 300 episodes, 2117 transitions, 12.3s)
    env return  30.90 +- 12.10 over 50 episodes (greedy, seed 987654321)

Multi-agent episode files (or a checkpoint with several modules): every module of the
checkpoint is estimated on the agents mapped to it (``--policy-mapping``, else the mapping
``train --multi-agent`` used, else the module recorded with each agent), one line
``module <id>: <estimate>`` each; ``--env`` is for single-agent checkpoints here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError


def format_estimate(res: dict[str, Any]) -> str:
    """``<method> estimate V [low, high] (gamma, episodes, transitions[, ess, behaviour])``."""
    text = (
        f"{res['method']} estimate {res['value']:.3f} [{res['ci_low']:.3f}, {res['ci_high']:.3f}] "
        f"(gamma {res['gamma']}, {res['episodes']} episodes, {res['transitions']} transitions"
    )
    if res.get("ess") is not None:
        text += f", ess {res['ess']:.1f}, behaviour {res['behaviour']}, clipped {100 * res['clipped']:.1f}%"
    text += f", {res['seconds']:.1f}s)"
    return "\n".join([text, *(f"warning: {w}" for w in res.get("warnings", []))])


@contextlib.contextmanager
def fqe_progress() -> Iterator[None]:
    """FQE's progress records (:mod:`offline_graph.rllib.ope.fqe`) on stderr while it runs."""
    log = logging.getLogger("offline_graph.rllib.ope.fqe")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level, log.level = log.level, logging.INFO
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def check_module_env(module: Any, env_name: str, env_config: dict | None) -> None:
    """ConfigError when the env's spaces are not the module's (compared as compact text)."""
    from offline_graph.data.graphs.space_text import space_text
    from offline_graph.jobs.recording import make_env

    env = make_env(env_name, env_config)
    try:
        pairs = [
            (role, space_text(getattr(module, f"{role}_space")), space_text(getattr(env, f"{role}_space")))
            for role in ("observation", "action")
        ]
    finally:
        env.close()
    for role, mine, theirs in pairs:
        if mine != theirs:
            raise ConfigError(
                f"evaluate: the env's {role} space must be the module's (found {theirs} for "
                f"--env {env_name}, {mine} for the module). Pass the env the data came from."
            )


def _multi_agent(cfg: Any, data: Any = None) -> bool:
    """Whether ``cfg.data`` (``data``: it resolved, :class:`~offline_graph.env.data_input.DataInput`)
    is multi-agent episode files or the checkpoint has several modules."""
    from offline_graph.env.data_input import DataInput
    from offline_graph.rllib.evaluation.checkpoints import MODULE_SUBDIR

    root = storage.join(storage.absolute(cfg.checkpoint), MODULE_SUBDIR)
    several = storage.is_dir(root) and len(storage.entries(root)) > 1
    return several or bool((data or DataInput(cfg.data)).metadata.get("multi_agent"))


def _run_modules(
    cfg: Any, res: dict[str, Any], gamma: float | None, kw: dict[str, Any], data: Any = None
) -> dict[str, Any]:
    """:func:`run_offline` per module of multi-agent data (module doc)."""
    from offline_graph.cli.checkpoint_info import checkpoint_summary, load_mapping_fn
    from offline_graph.rllib.evaluation.checkpoints import restore_modules
    from offline_graph.rllib.ope.estimate import estimate_value

    if cfg.env:
        raise ConfigError(
            "evaluate: --env must not be given with multi-agent --data (found "
            f"{cfg.env!r}). Estimate here, and play the modules with evaluate --env alone."
        )
    spec = cfg.policy_mapping or checkpoint_summary(cfg.checkpoint).get("config", {}).get("policy_mapping")
    mapping = load_mapping_fn(spec) if spec else None
    res["per_module"] = {}
    for mid, module in sorted(restore_modules(cfg.checkpoint).items()):
        source = data or cfg.data  # the input resolved once, for every module
        est = estimate_value(module, source, gamma=gamma, module_id=mid, policy_mapping_fn=mapping, **kw)
        res["per_module"][mid] = est
        print(f"module {mid}: {format_estimate(est)}")
    _write(cfg, res)
    return res


def _write(cfg: Any, res: dict[str, Any]) -> None:
    if cfg.output:
        storage.write_bytes(cfg.output, json.dumps(res, indent=2, default=str).encode())


def run_offline(cfg: Any) -> dict[str, Any]:
    """Restore the checkpoint's module, estimate its value from ``cfg.data`` (and play it in
    ``cfg.env`` when given); prints and returns the results (``cfg``: evaluate's Config)."""
    from offline_graph.env.data_input import DataInput
    from offline_graph.rllib.evaluation.evaluate import evaluate_module, restore_module
    from offline_graph.rllib.ope.estimate import estimate_value

    assert cfg.checkpoint is not None and cfg.data is not None  # noqa: S101 (parse_args checks)
    res: dict[str, Any] = {"checkpoint": storage.absolute(cfg.checkpoint), "data": cfg.data}
    seed = cfg.seed % (2**32)
    kw = dict(
        method=cfg.method, explore=cfg.explore, epochs=cfg.fqe_epochs, horizon=cfg.horizon,
        fqe_by_step=cfg.fqe_by_step, seed=seed,
    )  # fmt: skip
    gamma = cfg.gamma if cfg.gamma is not None or not cfg.env else 1.0
    data = DataInput(cfg.data)  # listed and checked on first use, once: every step takes it
    if _multi_agent(cfg, data):
        with fqe_progress():
            return _run_modules(cfg, res, gamma, kw, data)
    module = restore_module(cfg.checkpoint)
    with fqe_progress():
        res["estimate"] = estimate_value(module, data, gamma=gamma, **kw)
    lines = [format_estimate(res["estimate"])]
    if cfg.env:
        check_module_env(module, cfg.env, cfg.env_config)
        ev = evaluate_module(module, cfg.env, cfg.episodes, cfg.seed, cfg.num_envs, env_config=cfg.env_config)
        res["env"] = {"env": cfg.env, **ev}
        lines.append(
            f"env return  {ev['mean_return']:.3f} +- {ev['std']:.3f} over {cfg.episodes} episodes "
            f"(greedy, seed {cfg.seed})"
        )
    print("\n".join(lines))
    _write(cfg, res)
    return res
