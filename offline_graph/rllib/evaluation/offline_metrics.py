"""Offline metrics of a trained module on held-out episodes (for data without an env).

``offline-graph train`` with no env given or recorded holds a fraction of the episodes out of
training (:mod:`offline_graph.data.episodes.holdout`) and reports, on them:

* ``action_agreement``: the fraction of held-out transitions whose greedy action (RLlib's
  ``get_inference_action_dist_cls().from_logits(...).to_deterministic().sample()``, as in the
  env evaluation) equals the recorded action;
* ``mean_log_likelihood``: the mean log-probability of the recorded actions under the module's
  action distribution (natural log, per transition; 0 is a perfect fit,
  ``-log(K)`` a uniform policy over ``Discrete(K)``).
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np

from offline_graph.data.graphs.collate import collate
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.episodes.holdout import HOLDOUT_EVAL_LIMIT, read_held_out
from offline_graph.data.episodes.validation import EpisodeSpec


def action_metrics(
    module: Any, obs: GraphColumns, actions: np.ndarray, batch_size: int = 512
) -> dict[str, Any]:
    """Agreement and mean log-likelihood of ``module`` on transitions ``(obs, actions)``."""
    import torch
    from ray.rllib.core.columns import Columns

    from offline_graph.rllib.evaluation.evaluate import module_device

    if hasattr(module, "eval"):
        module.eval()
    device = module_device(module)
    agreeing, log_lik = 0, 0.0
    dist_cls = module.get_inference_action_dist_cls()
    with torch.no_grad():
        for lo in range(0, len(actions), batch_size):
            hi = min(lo + batch_size, len(actions))
            batch = {
                k: torch.from_numpy(np.ascontiguousarray(v)).to(device)
                for k, v in collate(obs.slice(lo, hi)).items()
            }
            logits = module.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
            dist = dist_cls.from_logits(logits)
            recorded = torch.from_numpy(np.asarray(actions[lo:hi], np.int64)).to(device)
            agreeing += int((dist.to_deterministic().sample() == recorded).sum().item())
            log_lik += float(dist.logp(recorded).double().sum().item())
    n = len(actions)
    return {
        "agreeing": agreeing,
        "action_agreement": agreeing / n if n else None,
        "mean_log_likelihood": log_lik / n if n else None,
    }


def holdout_metrics(
    module: Any,
    files: Sequence[str],
    kind: str,
    spec: EpisodeSpec,
    fraction: float,
    seed: int,
    *,
    on_error: Literal["raise", "skip"] = "raise",
    limit: int = HOLDOUT_EVAL_LIMIT,
) -> dict[str, Any]:
    """The offline metrics (module docstring) on the held-out episodes of ``files``, read back
    on the driver (at most ``limit`` transitions)."""
    held = read_held_out(files, kind, spec, fraction, seed, on_error=on_error, limit=limit)
    out: dict[str, Any] = {
        "holdout": fraction,
        "holdout_seed": seed,
        "episodes": held.episodes,
        "transitions": held.transitions,
        "limit": limit,
    }
    if held.obs is None or not held.transitions:
        return {**out, "agreeing": 0, "action_agreement": None, "mean_log_likelihood": None}
    return {**out, **action_metrics(module, held.obs, held.actions)}


def format_metrics(m: dict[str, Any]) -> str:
    """One line: ``offline metrics on 2 held-out episodes (7 transitions; ...): ...``."""
    head = (
        f"offline metrics on {m['episodes']} held-out episodes ({m['transitions']} transitions; "
        f"--holdout {m['holdout']:g}, seed {m['holdout_seed']})"
    )
    if m["action_agreement"] is None:
        return head + ": none held out (raise --holdout or add episodes)"
    return (
        f"{head}: action agreement {m['action_agreement']:.3f} ({m['agreeing']}/{m['transitions']}), "
        f"mean log-likelihood {m['mean_log_likelihood']:.4f}"
    )
