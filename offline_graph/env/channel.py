"""Channel (``"offline_graph/Channel-v0"``): the graph and a graph-level part decide together.

The observation is a ``Dict`` of a graph and flat parts (:mod:`offline_graph.data.graphs.globals`)::

    Dict({"graph": Graph(node_space=Box(4), edge_space=Box(1)),  # a chain of N typed nodes
          "channel": Discrete(3),                                # the node type asked for
          "clock": Box(0, 1, (1,))})                              # t / length

Each node has a type (features 0-2, one-hot; every type on at least one node) and a value in
[0, 1) (feature 3); edges carry a constant 1. The action is a node (``NodeAction(max_nodes)``);
it pays 1 when the node is of the ``channel`` type and has the largest value of that type,
else 0. Every step shows a fresh graph of ``min_nodes..max_nodes`` nodes and a fresh channel;
an episode is ``length`` steps. The expert (:func:`channel_expert`) takes that node. A policy
that reads only the graph cannot know the type asked for: it is right about a third of the
time (8 / 3 per episode of 8 steps), the expert always (8).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import GraphInstance

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.env.policies import RANDOM_ACTION_HINT, Policy, check_epsilon, check_name

TYPES = 3
"""Node types; a node's features are its type one-hot, then its value."""


@dataclasses.dataclass(frozen=True)
class ChannelConfig:
    """Settings of :class:`ChannelEnv`."""

    min_nodes: int = 4
    max_nodes: int = 8
    """Node counts are drawn uniformly in ``[min_nodes, max_nodes]``; the action space is
    ``NodeAction(max_nodes)``."""
    length: int = 8
    """Steps per episode (the last one terminates it)."""

    def __post_init__(self) -> None:
        def bad(name: str, expected: str, hint: str) -> ConfigError:
            return ConfigError(
                f"ChannelConfig: {name} must be {expected} (found {getattr(self, name)!r}). {hint}"
            )

        if int(self.min_nodes) < TYPES:
            raise bad("min_nodes", f">= {TYPES}", "Every type is on a node.")
        if int(self.max_nodes) < int(self.min_nodes):
            raise bad("max_nodes", f">= min_nodes={self.min_nodes}", "Node counts are drawn between them.")
        if int(self.length) < 1:
            raise bad("length", ">= 1", "It counts the steps of an episode.")


def best_node(x: np.ndarray, channel: int) -> int:
    """The node of type ``channel`` with the largest value (the rewarded action)."""
    return int(np.argmax(np.where(x[:, channel] > 0, x[:, TYPES], -1.0)))


def _parts(obs: Any) -> tuple[np.ndarray, int]:
    """(node features, channel) of an observation: the env's Dict, or a graph dict with the
    parts beside ``x`` (recorded episodes)."""
    graph = obs.get("graph", obs)
    x = graph.nodes if isinstance(graph, GraphInstance) else graph["x"]
    return np.asarray(x), int(np.asarray(obs["channel"]))


def channel_expert(epsilon: float = 0.0, rng: np.random.Generator | None = None) -> Policy:
    """The expert (:func:`best_node`); with probability ``epsilon`` a random node."""
    rng = rng or np.random.default_rng(0)

    def policy(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        x, channel = _parts(obs)
        if epsilon and rng.random() < epsilon:
            return int(rng.integers(len(x)))
        return best_node(x, channel)

    return policy


class ChannelEnv(gym.Env):
    """The task of the module docstring. ``ChannelEnv(config=None, **overrides)``."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (as gymnasium.Env)

    def __init__(self, config: ChannelConfig | Mapping[str, Any] | None = None, **overrides: Any) -> None:
        fields = dataclasses.asdict(config) if isinstance(config, ChannelConfig) else dict(config or {})
        self.config = ChannelConfig(**{**fields, **overrides})
        nodes = gym.spaces.Box(0.0, 1.0, (TYPES + 1,), np.float32)
        edges = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {
                "graph": gym.spaces.Graph(node_space=nodes, edge_space=edges),
                "channel": gym.spaces.Discrete(TYPES),
                "clock": gym.spaces.Box(0.0, 1.0, (1,), np.float32),
            }
        )
        self.action_space = NodeAction(self.config.max_nodes)
        self._t = 0
        self._x = np.zeros((0, TYPES + 1), np.float32)
        self._channel = 0

    def _observe(self) -> dict[str, Any]:
        rng = self.np_random
        n = int(rng.integers(self.config.min_nodes, self.config.max_nodes + 1))
        types = rng.permutation(np.concatenate([np.arange(TYPES), rng.integers(TYPES, size=n - TYPES)]))
        self._x = np.zeros((n, TYPES + 1), np.float32)
        self._x[np.arange(n), types] = 1.0
        self._x[:, TYPES] = rng.random(n)
        self._channel = int(rng.integers(TYPES))
        links = np.stack([np.arange(n - 1), np.arange(1, n)], axis=1).astype(np.int64)
        edges = np.ones((n - 1, 1), np.float32)
        return {
            "graph": GraphInstance(nodes=self._x.copy(), edges=edges, edge_links=links),
            "channel": self._channel,
            "clock": np.array([self._t / self.config.length], np.float32),
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        a = int(action)
        legal = 0 <= a < len(self._x)
        reward = float(legal and a == best_node(self._x, self._channel))
        self._t += 1
        done = self._t >= self.config.length
        return self._observe(), reward, done, False, {"illegal": not legal}

    def make_policy(self, name: str, epsilon: float, rng: np.random.Generator) -> Policy:
        """``expert`` (:func:`best_node`, ``epsilon`` of the steps random) or ``random``, as
        ``offline-graph record --policy`` names them."""
        check_name("Channel-v0 policy", name, ("expert", "random"), "Or pass --policy module:function.")
        epsilon = check_epsilon("Channel-v0 policy", epsilon, RANDOM_ACTION_HINT)
        return channel_expert(1.0 if name == "random" else epsilon, rng)
