"""A trained module acting on graph observations: greedy actions through RLlib's own
inference path (:func:`greedy_actions`), legality of an action (:func:`is_legal`), the
normalized score and the evaluation constants; shared by :mod:`offline_graph.rllib.evaluation.evaluate`
(single-agent) and :mod:`offline_graph.rllib.evaluation.ma_evaluation` (multi-agent)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.globals import dict_layout, with_globals
from offline_graph.data.graphs.graph import GraphDict
from offline_graph.data.graphs.spaces import selection_level
from offline_graph.data.graphs.typed import TypedGraph
from offline_graph.rllib.core.stepwise import StepStates
from offline_graph.rllib.env.env_connectors import graph_batch, typed_of
from offline_graph.rllib.env.module_to_env import argmax_is_greedy

DEFAULT_EVAL_SEED = 987_654_321
"""Evaluation seed used by the pipelines: far from the small seeds data is recorded with."""


def normalized_score(ret: float, random_ret: float, expert_ret: float) -> float:
    """``100 * (ret - random) / (expert - random)``: 0 = random policy, 100 = expert.
    ConfigError (a ValueError) when the expert and random returns are equal."""
    denom = float(expert_ret) - float(random_ret)
    if denom == 0.0:
        raise ConfigError(
            "normalized_score: expert and random returns must differ (found both "
            f"{expert_ret!r}). Evaluate over more episodes."
        )
    return 100.0 * (float(ret) - float(random_ret)) / denom


def is_legal(action: int, obs: GraphDict, action_space: gym.Space) -> bool:
    """Whether ``action`` is legal for observation ``obs``: in ``Discrete(k)``; for
    ``NodeAction`` / ``EdgeAction`` an index of this step's nodes / edges that its
    ``action_mask`` (if any) allows."""
    if selection_level(action_space) is None:
        return bool(action_space.contains(int(action)))
    if not 0 <= int(action) < action_space.choices(obs):  # type: ignore[attr-defined]
        return False
    mask = obs.get("action_mask")
    return True if mask is None else bool(mask[int(action)])


def module_device(module: Any) -> Any:
    """The torch device of ``module``'s parameters (CPU for a parameterless module)."""
    import torch

    for p in module.parameters():
        return p.device
    return torch.device("cpu")


def obs_batch(
    observations: Sequence[GraphDict],
    edge_dim: int | None,
    device: Any = None,
    mask_level: str | None = None,
    typed: tuple[TypedGraph, str | None] | None = None,
) -> dict:
    """``{Columns.OBS: {x, edge_index, [edge_attr], batch, ptr, [action_mask]}}`` torch
    tensors of a list of observation dicts (the learner's batch layout, see
    :mod:`offline_graph.data.graphs.collate`); ``mask_level`` "node" / "edge" batches ``action_mask``.
    ``typed``: (the space, the NodeAction's node type) of typed graphs, batched per type."""
    import torch
    from ray.rllib.core.columns import Columns

    batched = graph_batch(list(observations), edge_dim, mask_level, typed)
    return {
        Columns.OBS: {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in batched.items()}
    }


def greedy_actions(
    module: Any,
    observations: Sequence[GraphDict],
    edge_dim: int | None,
    states: StepStates | None = None,
    slots: Sequence[int] = (),
) -> np.ndarray:
    """Greedy actions for a list of observations, through RLlib's own path:
    ``get_inference_action_dist_cls().from_logits(forward_inference(...)[ACTION_DIST_INPUTS])
    .to_deterministic().sample()`` (argmax; node/edge selection: the most likely allowed one, a
    local index). ``states`` (memory): the ``slots``' STATE_IN and STATE_OUT. With a ``Dict``
    observation space the observations' flat parts become their ``globals``."""
    import torch
    from ray.rllib.core.columns import Columns

    layout = dict_layout(getattr(module, "observation_space", None))
    observations = [with_globals(o, layout) for o in observations]
    level = selection_level(getattr(module, "action_space", None))
    device = module_device(module)
    kind = typed_of(getattr(module, "observation_space", None), getattr(module, "action_space", None))
    with torch.no_grad():
        batch = obs_batch(observations, edge_dim, device, level, kind)
        if states is not None:
            batch[Columns.STATE_IN] = states.batch(slots, observations, device)
        out = module.forward_inference(batch)
        if states is not None:
            states.update(slots, observations, out[Columns.STATE_OUT])
        logits = out[Columns.ACTION_DIST_INPUTS]
        get_dist = getattr(module, "get_inference_action_dist_cls", None)
        dist_cls = None if get_dist is None else get_dist()
        if dist_cls is None or argmax_is_greedy(dist_cls):  # no class: a forward_inference stand-in
            actions = logits.argmax(dim=-1)  # what a categorical's to_deterministic().sample() is
        else:
            actions = dist_cls.from_logits(logits).to_deterministic().sample()
    return actions.cpu().numpy().astype(np.int64)
