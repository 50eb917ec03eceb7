"""Policies as per-graph choice probabilities, for off-policy evaluation.

A policy over graphs has ``C_g`` choices in graph ``g``: ``k`` for ``Discrete(k)``, its node
(edge) count for ``NodeAction`` (``EdgeAction``), masked ones included with probability 0.
:class:`Choices` keeps every graph's probabilities flat and unpadded (``probs [sum C_g]``,
``ptr [G+1]``); :meth:`Choices.dense` lays a few graphs out as ``[B, M]`` rows (zeros past a
graph's choices), the layout of the Q heads (:mod:`offline_graph.rllib.core.critic`).

- :func:`target_choices`: any RLModule whose ``forward_inference`` takes the learner batch's
  observation (:mod:`offline_graph.data.graphs.collate`) and returns ``ACTION_DIST_INPUTS`` for a
  categorical ``get_inference_action_dist_cls()`` (RLlib's ``TorchCategorical`` and its
  subclasses, e.g. the choice categorical of node / edge selection): the distribution's
  probabilities (``explore=True``) or the greedy action with probability 1 (``explore=False``;
  ties: the first, as ``to_deterministic()``).
- :func:`fit_behaviour`: a behaviour policy cloned from the logged actions (a Q-network-shaped
  GNN read as logits, trained by cross-entropy) when the logs carry no ``action_logp``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical

from offline_graph.data.graphs.collate import collate
from offline_graph.data.graphs.columns import GraphColumns, concat_ranges, counts_to_ptr
from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.typed import typed_space
from offline_graph.data.graphs.globals import globals_size
from offline_graph.data.graphs.graph import space_sizes
from offline_graph.data.graphs.spaces import selection_level
from offline_graph.rllib.core.critic import QNetwork, legal
from offline_graph.rllib.core.gnn_module import encoder_of, resolve_gnn_config
from offline_graph.rllib.core.hetero import typed_encoder_of

INFERENCE_BATCH = 512
"""Graphs per forward pass of the evaluated module."""


@dataclass
class Choices:
    """Per graph, the probability of each of its choices (module doc)."""

    probs: np.ndarray
    ptr: np.ndarray

    def at(self, actions: np.ndarray, graphs: np.ndarray | None = None) -> np.ndarray:
        """The probability of ``actions[i]`` in graph ``graphs[i]`` (default: graph ``i``)."""
        graphs = np.arange(len(actions)) if graphs is None else graphs
        return self.probs[self.ptr[graphs] + np.asarray(actions, np.int64)]

    def dense(self, graphs: np.ndarray, width: int) -> torch.Tensor:
        """``[len(graphs), width]`` float32, graph ``graphs[b]``'s choices in row b."""
        counts = np.diff(self.ptr)[graphs]
        out = torch.zeros(len(graphs), width)
        rows = np.repeat(np.arange(len(graphs)), counts)
        cols = np.arange(int(counts.sum())) - np.repeat(counts_to_ptr(counts)[:-1], counts)
        flat = self.probs[concat_ranges(self.ptr[graphs], self.ptr[graphs] + counts)]
        out[torch.from_numpy(rows), torch.from_numpy(cols)] = torch.from_numpy(flat).float()
        return out


def choice_counts(graphs: GraphColumns, action_space: gym.Space) -> np.ndarray:
    """``C_g`` of every graph (module doc)."""
    level = selection_level(action_space)
    if level == "node":  # a typed graph's: the action's node type (its choice_ptr)
        return np.diff(graphs.choice_ptr("node")).astype(np.int64)
    if level == "edge":
        return graphs.num_edges.astype(np.int64)
    return np.full(len(graphs), int(action_space.n), np.int64)  # type: ignore[attr-defined]


def torch_obs(graphs: GraphColumns, device: Any = None) -> dict[str, torch.Tensor]:
    """The learner batch's observation (PyG union) of ``graphs`` as torch tensors."""
    return {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in collate(graphs).items()}


def minibatches(n: int, size: int, rng: np.random.Generator | None = None) -> Iterator[np.ndarray]:
    """Row indices ``0..n-1`` in chunks of ``size`` (shuffled when ``rng`` is given)."""
    order = rng.permutation(n) if rng is not None else np.arange(n)
    for lo in range(0, n, int(size)):
        yield order[lo : lo + int(size)]


def _flat(probs: torch.Tensor, counts: np.ndarray) -> np.ndarray:
    """Rows of a ``[B, M]`` layout -> each graph's first ``counts[b]`` entries, flat."""
    keep = torch.arange(probs.shape[1]).unsqueeze(0) < torch.from_numpy(counts).unsqueeze(1)
    return probs[keep].double().cpu().numpy()


def check_module(module: Any, where: str) -> None:
    """ConfigError unless ``module`` is a memoryless module with a categorical distribution."""
    build = (
        "Pass a built module: RLModuleSpec(module_class=..., observation_space=..., "
        "action_space=...).build(), algo.get_module() or offline_graph.restore_module(path)."
    )
    if isinstance(module, type):
        raise ConfigError(
            f"{where}: module must be an RLModule instance (found the class {module.__name__}). {build}"
        )
    keys = getattr(module, "keys", None)
    if callable(keys) and getattr(module, "observation_space", None) is None:  # a MultiRLModule
        ids = sorted(map(str, keys()))
        raise ConfigError(
            f"{where}: module must be one RLModule (found a MultiRLModule of the modules {ids}). "
            f"Pass module_id= (one of {ids}) to evaluate one of them on its agents' steps, or "
            "the module itself: multi_module[module_id]."
        )
    missing = [
        name
        for name in (
            "forward_inference",
            "get_inference_action_dist_cls",
            "observation_space",
            "action_space",
        )
        if getattr(module, name, None) is None
    ]
    if missing:
        raise ConfigError(
            f"{where}: module must be an RLModule with forward_inference, its inference action "
            f"distribution and its spaces (found {type(module).__name__} without {', '.join(missing)}). "
            f"{build}"
        )
    cls = module.get_inference_action_dist_cls()  # present: checked above
    if not (isinstance(cls, type) and issubclass(cls, TorchCategorical)):
        raise ConfigError(
            f"{where}: the module's inference action distribution must be a categorical "
            f"(found {cls!r}). Off-policy evaluation reads per-choice probabilities from "
            "ACTION_DIST_INPUTS (Discrete, NodeAction or EdgeAction policies)."
        )
    if getattr(module, "is_stateful", lambda: False)():
        raise ConfigError(
            f"{where}: the module must be memoryless (found a stateful module: memory or "
            "frame_stack). Off-policy evaluation of recurrent graph policies is not supported."
        )


def _dist_inputs(out: Any, counts: np.ndarray, action_space: gym.Space) -> torch.Tensor:
    """``out[ACTION_DIST_INPUTS]``, checked to be ``[B, M]`` for ``B`` graphs of ``counts``
    choices: ``M`` = the Discrete space's ``n``, else at least the most choices of a graph."""
    where = "estimate_value: the module's forward_inference output"
    if not isinstance(out, dict) or Columns.ACTION_DIST_INPUTS not in out:
        found = sorted(map(str, out)) if isinstance(out, dict) else type(out).__name__
        raise ConfigError(
            f"{where} must hold ACTION_DIST_INPUTS ({Columns.ACTION_DIST_INPUTS!r}) (found {found}). "
            "Return {Columns.ACTION_DIST_INPUTS: logits} from _forward_inference / _forward."
        )
    logits = out[Columns.ACTION_DIST_INPUTS]
    shape = tuple(getattr(logits, "shape", ()))
    discrete = selection_level(action_space) is None
    width = int(counts.max()) if len(counts) else 0
    ok = isinstance(logits, torch.Tensor) and len(shape) == 2 and shape[0] == len(counts)
    ok = ok and (shape[1] == width if discrete else shape[1] >= width)
    if not ok:
        want = (
            f"[{len(counts)}, {width}] (one row of {action_space} logits per graph)"
            if discrete
            else f"[{len(counts)}, >= {width}] (per graph, one logit per {selection_level(action_space)}, "
            "the graph's first; filler past a graph's choices)"
        )
        raise ConfigError(
            f"{where} ACTION_DIST_INPUTS must be a tensor {want} for a batch of {len(counts)} graphs "
            f"(found {type(logits).__name__} {list(shape)}). The batch holds one row per graph: "
            "count graphs with len(obs['ptr']) - 1, not nodes."
        )
    return logits


def target_choices(
    module: Any, graphs: GraphColumns, explore: bool, batch_size: int = INFERENCE_BATCH
) -> Choices:
    """The target policy of ``module`` on every graph of ``graphs`` (module doc)."""
    check_module(module, "estimate_value")
    counts = choice_counts(graphs, module.action_space)
    device = next((p.device for p in module.parameters()), None)
    parts: list[np.ndarray] = []
    with torch.no_grad():
        for idx in minibatches(len(graphs), batch_size):
            out = module.forward_inference({Columns.OBS: torch_obs(graphs.take(idx), device)})
            logits = _dist_inputs(out, counts[idx], module.action_space)
            probs = torch.softmax(logits.double(), dim=-1)
            if not explore:
                best = probs.argmax(dim=-1, keepdim=True)
                probs = torch.zeros_like(probs).scatter_(-1, best, 1.0)
            parts.append(_flat(probs.cpu(), counts[idx]))
    return Choices(np.concatenate(parts) if parts else np.zeros(0), counts_to_ptr(counts))


def q_network(
    observation_space: gym.Space, action_space: gym.Space, model: dict | None, num_q: int = 1, steps: int = 0
) -> QNetwork:
    """A fresh Q network (:class:`~offline_graph.rllib.core.critic.QNetwork`, ``num_q`` heads) for
    the spaces; ``model`` takes GNNModule's encoder keys (``hidden``, ``layers``, ``conv``,
    ``pool``, ``head_hidden``), defaults as there. Node / edge heads also read the pooled
    legal choices of their graph (``legal_context``): on Team-v0's pick module (the allowed
    node with the most neighbours) the first FQE iteration fit the expert's one-step value
    as 0.29 for 1.0 without it."""
    cfg = resolve_gnn_config(model or {}, observation_space)
    encoder: Any
    if typed_space(observation_space) is not None:  # a typed graph: the heterogeneous encoder
        edge_dim = None
        encoder = typed_encoder_of(cfg, observation_space, action_space)
    else:
        in_dim, edge_dim = space_sizes(observation_space)
        encoder = encoder_of(
            {**cfg, "bag_of_nodes": False}, in_dim, edge_dim, globals_size(observation_space)
        )
    return QNetwork(
        encoder, action_space, edge_dim, cfg["head_hidden"], num_q=num_q, legal_context=True, steps=steps
    )


def fit_behaviour(
    graphs: GraphColumns,
    actions: np.ndarray,
    observation_space: gym.Space,
    action_space: gym.Space,
    *,
    model: dict | None = None,
    epochs: int = 5,
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
) -> np.ndarray:
    """``mu(a | s)`` of the logged actions under a policy cloned from them (module doc)."""
    torch.manual_seed(seed)
    net = q_network(observation_space, action_space, model)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    acts = torch.from_numpy(np.asarray(actions, np.int64))

    def log_probs(idx: np.ndarray) -> torch.Tensor:
        _, (logits,) = net(torch_obs(graphs.take(idx)))
        logits = torch.where(legal(logits), logits, torch.full_like(logits, float("-inf")))
        return torch.log_softmax(logits, dim=-1).gather(-1, acts[idx].unsqueeze(-1)).squeeze(-1)

    for _ in range(int(epochs)):
        for idx in minibatches(len(graphs), batch_size, rng):
            loss = -log_probs(idx).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        out = [log_probs(idx).exp().double().numpy() for idx in minibatches(len(graphs), INFERENCE_BATCH)]
    return np.concatenate(out) if out else np.zeros(0)
