"""``GNNModule``: an RLlib (new API stack) TorchRLModule over PyG-batched graph observations.

``batch[Columns.OBS]`` is one disjoint-union graph of B observations (no padding)::

    x float32 [sumN, F], edge_index int64 [2, sumE] (global node ids),
    edge_attr float32 [sumE, D] (only with edge features), batch int64 [sumN], ptr int64 [B+1]

Build it with ``RLModuleSpec(module_class=GNNModule, observation_space=Graph(...),
action_space=Discrete(k), model_config={...})``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI, ValueFunctionAPI
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from torch import nn

from offline_graph.data.errors import ConfigError
from offline_graph.data.graph import space_sizes
from offline_graph.rllib.gnn_layers import POOLS, GraphEncoder, GraphEncoding, mlp
from offline_graph.rllib.settings import CONVS
from offline_graph.rllib.selection import SelectionHead, TorchChoiceCategorical
from offline_graph.data.spaces import selection_level

_WHERE = "GNNModule model_config"


def resolve_gnn_config(model_config: Any, observation_space: gym.Space) -> dict[str, Any]:
    """Fill in defaults and validate; returns the keys documented on :class:`GNNModule`."""
    if dataclasses.is_dataclass(model_config) and not isinstance(model_config, type):
        model_config = dataclasses.asdict(model_config)
    mc = dict(model_config or {})
    _, edge_dim = space_sizes(observation_space)
    bag = bool(mc.get("bag_of_nodes", False))
    cfg = {
        "hidden": mc.get("hidden", 64),
        "layers": mc.get("layers", 2),
        "conv": mc.get("conv") or ("gine" if edge_dim is not None else "gin"),
        "pool": mc.get("pool") or ("mean" if bag else "meanmax"),
        "head_hidden": mc.get("head_hidden", 64),
        "value_head": bool(mc.get("value_head", float(mc.get("beta") or 0.0) > 0.0)),
        "bag_of_nodes": bag,
    }
    for key, lowest in (("hidden", 1), ("layers", 0), ("head_hidden", 1)):
        val = cfg[key]
        if isinstance(val, bool) or not isinstance(val, int) or val < lowest:
            raise ConfigError(f"{_WHERE}: {key!r} must be an int >= {lowest} (found {val!r}).")
    if cfg["conv"] not in CONVS:
        raise ConfigError(f"{_WHERE}: 'conv' must be one of {CONVS} (found {cfg['conv']!r}).")
    if cfg["pool"] not in POOLS:
        raise ConfigError(f"{_WHERE}: 'pool' must be one of {tuple(POOLS)} (found {cfg['pool']!r}).")
    if cfg["conv"] == "gine" and edge_dim is None and not bag:
        raise ConfigError(
            f"{_WHERE}: 'conv' must not be 'gine' when the observation space has no edge "
            "features (found conv='gine', edge_space=None). Use 'gin' (the default without "
            "edge features), or give the Graph space an edge_space=Box(D)."
        )
    return cfg


class GraphLogitsHead(nn.Module):
    """``Discrete(k)`` policy head: graph embedding [B, E] -> logits [B, k]."""

    def __init__(self, in_dim: int, head_hidden: int, num_actions: int):
        super().__init__()
        self.mlp = mlp(in_dim, head_hidden, num_actions)

    def forward(self, enc: GraphEncoding, obs: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.mlp(enc.graphs)


def build_policy_head(
    action_space: gym.Space, encoder: GraphEncoder, head_hidden: int, edge_dim: int | None = None
) -> nn.Module:
    """Policy head for ``action_space``; every head maps ``(GraphEncoding, obs)`` to
    ``ACTION_DIST_INPUTS``: ``Discrete(k)`` -> logits [B, k]; ``NodeAction`` / ``EdgeAction``
    -> masked log-probabilities [B, M] (:class:`~offline_graph.rllib.selection.SelectionHead`).
    """
    level = selection_level(action_space)
    if level is not None:
        return SelectionHead(level, encoder.hidden, encoder.out_dim, edge_dim, head_hidden)
    if isinstance(action_space, gym.spaces.Discrete):
        if int(action_space.start) != 0:
            raise ConfigError(
                f"GNNModule action_space: Discrete start must be 0 (found "
                f"start={int(action_space.start)}). RLlib's Categorical samples 0..k-1."
            )
        return GraphLogitsHead(encoder.out_dim, head_hidden, int(action_space.n))
    raise ConfigError(
        f"GNNModule action_space: action space must be gymnasium.spaces.Discrete, "
        f"offline_graph.NodeAction or offline_graph.EdgeAction (found {action_space!r})."
    )


class GNNModule(TorchRLModule, ValueFunctionAPI, InferenceOnlyAPI):
    """Graph-level policy (and optional value) network over PyG-batched graph observations.

    Encoder: ``x`` -> Linear(F, hidden) -> ReLU -> ``layers`` x residual
    ``h + relu(conv(h, edge_index[, edge_attr]))`` -> pooling per graph -> embedding [B, E]
    (``E = hidden``, or ``2 * hidden`` for ``meanmax``). Policy head: MLP(E, head_hidden, k).
    Value head (only when enabled): MLP(E, head_hidden, 1), sharing the encoder.

    ``model_config`` keys (all optional; other keys, e.g. RLlib's, are ignored):

    - ``hidden`` (64): node embedding width.
    - ``layers`` (2): number of message-passing layers (0: projection + pooling only).
    - ``conv`` ("gine" if the observation space has edge features, else "gin"): one of
      "gcn", "sage", "gin", "gine". Only "gine" reads ``edge_attr`` (via ``edge_dim=D``);
      the others use the edges' connectivity only. "gine" without edge features raises
      :class:`~offline_graph.data.errors.ConfigError` (a ValueError).
    - ``pool`` ("meanmax"; "mean" when ``bag_of_nodes``): "mean", "max", "sum", or "meanmax"
      (concat of mean and max pooling). Pooling uses ``size=B = ptr.numel() - 1``.
    - ``head_hidden`` (64): hidden width of the policy / value head MLPs.
    - ``value_head`` (True iff ``model_config.get("beta", 0) > 0``): build the value head
      used by MARWIL's loss (``compute_values``). Never build a head the loss does not use
      (an unused head breaks DDP with several learners). NOTE: RLlib 2.60's MARWILConfig
      does NOT put ``beta`` into ``model_config`` (its ``_model_auto_keys`` is dead code),
      so pass ``model_config={"beta": config.beta, ...}`` or ``value_head=True`` for MARWIL.
    - ``bag_of_nodes`` (False): ignore edges entirely: per-node Linear layers of the same
      depth instead of convs, then pooling (structure-blind baseline).

    Outputs: ``_forward`` -> ``{ACTION_DIST_INPUTS: [B, k], EMBEDDINGS: [B, E]}``;
    inference/exploration drop EMBEDDINGS (EnvRunners would store it in every episode step).
    The action distribution is RLlib's default for Discrete (TorchCategorical).

    Node / edge selection (``action_space=NodeAction(max_nodes)`` / ``EdgeAction(max_edges)``):
    the policy head scores every node (``MLP([h_v, g_b])``) or every edge
    (``MLP([h_src, h_dst, g_b, edge_attr])``), applies ``obs["action_mask"]`` (bool [sumN] /
    [sumE]; absent = all allowed) and a segment log-softmax per graph;
    ``ACTION_DIST_INPUTS`` is ``[B, M]`` (M = most choices of any graph in the batch, filler
    probability 0) and the action distribution is
    :class:`~offline_graph.rllib.selection.TorchChoiceCategorical` for training, inference
    and exploration. Actions are local indices ``0..N_b-1`` (``0..E_b-1``).
    """

    def setup(self) -> None:
        if self.observation_space is None or self.action_space is None:
            raise ConfigError(
                "GNNModule: observation_space and action_space must be set (found "
                f"{self.observation_space!r}, {self.action_space!r}). Give them in "
                "config.environment(...) or in the RLModuleSpec."
            )
        cfg = resolve_gnn_config(self.model_config, self.observation_space)
        self.gnn_config = cfg
        in_dim, edge_dim = space_sizes(self.observation_space)
        self._encoder = GraphEncoder(
            in_dim,
            cfg["hidden"],
            cfg["layers"],
            cfg["conv"],
            cfg["pool"],
            edge_dim,
            bag_of_nodes=cfg["bag_of_nodes"],
        )
        self._pi_head = build_policy_head(self.action_space, self._encoder, cfg["head_hidden"], edge_dim)
        # On inference-only copies (EnvRunners) TorchRLModule deletes it again after setup().
        self._vf_head = mlp(self._encoder.out_dim, cfg["head_hidden"], 1) if cfg["value_head"] else None

    def encode(self, batch: dict[str, Any]) -> GraphEncoding:
        """Run the graph encoder on ``batch[Columns.OBS]``."""
        return self._encoder(batch[Columns.OBS])

    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        enc = self.encode(batch)
        return {
            Columns.ACTION_DIST_INPUTS: self._pi_head(enc, batch[Columns.OBS]),
            Columns.EMBEDDINGS: enc.graphs,
        }

    def _forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        out = super()._forward_inference(batch, **kwargs)  # no_grad + _forward
        out.pop(Columns.EMBEDDINGS, None)
        return out

    def _forward_exploration(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        out = super()._forward_exploration(batch, **kwargs)  # no_grad + _forward
        out.pop(Columns.EMBEDDINGS, None)
        return out

    def compute_values(self, batch: dict[str, Any], embeddings: Any | None = None) -> torch.Tensor:
        """Values [B]; reuses ``embeddings`` (graph embeddings from ``_forward``) when given."""
        vf_head = getattr(self, "_vf_head", None)
        if vf_head is None:
            why = "inference_only=True" if self.inference_only else "value_head=False"
            raise ConfigError(
                f"{_WHERE}: 'value_head' must be enabled to compute values (found {why}). "
                "Pass model_config={'beta': <MARWIL beta>} or {'value_head': True}; RLlib 2.60 "
                "does not put MARWIL's beta into model_config by itself."
            )
        if embeddings is None:
            embeddings = self.encode(batch).graphs
        return vf_head(embeddings).squeeze(-1)

    def _choice_dist_cls(self) -> Any:
        return TorchChoiceCategorical if selection_level(self.action_space) else None

    def get_train_action_dist_cls(self) -> Any:
        return self._choice_dist_cls() or super().get_train_action_dist_cls()

    def get_inference_action_dist_cls(self) -> Any:
        return self._choice_dist_cls() or super().get_inference_action_dist_cls()

    def get_exploration_action_dist_cls(self) -> Any:
        return self._choice_dist_cls() or super().get_exploration_action_dist_cls()

    def get_non_inference_attributes(self) -> list[str]:
        return ["_vf_head"] if self.gnn_config["value_head"] else []
