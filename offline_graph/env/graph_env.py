"""A toy environment whose observations are random graphs of varying size.

Every step shows a fresh graph. Each node has a color ``c in 0..k-1`` (one-hot in the first
``k`` node features, the rest is noise). The correct action is the color with the most
*same-colored* edges (both endpoints of that color), see :func:`correct_action`: a pure
function of the observation that a message-passing GNN can compute exactly but a model that
only sees the bag of node features cannot (the node colors are drawn independently of it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.spaces import GraphInstance

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict, graph_to_dict

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# Heavy tail of the node count: Pareto(scale=_TAIL_SCALE * lambda, shape=_TAIL_ALPHA).
# With the defaults (lambda=24, tail_prob=0.05): mean ~29, p99 ~120, N == n_max ~1 in 2000.
_TAIL_SCALE = 2.5
_TAIL_ALPHA = 2.2
# Fraction of the edges planted among the nodes of the hidden color c*.
_PLANTED_FRACTION = 0.25


def _quantize(noise: np.ndarray) -> np.ndarray:
    """Noise rounded to multiples of 1/8: carries no information either way, and recorded
    files compress ~3x better (sample_data stays small)."""
    return np.round(noise * 8.0) / np.float32(8.0)


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Settings of :class:`GraphEnv` (all sizes are per step unless stated)."""

    num_features: int = 16
    """F, node feature size: one-hot color (``num_actions`` columns) then standard normal
    noise. Must be greater than ``num_actions``."""
    edge_dim: int = 2
    """D, edge feature size (pure noise). 0 means no edge features: the observation space
    then has ``edge_space=None``. Note gymnasium's ``Graph.contains`` rejects any instance
    with edges when ``edge_space`` is None, so ``check_env`` only passes with ``edge_dim>=1``."""
    num_actions: int = 4
    """k, the number of discrete actions, which is also the number of node colors."""
    poisson_lambda: float = 24.0
    """Node count is ``1 + Poisson(poisson_lambda)`` in the bulk of the distribution."""
    tail_prob: float = 0.05
    """Probability that the node count comes from a heavy (Pareto) tail instead, with scale
    ``2.5 * poisson_lambda`` and shape 2.2 (median ~80 with the defaults)."""
    n_max: int = 512
    """Node counts are clipped to ``[1, n_max]``."""
    edges_per_node: float = 4.0
    """Directed edges per node in total: ``E = round(edges_per_node * N)``."""
    max_steps: int = 50
    """The episode is truncated after this many steps."""
    hazard: float = 0.02
    """Per-step probability that the episode terminates whatever the action."""
    max_mistakes: int = 3
    """The episode terminates once this many wrong actions were taken."""

    def __post_init__(self) -> None:
        def bad(name: str, expected: str, hint: str) -> ConfigError:
            return ConfigError(
                f"EnvConfig: {name} must be {expected} (found {getattr(self, name)!r}). {hint}"
            )

        if int(self.num_actions) < 1:
            raise bad("num_actions", ">= 1", "It is the number of actions and node colors.")
        if int(self.num_features) <= int(self.num_actions):
            raise bad(
                "num_features",
                f"> num_actions={self.num_actions}",
                "Node features are a one-hot color of size num_actions followed by noise; "
                "raise num_features or lower num_actions.",
            )
        if int(self.edge_dim) < 0:
            raise bad("edge_dim", ">= 0", "Use 0 for edges without features.")
        if not float(self.poisson_lambda) >= 0:
            raise bad("poisson_lambda", ">= 0", "It is the mean node count minus one.")
        if not 0.0 <= float(self.tail_prob) <= 1.0:
            raise bad("tail_prob", "in [0, 1]", "It is a probability.")
        if int(self.n_max) < 1:
            raise bad("n_max", ">= 1", "Every graph has at least one node.")
        if not float(self.edges_per_node) >= 0:
            raise bad("edges_per_node", ">= 0", "Use 0 for graphs without edges.")
        if int(self.max_steps) < 1:
            raise bad("max_steps", ">= 1", "It is the truncation horizon.")
        if not 0.0 <= float(self.hazard) <= 1.0:
            raise bad("hazard", "in [0, 1]", "It is a per-step probability.")
        if int(self.max_mistakes) < 1:
            raise bad("max_mistakes", ">= 1", "The episode ends after this many wrong actions.")


def correct_action(obs: GraphDict | GraphInstance, k: int) -> int:
    """The correct action for one observation: the color with the most same-colored edges.

    A node's color is ``argmax(x[:, :k])``; an edge counts for color ``c`` when both its
    endpoints have color ``c``. Ties (including a graph without such edges) go to the lowest
    color index. ``obs`` is the dict layout (``x``, ``edge_index [2,E]``) or a GraphInstance.
    """
    if isinstance(obs, GraphInstance):
        obs = graph_to_dict(obs)
    x = np.asarray(obs["x"])
    edge_index = np.asarray(obs["edge_index"]).reshape(2, -1)
    if x.shape[0] == 0 or edge_index.shape[1] == 0:
        return 0
    color = np.argmax(x[:, :k], axis=1)
    src_c, dst_c = color[edge_index[0]], color[edge_index[1]]
    counts = np.bincount(src_c[src_c == dst_c], minlength=k)
    return int(np.argmax(counts))


_ConfigT = TypeVar("_ConfigT", bound="DataclassInstance")


def resolve_config(owner: str, cls: type[_ConfigT], config: Any, overrides: dict[str, Any]) -> _ConfigT:
    """``config`` (dataclass, mapping or None) with keyword ``overrides`` applied."""
    if config is None:
        config = cls()
    elif isinstance(config, Mapping):
        overrides = {**dict(config), **overrides}
        config = cls()
    elif not isinstance(config, cls):
        raise ConfigError(
            f"{owner}: config must be a {cls.__name__}, a mapping or None "
            f"(found {type(config).__name__}). Pass {cls.__name__}(...) or keyword overrides."
        )
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ConfigError(
            f"{owner}: config keys must be {cls.__name__} fields (found unknown {unknown}). "
            f"Known fields: {sorted(fields)}."
        )
    return dataclasses.replace(config, **overrides) if overrides else config


class GraphEnv(gym.Env):
    """Each step shows a random graph; reward 1 for the :func:`correct_action`, else 0.

    ``GraphEnv(config=None, **overrides)``: ``config`` is an :class:`EnvConfig`, a mapping of
    its fields (e.g. RLlib's ``env_config``) or None; ``overrides`` replace single fields.
    Observations are ``GraphInstance(nodes [N,F] float32, edges [E,D] float32 | None,
    edge_links [E,2] int64)``; use ``graph_to_dict(obs, env.edge_dim)`` for the dict layout.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (as gymnasium.Env)

    def __init__(
        self,
        config: EnvConfig | Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        config = resolve_config("GraphEnv", EnvConfig, config, overrides)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(
                f"GraphEnv: render_mode must be None (found {render_mode!r}). "
                "This environment does not render."
            )
        self.config = config
        self.render_mode = render_mode
        cfg = self.config
        self.num_actions = int(cfg.num_actions)
        self.edge_dim: int | None = int(cfg.edge_dim) if cfg.edge_dim > 0 else None
        self.observation_space = gym.spaces.Graph(
            node_space=gym.spaces.Box(-np.inf, np.inf, (int(cfg.num_features),), np.float32),
            edge_space=None
            if self.edge_dim is None
            else gym.spaces.Box(-np.inf, np.inf, (self.edge_dim,), np.float32),
        )
        self.action_space = gym.spaces.Discrete(self.num_actions)
        self._t = 0
        self._mistakes = 0
        self._correct = 0
        self._obs: GraphInstance | None = None

    # ----------------------------------------------------------------- generation
    def _num_nodes(self) -> int:
        cfg, rng = self.config, self.np_random
        if rng.random() < cfg.tail_prob:
            scale = max(_TAIL_SCALE * cfg.poisson_lambda, 1.0)
            n = round(scale * (1.0 + rng.pareto(_TAIL_ALPHA)))
        else:
            n = 1 + int(rng.poisson(cfg.poisson_lambda))
        return int(min(max(n, 1), cfg.n_max))

    def _generate(self) -> tuple[GraphInstance, dict[str, int]]:
        cfg, rng, k = self.config, self.np_random, self.num_actions
        n = self._num_nodes()
        color = rng.integers(0, k, size=n)
        x = np.empty((n, cfg.num_features), dtype=np.float32)
        x[:, :k] = 0.0
        x[np.arange(n), color] = 1.0
        x[:, k:] = _quantize(rng.standard_normal((n, cfg.num_features - k), dtype=np.float32))
        hidden = int(rng.integers(0, k))

        num_edges = round(cfg.edges_per_node * n) if n > 1 else 0
        members = np.flatnonzero(color == hidden)
        m = members.shape[0]
        n_planted = round(_PLANTED_FRACTION * num_edges) if m >= 2 else 0
        n_uniform = num_edges - n_planted
        # src != dst: offset the source by a uniform non-zero amount (mod the pool size).
        src = rng.integers(0, n, size=n_uniform)
        dst = (src + rng.integers(1, n, size=n_uniform)) % n if n > 1 else src
        if n_planted:
            ps = rng.integers(0, m, size=n_planted)
            pd = (ps + rng.integers(1, m, size=n_planted)) % m
            src = np.concatenate([src, members[ps]])
            dst = np.concatenate([dst, members[pd]])
        order = rng.permutation(num_edges)
        edge_links = np.stack([src[order], dst[order]], axis=1).astype(np.int64)
        edges = (
            None
            if self.edge_dim is None
            else _quantize(rng.standard_normal((num_edges, self.edge_dim), dtype=np.float32))
        )
        obs = GraphInstance(nodes=x, edges=edges, edge_links=edge_links)
        self._correct = correct_action({"x": x, "edge_index": edge_links.T}, k)
        info = {"correct_action": self._correct, "num_nodes": n, "num_edges": num_edges}
        return obs, info

    # ----------------------------------------------------------------- gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[GraphInstance, dict[str, int]]:
        super().reset(seed=seed)
        self._t = 0
        self._mistakes = 0
        obs, info = self._generate()
        self._obs = obs
        return obs, info

    def step(self, action: Any) -> tuple[GraphInstance, float, bool, bool, dict[str, int]]:
        if self._obs is None:
            raise RuntimeError("GraphEnv: reset() must be called before step().")
        a = int(action)
        if not 0 <= a < self.num_actions:
            raise ValueError(
                f"GraphEnv.step: action must be in [0, {self.num_actions}) (found {action!r}). "
                "Actions are node colors."
            )
        reward = 1.0 if a == self._correct else 0.0
        if reward == 0.0:
            self._mistakes += 1
        self._t += 1
        hazard_hit = bool(self.np_random.random() < self.config.hazard)
        terminated = self._mistakes >= self.config.max_mistakes or hazard_hit
        truncated = (not terminated) and self._t >= self.config.max_steps
        obs, info = self._generate()
        self._obs = obs
        return obs, reward, terminated, truncated, info

    def render(self) -> None:
        return None
