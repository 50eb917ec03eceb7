"""Typed (heterogeneous) graph encoder of :class:`~offline_graph.rllib.core.gnn_module.GNNModule`
for :class:`~offline_graph.data.graphs.typed.TypedGraph` observation spaces (or a ``Dict`` of one
TypedGraph and flat parts), and its config resolution.

The collated batch of B graphs it reads has, per node type ``t``: ``x:<t>`` float [sumN_t, F_t],
``batch:<t>`` int64 [sumN_t], ``ptr:<t>`` int64 [B+1]; per edge type ``r = "src__rel__dst"``:
``edge_index:<r>`` int64 [2, sumE_r] (row 0 rows of ``x:<src>``, row 1 rows of ``x:<dst>``) and
``edge_attr:<r>`` float [sumE_r, D_r] when the edge type has features; optionally ``globals``
[B, G] and ``action_mask`` [sumN_a] (over the ``NodeAction``'s node type).

Encoder: per node type ``h_t = relu(W_t x_t)``; ``layers`` rounds of PyG ``HeteroConv`` (sum
over the edge types that reach a type; ``SAGEConv`` per edge type without features, ``GINEConv``
with ``edge_dim=D_r`` per edge type with features), ``h_t = h_t + relu(m_t)`` for every type
that receives messages; readout: each node type pooled per graph, concatenated in the space's
order, then ``globals``. The :class:`~offline_graph.rllib.core.gnn_layers.GraphEncoding`'s
``nodes`` / ``batch`` / ``ptr`` are the action node type's (``NodeAction(node_type=a)``), else
the first read node type's, so the graph, selection and Q heads read it unchanged.
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import gymnasium as gym
import torch
from torch import nn

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.globals import FLAT_SPACES
from offline_graph.data.graphs.typed import TypedGraph, edge_ends, typed_space
from offline_graph.data.graphs.typed_infer import action_node_type as node_type_of
from offline_graph.rllib.core.gnn_layers import POOLS, GraphEncoding, mlp, pool_nodes, with_globals

_WHERE = "GNNModule model_config"


def typed_globals_size(space: Any) -> int:
    """G of a typed observation space: the flat parts of a ``Dict`` beside its TypedGraph
    (``gymnasium.spaces.flatdim`` summed; 0 for a TypedGraph alone)."""
    if not isinstance(space, gym.spaces.Dict):
        return 0
    parts = [(k, s) for k, s in space.spaces.items() if not isinstance(s, TypedGraph)]
    for key, part in parts:
        if not isinstance(part, FLAT_SPACES):
            raise ConfigError(
                f"observation space: a Dict's entries beside its TypedGraph must be Box / Discrete / "
                f"MultiBinary (found {key!r}: {part!r}). Nest other structures as separate flat entries."
            )
    return int(sum(gym.spaces.flatdim(part) for _, part in parts))


def resolve_typed_config(cfg: dict[str, Any], mc: dict[str, Any], space: TypedGraph) -> dict[str, Any]:
    """The typed part of :func:`~offline_graph.rllib.core.gnn_module.resolve_gnn_config`:
    refuses what a typed encoder cannot do and resolves ``node_types`` (the space's order)."""
    refused = [
        ("memory", cfg["memory"] is not None, "unset", cfg["memory"]),
        ("frame_stack", cfg["frame_stack"] > 1, "1", cfg["frame_stack"]),
        ("bag_of_nodes", cfg["bag_of_nodes"], "False", cfg["bag_of_nodes"]),
    ]
    for key, bad, expected, found in refused:
        if bad:
            raise ConfigError(
                f"{_WHERE}: {key!r} must be {expected} for a typed graph observation space "
                f"(found {key}={found!r}). Typed graphs have no temporal memory or bag-of-nodes "
                "baseline yet; use 'node_types' to leave node types out instead."
            )
    given = mc.get("node_types")
    if given is None:
        names = space.node_types
    else:
        if isinstance(given, str) or not isinstance(given, (list, tuple)) or not given:
            raise ConfigError(
                f"{_WHERE}: 'node_types' must be a non-empty list of node type names (found "
                f"{given!r}). E.g. ['job'] reads only the 'job' nodes and the edges among them."
            )
        unknown = [t for t in given if t not in space.node_types]
        if unknown or len(set(given)) != len(given):
            found = f"{unknown[0]!r}" if unknown else f"duplicates in {list(given)}"
            raise ConfigError(
                f"{_WHERE}: 'node_types' must be distinct node types of the observation space "
                f"{space.node_types} (found {found}). Leave it unset to read every node type."
            )
        names = [t for t in space.node_types if t in given]
    return {**cfg, "node_types": names}


def refuse_node_types_key(mc: dict[str, Any]) -> None:
    """``node_types`` is a typed-space key; refused for a plain graph space."""
    if mc.get("node_types") is not None:
        raise ConfigError(
            f"{_WHERE}: 'node_types' must be unset for a plain (untyped) graph observation space "
            f"(found {mc['node_types']!r}). It picks node types of a TypedGraph space."
        )


def action_node_type(action_space: Any, space: TypedGraph | None, node_types: list[str] | None) -> str | None:
    """The node type a ``NodeAction`` chooses among (None for a graph-level action), as the
    data path reads it (:func:`offline_graph.data.graphs.typed_infer.action_node_type`: refuses
    what does not fit the observation space); also refused when ``node_types`` leaves it out."""
    node_type = node_type_of(space, action_space, "GNNModule action_space")
    if node_type is None:
        return None
    if node_types is not None and node_type not in node_types:
        raise ConfigError(
            f"{_WHERE}: 'node_types' must include the action's node type {node_type!r} "
            f"(found {node_types}). The policy chooses among those nodes."
        )
    return str(node_type)


def typed_encoder_of(cfg: dict[str, Any], observation_space: Any, action_space: Any) -> TypedGraphEncoder:
    """A fresh :class:`TypedGraphEncoder` as the resolved config says (``node_types``,
    ``hidden``, ``layers``, ``pool``, ``globals``) for a typed observation space."""
    space = typed_space(observation_space)
    if space is None:
        raise ConfigError(
            f"GNNModule observation_space: space must be a TypedGraph or a Dict with one TypedGraph "
            f"entry (found {observation_space!r}). Plain graph spaces use encoder_of."
        )
    node_types = cfg.get("node_types") or space.node_types
    anchor = action_node_type(action_space, space, node_types)
    return TypedGraphEncoder(
        {t: space.node_dims[t] for t in node_types},
        space.edge_dims,
        cfg["hidden"],
        cfg["layers"],
        cfg["pool"],
        typed_globals_size(observation_space) if cfg["globals"] else 0,
        anchor,
    )


def _need(obs: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    if key not in obs:
        raise ValueError(
            f"TypedGraphEncoder: the observation batch must carry {key!r} (found keys "
            f"{sorted(map(str, obs))}). Batch typed observations with offline_graph.collate."
        )
    return obs[key]


class TypedGraphEncoder(nn.Module):
    """Per-type input projections, ``layers`` residual ``HeteroConv`` rounds, per-type pooling
    (see the module doc). ``node_dims``: the node types read (``{type: F_t}``, in order);
    ``edge_dims``: the space's edge types (those between read types are used); ``anchor``: the
    node type of the encoding's ``nodes`` (default: the first)."""

    def __init__(
        self,
        node_dims: dict[str, int],
        edge_dims: dict[str, int | None],
        hidden: int,
        layers: int,
        pool: str,
        globals_dim: int = 0,
        anchor: str | None = None,
    ):
        super().__init__()
        from torch_geometric.nn import GINEConv, HeteroConv, SAGEConv

        self.node_types = list(node_dims)
        self.edge_types = [r for r in edge_dims if all(e in node_dims for e in edge_ends(r))]
        self.anchor = anchor if anchor is not None else self.node_types[0]
        self.hidden, self.pool, self.globals_dim = hidden, pool, globals_dim
        self.out_dim = hidden * POOLS[pool] * len(self.node_types) + globals_dim
        self.inp = nn.ModuleList(nn.Linear(node_dims[t], hidden) for t in self.node_types)
        # HeteroConv keys are aliases ("t0", "r1", ...): type names may clash with ModuleDict
        # attributes or PyG's "___" tuple-key encoding (a name ending in "_").
        self._alias = {t: f"t{i}" for i, t in enumerate(self.node_types)}
        self._keys = {
            r: (self._alias[edge_ends(r)[0]], f"r{i}", self._alias[edge_ends(r)[1]])
            for i, r in enumerate(self.edge_types)
        }
        self._featured = [r for r in self.edge_types if edge_dims[r] is not None]

        def conv(r: str) -> nn.Module:
            dim = edge_dims[r]
            if dim is None:
                return SAGEConv((hidden, hidden), hidden)
            return GINEConv(mlp(hidden, hidden, hidden), edge_dim=dim)

        with warnings.catch_warnings():  # source-only node types: updated by pooling only
            warnings.filterwarnings("ignore", message=".*do not get updated during message passing.*")
            self.convs = nn.ModuleList(
                HeteroConv({self._keys[r]: conv(r) for r in self.edge_types}, aggr="sum")
                for _ in range(layers if self.edge_types else 0)
            )

    def forward(self, obs: dict[str, torch.Tensor]) -> GraphEncoding:
        dtype = cast(nn.Linear, self.inp[0]).weight.dtype
        h = {
            self._alias[t]: torch.relu(lin(_need(obs, f"x:{t}").to(dtype)))
            for t, lin in zip(self.node_types, self.inp)
        }
        if self.convs:
            edges = {self._keys[r]: _need(obs, f"edge_index:{r}").long() for r in self.edge_types}
            attrs = {self._keys[r]: _need(obs, f"edge_attr:{r}").to(dtype) for r in self._featured}
            for layer in self.convs:
                msgs = layer(h, edges, edge_attr_dict=attrs) if attrs else layer(h, edges)
                h = {a: (v + torch.relu(msgs[a]) if a in msgs else v) for a, v in h.items()}
        index = {t: self._index(obs, t) for t in self.node_types}
        num_graphs = index[self.anchor][1].numel() - 1
        pooled = []
        for t in self.node_types:
            ptr = index[t][1]
            if ptr.numel() - 1 != num_graphs:
                raise ValueError(
                    f"TypedGraphEncoder: ptr:{t} must have B+1 = {num_graphs + 1} entries, as "
                    f"ptr:{self.anchor} (found {ptr.numel()}). Every node type's ptr counts all B graphs."
                )
            pooled.append(pool_nodes(h[self._alias[t]], index[t][0], num_graphs, self.pool))
        graphs = with_globals(torch.cat(pooled, dim=-1), obs, self.globals_dim, "TypedGraphEncoder")
        batch, ptr = index[self.anchor]
        return GraphEncoding(h[self._alias[self.anchor]], graphs, batch, ptr)

    @staticmethod
    def _index(obs: dict[str, torch.Tensor], t: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch [sumN_t], ptr [B+1]) of node type ``t`` (``batch`` rebuilt from ``ptr`` if absent)."""
        ptr = _need(obs, f"ptr:{t}").long()
        batch = obs.get(f"batch:{t}")
        if batch is None:
            counts = ptr[1:] - ptr[:-1]
            batch = torch.repeat_interleave(torch.arange(counts.numel(), device=ptr.device), counts)
        return batch.long(), ptr
