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
from offline_graph.data.graphs.globals import globals_size
from offline_graph.data.graphs.graph import space_sizes
from offline_graph.data.graphs.typed import typed_space
from offline_graph.rllib.core.critic import QNetwork, value_train_outputs
from offline_graph.rllib.core.gnn_layers import POOLS, GraphEncoder, GraphEncoding, mlp
from offline_graph.rllib.core.hetero import (
    TypedGraphEncoder,
    action_node_type,
    refuse_node_types_key,
    resolve_typed_config,
    typed_encoder_of,
)
from offline_graph.rllib.core.memory import MEMORY_KINDS, build_temporal, is_run_layout
from offline_graph.rllib.core.settings import CONVS
from offline_graph.rllib.core.selection import SelectionHead, TorchChoiceCategorical
from offline_graph.data.graphs.spaces import selection_level

_WHERE = "GNNModule model_config"
VALUE_KINDS = (None, "iql", "cql")
"""``model_config["value_based"]``: none, IQL (policy + twin Q + V), CQL (Q is the policy)."""


def resolve_gnn_config(model_config: Any, observation_space: gym.Space) -> dict[str, Any]:
    """Fill in defaults and validate; returns the keys documented on :class:`GNNModule`."""
    if dataclasses.is_dataclass(model_config) and not isinstance(model_config, type):
        model_config = dataclasses.asdict(model_config)
    mc = dict(model_config or {})
    typed = typed_space(observation_space)
    edge_dim = None if typed is not None else space_sizes(observation_space)[1]
    conv = "sage" if typed is not None else "gine" if edge_dim is not None else "gin"
    bag = bool(mc.get("bag_of_nodes", False))
    cfg = {
        "hidden": mc.get("hidden", 64),
        "layers": mc.get("layers", 2),
        "conv": mc.get("conv") or conv,
        "pool": mc.get("pool") or ("mean" if bag else "meanmax"),
        "head_hidden": mc.get("head_hidden", 64),
        "value_head": bool(mc.get("value_head", float(mc.get("beta") or 0.0) > 0.0)),
        "bag_of_nodes": bag,
        "frame_stack": mc.get("frame_stack", 1),
        "memory": mc.get("memory"),
        "value_based": mc.get("value_based"),
        "twin_q": bool(mc.get("twin_q", True)),
        "globals": bool(mc.get("globals", True)),
    }
    ints = [("hidden", 1), ("layers", 0), ("head_hidden", 1), ("frame_stack", 1)]
    if mc.get("max_seq_len") is not None:  # RLlib's key; the data path cuts runs with it
        cfg["max_seq_len"] = mc["max_seq_len"]
        ints.append(("max_seq_len", 1))
    for key, lowest in ints:
        val = cfg[key]
        if isinstance(val, bool) or not isinstance(val, int) or val < lowest:
            raise ConfigError(f"{_WHERE}: {key!r} must be an int >= {lowest} (found {val!r}).")
    if cfg["memory"] not in MEMORY_KINDS:
        raise ConfigError(
            f"{_WHERE}: 'memory' must be one of {MEMORY_KINDS} (found {cfg['memory']!r}). "
            "'gru' keeps a state per graph, 'node_gru' one per node."
        )
    if cfg["memory"] is not None and cfg["frame_stack"] > 1:
        raise ConfigError(
            f"{_WHERE}: 'frame_stack' must be 1 when 'memory' is set (found "
            f"frame_stack={cfg['frame_stack']}, memory={cfg['memory']!r}). Use one kind of memory."
        )
    if cfg["value_based"] not in VALUE_KINDS:
        raise ConfigError(
            f"{_WHERE}: 'value_based' must be one of {VALUE_KINDS} (found {cfg['value_based']!r}). "
            "offline_graph.configure sets it for IQLConfig / CQLConfig."
        )
    if cfg["value_based"] and (cfg["memory"] or cfg["frame_stack"] > 1 or cfg["value_head"]):
        raise ConfigError(
            f"{_WHERE}: 'memory', 'frame_stack' > 1 and 'value_head' must be unset with "
            f"value_based={cfg['value_based']!r} (found memory={cfg['memory']!r}, "
            f"frame_stack={cfg['frame_stack']}, value_head={cfg['value_head']}). IQL / CQL train "
            "memoryless modules with their own Q and V networks."
        )
    if cfg["conv"] not in CONVS:
        raise ConfigError(f"{_WHERE}: 'conv' must be one of {CONVS} (found {cfg['conv']!r}).")
    if cfg["pool"] not in POOLS:
        raise ConfigError(f"{_WHERE}: 'pool' must be one of {tuple(POOLS)} (found {cfg['pool']!r}).")
    if typed is not None:  # `conv` is not read: SAGEConv / GINEConv per edge type
        return resolve_typed_config(cfg, mc, typed)
    refuse_node_types_key(mc)
    if cfg["conv"] == "gine" and edge_dim is None and not bag:
        raise ConfigError(
            f"{_WHERE}: 'conv' must not be 'gine' when the observation space has no edge "
            "features (found conv='gine', edge_space=None). Use 'gin' (the default without "
            "edge features), or give the Graph space an edge_space=Box(D)."
        )
    return cfg


def encoder_of(cfg: dict[str, Any], in_dim: int, edge_dim: int | None, globals_dim: int = 0) -> GraphEncoder:
    """A fresh :class:`GraphEncoder` as the resolved config ``cfg`` (:func:`resolve_gnn_config`)
    says, for node features of size ``in_dim``, edge features of size ``edge_dim`` and
    graph-level features of size ``globals_dim``."""
    return GraphEncoder(
        in_dim,
        cfg["hidden"],
        cfg["layers"],
        cfg["conv"],
        cfg["pool"],
        edge_dim,
        bag_of_nodes=cfg["bag_of_nodes"],
        globals_dim=globals_dim,
    )


class GraphLogitsHead(nn.Module):
    """``Discrete(k)`` policy head: graph embedding [B, E] -> logits [B, k]."""

    def __init__(self, in_dim: int, head_hidden: int, num_actions: int):
        super().__init__()
        self.mlp = mlp(in_dim, head_hidden, num_actions)

    def forward(self, enc: GraphEncoding, obs: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.mlp(enc.graphs)


def build_policy_head(
    action_space: gym.Space,
    encoder: GraphEncoder | TypedGraphEncoder,
    head_hidden: int,
    edge_dim: int | None = None,
    graph_dim: int | None = None,
) -> nn.Module:
    """Policy head for ``action_space``; every head maps ``(GraphEncoding, obs)`` to
    ``ACTION_DIST_INPUTS``: ``Discrete(k)`` -> logits [B, k]; ``NodeAction`` / ``EdgeAction``
    -> masked log-probabilities [B, M] (:class:`~offline_graph.rllib.core.selection.SelectionHead`).
    ``graph_dim``: width of the graph embedding the head reads (default ``encoder.out_dim``).
    """
    level = selection_level(action_space)
    graph_dim = encoder.out_dim if graph_dim is None else graph_dim
    if level is not None:
        return SelectionHead(level, encoder.hidden, graph_dim, edge_dim, head_hidden)
    if isinstance(action_space, gym.spaces.Discrete):
        if int(action_space.start) != 0:
            raise ConfigError(
                f"GNNModule action_space: Discrete start must be 0 (found "
                f"start={int(action_space.start)}). RLlib's Categorical samples 0..k-1."
            )
        return GraphLogitsHead(graph_dim, head_hidden, int(action_space.n))
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
    - ``globals`` (True): with a ``Dict`` observation space (a graph and flat parts), read the
      parts (``obs["globals"] [B, G]``, concatenated to the pooled embedding, which node and
      edge heads read through ``batch``); False ignores them (the graph-only baseline).

    Outputs: ``_forward`` -> ``{ACTION_DIST_INPUTS: [B, k], EMBEDDINGS: [B, E]}``;
    inference/exploration drop EMBEDDINGS (EnvRunners would store it in every episode step).
    The action distribution is RLlib's default for Discrete (TorchCategorical).

    Node / edge selection (``action_space=NodeAction(max_nodes)`` / ``EdgeAction(max_edges)``):
    the policy head scores every node (``MLP([h_v, g_b])``) or every edge
    (``MLP([h_src, h_dst, g_b, edge_attr])``), applies ``obs["action_mask"]`` (bool [sumN] /
    [sumE]; absent = all allowed) and a segment log-softmax per graph;
    ``ACTION_DIST_INPUTS`` is ``[B, M]`` (M = most choices of any graph in the batch, filler
    probability 0) and the action distribution is
    :class:`~offline_graph.rllib.core.selection.TorchChoiceCategorical` for training, inference
    and exploration. Actions are local indices ``0..N_b-1`` (``0..E_b-1``).

    Typed graphs (``observation_space`` a :class:`~offline_graph.data.graphs.typed.TypedGraph` or a
    ``Dict`` of one and flat parts): :class:`~offline_graph.rllib.core.hetero.TypedGraphEncoder`
    (per-type projections, ``HeteroConv`` of SAGEConv / GINEConv per edge type; ``conv`` is not
    read); ``node_types`` (all) lists the node types read (and the edges among them); actions are
    ``Discrete(k)`` or ``NodeAction(max_nodes, node_type=t)``; ``memory``, ``frame_stack`` > 1,
    ``bag_of_nodes`` and ``EdgeAction`` raise :class:`~offline_graph.data.errors.ConfigError`.

    Memory over time (:mod:`offline_graph.rllib.core.memory`; keys ``frame_stack`` (int >= 1,
    default 1), ``memory`` (None, "gru", "node_gru"; not with ``frame_stack > 1``) and RLlib's
    ``max_seq_len`` (int >= 1, only validated here; the data path cuts runs with it)). A
    temporal layer sits between the encoder and the heads:

    - ``frame_stack = k``: the graph embedding is a learned combination (frame-position
      embedding, masked mean + masked max over the frames that exist, Linear 2E -> E) of the
      embeddings of this step's graph and the ``k - 1`` before it in its episode; node
      embeddings stay the current graph's.
    - ``memory="gru"``: graph state ``s = GRUCell(g, s_prev)`` of width E; heads read
      ``[g, s]`` (width 2E; so does the value head and ``EMBEDDINGS``).
    - ``memory="node_gru"``: node state ``n_v = GRUCell(h_v, n_prev(v))`` of width H; heads
      read ``n`` as node embeddings and the encoder's pooling over ``n`` as graph embedding.

    Training layout (``obs`` holds ``target``, from ``offline_graph.data.learning.sequences``): G graphs
    (whole runs: context + trained steps) with ``prev [G]``, ``seq_pos [G]``, ``node_prev
    [sumN]`` linking them over time and ``target [B]``; every head runs over all G graphs and
    the rows ``target`` are returned: ``ACTION_DIST_INPUTS [B, ...]``, ``EMBEDDINGS [B, E']``,
    ``compute_values [B]`` (also from those embeddings, as MARWIL calls it). Without
    ``target``, every graph is a target.

    Step layout (inference; no ``prev`` / ``target``): one graph per episode, RLlib's stateful
    API. ``get_initial_state()`` (no batch dim): frame_stack ``{"frames": zeros [k-1, E],
    "valid": zeros [k-1]}``; gru ``{"h": zeros [E]}``; node_gru ``{"node_h": zeros [0, H]}``
    (0 rows = no previous state). ``batch[STATE_IN]`` holds them batched (``[B, k-1, E]``,
    ``[B, k-1]``; ``[B, E]``) except ``node_h``, which is ragged and given as ``[sumN, H]``
    already aligned to THIS batch's nodes by the caller (zeros for nodes without a previous
    state; 0 rows = zeros everywhere). Every forward returns ``STATE_OUT`` in the same layout
    (frames: this step's embedding shifted in, most recent first; ``node_h`` ``[sumN, H]`` in
    this step's node layout). When a graph's node count N changes within an episode, node_gru
    has no node correspondence: the caller gives zeros for that graph's nodes, so its state
    is rebuilt from zeros for that step's nodes (as ``node_prev = -1`` does in training). No
    ``STATE_IN`` = initial states. ``is_stateful()`` is True only with memory / frame stack.
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
        space, act = self.observation_space, self.action_space
        if typed_space(space) is not None:  # hetero.py
            edge_dim = None
            new_encoder: Any = lambda: typed_encoder_of(cfg, space, act)  # noqa: E731
        else:
            action_node_type(act, None, None)  # refuses NodeAction(node_type=...)
            in_dim, edge_dim = space_sizes(space)
            globals_dim = globals_size(space) if cfg["globals"] else 0
            new_encoder = lambda: encoder_of(cfg, in_dim, edge_dim, globals_dim)  # noqa: E731
        self._encoder = new_encoder()
        self._memory = build_temporal(cfg, self._encoder.hidden, self._encoder.out_dim)
        graph_dim = self._encoder.out_dim if self._memory is None else self._memory.out_dim
        if cfg["value_based"] == "cql":  # the policy is the Q network's (masked) argmax
            build_policy_head(self.action_space, self._encoder, cfg["head_hidden"])  # checks the space
            self._q = QNetwork(self._encoder, self.action_space, edge_dim, cfg["head_hidden"])
            self._q_target = self._q.frozen_copy()
        else:
            self._pi_head = build_policy_head(
                self.action_space, self._encoder, cfg["head_hidden"], edge_dim, graph_dim=graph_dim
            )
        if cfg["value_based"] == "iql":
            critic_encoder = new_encoder()
            num_q = 2 if cfg["twin_q"] else 1
            self._critic = QNetwork(
                critic_encoder, self.action_space, edge_dim, cfg["head_hidden"], num_q, True
            )
            self._critic_target = self._critic.frozen_copy()
        # On inference-only copies (EnvRunners) TorchRLModule deletes it again after setup().
        self._vf_head = mlp(graph_dim, cfg["head_hidden"], 1) if cfg["value_head"] else None

    def get_initial_state(self) -> dict[str, torch.Tensor]:
        """Per-episode initial state (no batch dim); ``{}`` without memory / frame stack."""
        return {} if self._memory is None else self._memory.initial_state()

    def encode(self, batch: dict[str, Any]) -> GraphEncoding:
        """Encoder + temporal layer over all G graphs of ``batch[Columns.OBS]``."""
        return self._encode_with_state(batch)[0]

    def _encode_with_state(self, batch: dict[str, Any]) -> tuple[GraphEncoding, dict[str, Any] | None]:
        obs = batch[Columns.OBS]
        enc = self._encoder(obs)
        if self._memory is None:
            return enc, None
        if is_run_layout(obs):
            return self._memory.forward_runs(enc, obs), None
        return self._memory.forward_step(enc, batch.get(Columns.STATE_IN) or None)

    @staticmethod
    def _targets(batch: dict[str, Any], rows: torch.Tensor) -> torch.Tensor:
        target = batch[Columns.OBS].get("target")
        return rows if target is None else rows[torch.as_tensor(target, device=rows.device).long()]

    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        if self.gnn_config["value_based"] == "cql":
            enc, (q,) = self._q(batch[Columns.OBS])
            return {Columns.ACTION_DIST_INPUTS: self._targets(batch, q), Columns.EMBEDDINGS: enc.graphs}
        enc, state_out = self._encode_with_state(batch)
        out: dict[str, Any] = {
            Columns.ACTION_DIST_INPUTS: self._targets(batch, self._pi_head(enc, batch[Columns.OBS])),
            Columns.EMBEDDINGS: self._targets(batch, enc.graphs),
        }
        if state_out is not None:
            out[Columns.STATE_OUT] = state_out
        return out

    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        kind = self.gnn_config["value_based"]
        return value_train_outputs(self, batch) if kind else self._forward(batch, **kwargs)

    def forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        """TorchRLModule's, without its ``eval()`` / ``train()`` walk over the submodules when
        the module is in eval mode already (a ``GraphEnvRunner``'s module is)."""
        if self.training:
            return super().forward_inference(batch, **kwargs)
        return self._forward_inference(batch, **kwargs)

    def forward_exploration(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        """TorchRLModule's, without the mode walk in eval mode (as :meth:`forward_inference`)."""
        if self.training:
            return super().forward_exploration(batch, **kwargs)
        return self._forward_exploration(batch, **kwargs)

    def _forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        out = super()._forward_inference(batch, **kwargs)  # no_grad + _forward
        out.pop(Columns.EMBEDDINGS, None)
        return out

    def _forward_exploration(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        out = super()._forward_exploration(batch, **kwargs)  # no_grad + _forward
        out.pop(Columns.EMBEDDINGS, None)
        return out

    def compute_values(self, batch: dict[str, Any], embeddings: Any | None = None) -> torch.Tensor:
        """Values [B] (target rows); reuses ``embeddings`` (``EMBEDDINGS`` of ``_forward``)."""
        vf_head = getattr(self, "_vf_head", None)
        if vf_head is None:
            why = "inference_only=True" if self.inference_only else "value_head=False"
            raise ConfigError(
                f"{_WHERE}: 'value_head' must be enabled to compute values (found {why}). "
                "Pass model_config={'beta': <MARWIL beta>} or {'value_head': True}; RLlib 2.60 "
                "does not put MARWIL's beta into model_config by itself."
            )
        if embeddings is None:
            embeddings = self._targets(batch, self.encode(batch).graphs)
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
        kind = self.gnn_config["value_based"]
        if kind:
            return ["_q_target"] if kind == "cql" else ["_critic", "_critic_target"]
        return ["_vf_head"] if self.gnn_config["value_head"] else []

    def target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """(online, target) Q networks of a value-based module (updated by the learner)."""
        kind = self.gnn_config["value_based"]
        if kind == "cql":
            return [(self._q, self._q_target)]
        return [(self._critic, self._critic_target)] if kind == "iql" else []
