"""Stitch (``"offline_graph/Stitch-v0"``, :class:`~offline_graph.data.graphs.spaces.NodeAction`).

A two-phase task whose best first step is worth something only through *other* episodes: the
offline-RL "stitching" property. What all selection envs share (graphs, masks, illegal actions,
the ``"expert"`` / ``"random"`` / ``"mixed"`` policies) is in :mod:`offline_graph.env.selection`.

* Phase "start": a random connected graph of ``N ~ U{min_nodes..max_nodes}`` nodes; one node
  is the *door*, ``num_traps`` are *traps*, ``num_blocked`` are *blocked* (masked out), the
  rest plain. Door: reward 0, the episode goes on in phase "hub". Trap: ``trap_reward``, ends.
  Plain: 0, ends.
* Phase "hub": a new graph drawn the same way, one node the *goal* (``goal_reward``, ends,
  ``is_success``), ``num_blocked`` blocked, the rest plain (0, ends).

Nothing in a hub observation says how the hub was reached. Optimal values: ``V*(hub) =
goal_reward``, ``Q*(start, door) = gamma * goal_reward``, ``Q*(start, trap) = trap_reward``: the
door is the better first step for every ``gamma > trap_reward / goal_reward`` (0.25 with the
defaults). The expert (:func:`stitch_expert`) takes the door, then the goal: return 1.

The behaviour policy ``"stitch"`` (:func:`stitch_behaviour`, ``epsilon`` = door probability)
prefers a trap at the start and acts uniformly at random after the door, so the door's own
episodes return ``E[1 / allowed hub nodes]`` (0.11 with the defaults), below the trap's 0.25;
in episodes that *start* at the hub (``hub_start_prob``) it takes the goal. Logs recorded with
``offline-graph record --env offline_graph/Stitch-v0 --policy stitch --epsilon 0.15
--env-config '{"hub_start_prob": 0.5}'`` show the hub's value (1) only in the hub-start
episodes: an agent must stitch "door -> hub" from one set of episodes with "hub -> goal" from
another. Behaviour cloning and MARWIL follow the logs' trap; in-sample value learning
(IQL, CQL) can find the door. Evaluate in the default config (``hub_start_prob=0``, every
episode starts at the start phase): ``offline-graph train`` evaluates in the env config
recorded in the data unless ``--env offline_graph/Stitch-v0`` names the env explicitly.
``offline-graph experiment --task stitch`` (:mod:`offline_graph.cli.experiments.stitch`) records such
logs and trains BC, MARWIL, IQL and CQL on them over seeds.
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
from offline_graph.env.graph_env import _quantize
from offline_graph.env.policies import check_epsilon, check_name
from offline_graph.env.selection import (
    SELECTION_POLICY_NAMES,
    Policy,
    SelectionEnv,
    flagged_node,
    geometric_graph,
    make_selection_policy,
)

STITCH_FEATURES = ("hub_phase", "is_door", "is_trap", "is_goal", "is_blocked")
"""Node feature columns of :class:`StitchEnv`, followed by ``noise_features`` columns of
quantized standard-normal noise (redrawn with every graph). ``hub_phase`` is 1.0 on every node
in phase "hub", 0.0 in phase "start"; the others flag the node's kind (plain nodes: none). The
edge feature is a constant 1.0."""

STITCH_POLICY_NAMES = (*SELECTION_POLICY_NAMES, "stitch")

_HUB, _DOOR, _TRAP, _GOAL, _BLOCKED = range(len(STITCH_FEATURES))
_PLAIN = -1


@dataclasses.dataclass(frozen=True)
class StitchConfig:
    """Settings of :class:`StitchEnv`."""

    max_nodes: int = 20
    """Node counts are uniform in ``[min_nodes, max_nodes]``; the action space is
    ``NodeAction(max_nodes)``."""
    min_nodes: int = 6
    """Smallest node count; at least ``num_traps + num_blocked + 2`` (door or goal, one plain)."""
    num_traps: int = 2
    """Trap nodes of the start graph."""
    num_blocked: int = 2
    """Blocked (masked-out) nodes of every graph."""
    trap_reward: float = 0.25
    """Reward of a trap (ends the episode); in ``(0, goal_reward)``."""
    goal_reward: float = 1.0
    """Reward of the goal (ends the episode)."""
    noise_features: int = 2
    """Noise columns after :data:`STITCH_FEATURES`."""
    k_neighbors: int = 3
    """Each node is joined to its k nearest neighbours (positions are not observed)."""
    hub_start_prob: float = 0.0
    """Probability that an episode starts in phase "hub" (for recording logs; evaluate with 0)."""
    illegal_penalty: float = 1.0
    """An illegal action's reward is ``-illegal_penalty`` (legal returns are >= 0)."""

    def __post_init__(self) -> None:
        def bad(field: str, expected: str, hint: str) -> ConfigError:
            return ConfigError(
                f"StitchConfig: {field} must be {expected} (found {getattr(self, field)!r}). {hint}"
            )

        if int(self.num_traps) < 1:
            raise bad("num_traps", ">= 1", "The start graph's tempting alternative to the door.")
        if int(self.num_blocked) < 0:
            raise bad("num_blocked", ">= 0", "Use 0 for graphs without masked-out nodes.")
        least = int(self.num_traps) + int(self.num_blocked) + 2
        if int(self.min_nodes) < least:
            raise bad("min_nodes", f">= num_traps + num_blocked + 2 = {least}", "Every kind needs its node.")
        if int(self.max_nodes) < int(self.min_nodes):
            raise bad("max_nodes", f">= min_nodes={self.min_nodes}", "Node counts are drawn up to it.")
        if not 0.0 < float(self.trap_reward) < float(self.goal_reward):
            raise bad(
                "trap_reward", f"in (0, goal_reward={self.goal_reward})", "The goal must be worth more."
            )
        if int(self.noise_features) < 0:
            raise bad("noise_features", ">= 0", "Use 0 for no noise columns.")
        if int(self.k_neighbors) < 1:
            raise bad("k_neighbors", ">= 1", "Each node is joined to its k nearest neighbours.")
        if not 0.0 <= float(self.hub_start_prob) <= 1.0:
            raise bad("hub_start_prob", "in [0, 1]", "It is a probability.")
        if not float(self.illegal_penalty) > 0:
            raise bad("illegal_penalty", "> 0", "An illegal action must score below every legal return (0).")


def _in_hub(x: np.ndarray) -> bool:
    return bool(x[0, _HUB] > 0.5)


def stitch_choices(obs: GraphDict) -> np.ndarray:
    """Bool ``[N]``: the nodes that are not blocked (the Stitch action mask)."""
    return np.asarray(obs["x"])[:, _BLOCKED] <= 0.5


def stitch_expert(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
    """The door in phase "start", the goal in phase "hub". Reads only ``obs``."""
    x = np.asarray(obs["x"])
    if _in_hub(x):
        return flagged_node(x, _GOAL, "is_goal", "stitch_expert")
    return flagged_node(x, _DOOR, "is_door", "stitch_expert")


def stitch_behaviour(door_prob: float, rng: np.random.Generator) -> Policy:
    """A fresh ``"stitch"`` behaviour policy for ONE episode (it remembers whether the episode
    began in phase "start"; the recorder builds one per episode, see ``policy_for``).

    Phase "start": the door with probability ``door_prob``, else a uniformly random trap.
    Phase "hub" after the door: a uniformly random allowed node. Phase "hub" as the episode's
    first observation: the goal.
    """
    p = check_epsilon("stitch_behaviour", door_prob, "It is the probability of taking the door at the start.")
    random_choice = make_selection_policy(
        "random", 0.0, rng, stitch_expert, stitch_choices, "stitch_behaviour"
    )
    memory = {"began_at_start": False}

    def policy(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        x = np.asarray(obs["x"])
        if not _in_hub(x):
            memory["began_at_start"] = True
            if rng.random() < p:
                return stitch_expert(obs)
            traps = np.flatnonzero(x[:, _TRAP] > 0.5)
            return int(traps[rng.integers(traps.size)])
        if memory["began_at_start"]:
            return random_choice(obs, info or {})
        return stitch_expert(obs)

    return policy


class StitchEnv(SelectionEnv):
    """Door, then goal (module docstring); the action is a node of the current graph.

    Observation ``GraphInstance(nodes [N, 5 + noise_features], edges [E,1] = 1.0, edge_links
    [E,2])``, node columns :data:`STITCH_FEATURES` then noise. At most 2 steps, never
    truncated. ``reset(options={"phase": "start" | "hub"})`` starts the episode in that phase
    (a random graph) instead of drawing the phase with ``hub_start_prob``.
    """

    config_cls = StitchConfig
    _expert = staticmethod(stitch_expert)
    _choices = staticmethod(stitch_choices)

    def __init__(
        self,
        config: StitchConfig | Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, render_mode, **overrides)
        flags, noise = len(STITCH_FEATURES), int(self.config.noise_features)
        low = np.array([0.0] * flags + [-np.inf] * noise, dtype=np.float32)
        high = np.array([1.0] * flags + [np.inf] * noise, dtype=np.float32)
        self.observation_space = gym.spaces.Graph(
            node_space=gym.spaces.Box(low, high, dtype=np.float32),
            edge_space=gym.spaces.Box(0.0, 1.0, (1,), np.float32),
        )
        self.action_space = NodeAction(int(self.config.max_nodes))

    def make_policy(self, name: str, epsilon: float, rng: np.random.Generator) -> Policy:
        """``"expert"``, ``"random"``, ``"mixed"`` (see :class:`SelectionEnv`) or ``"stitch"``
        (:func:`stitch_behaviour` with door probability ``epsilon``)."""
        if name == "stitch":
            return stitch_behaviour(epsilon, rng)
        check_name(
            "StitchEnv.make_policy",
            name,
            STITCH_POLICY_NAMES,
            "'stitch' is the logs' behaviour (epsilon = door probability).",
        )
        return super().make_policy(name, epsilon, rng)

    def _draw(self, rng: np.random.Generator, hub: bool) -> None:
        """A new graph for phase "hub" (``hub``) or "start"."""
        cfg = self.config
        n = int(rng.integers(int(cfg.min_nodes), int(cfg.max_nodes) + 1))
        _, adj, _ = geometric_graph(rng, n, int(cfg.k_neighbors))
        src, dst = np.nonzero(adj)
        special = [_GOAL] if hub else [_DOOR] + [_TRAP] * int(cfg.num_traps)
        special += [_BLOCKED] * int(cfg.num_blocked)
        kinds = np.full(n, _PLAIN, dtype=np.int64)
        kinds[rng.permutation(n)[: len(special)]] = special
        x = np.zeros((n, len(STITCH_FEATURES) + int(cfg.noise_features)), dtype=np.float32)
        x[:, _HUB] = float(hub)
        flagged = np.flatnonzero(kinds != _PLAIN)
        x[flagged, kinds[flagged]] = 1.0
        x[:, len(STITCH_FEATURES) :] = _quantize(rng.standard_normal((n, int(cfg.noise_features))))
        self._n, self._hub, self._kinds, self._x = n, hub, kinds, x
        self._links = np.stack([src, dst], axis=1).astype(np.int64)
        self._edges = np.ones((src.size, 1), dtype=np.float32)

    def _random_episode(self, rng: np.random.Generator) -> None:
        self._draw(rng, bool(rng.random() < float(self.config.hub_start_prob)))

    def _from_options(self, options: Mapping[str, Any]) -> None:
        phase = options.get("phase")
        if set(options) != {"phase"} or phase not in ("start", "hub"):
            raise ConfigError(
                f"StitchEnv.reset: options must be {{'phase': 'start' | 'hub'}} (found {dict(options)!r}). "
                "The graph itself is always drawn from the seeded RNG."
            )
        self._draw(self.np_random, phase == "hub")

    def _mask(self) -> np.ndarray:
        return self._kinds != _BLOCKED

    def _obs(self) -> GraphInstance:
        return GraphInstance(nodes=self._x.copy(), edges=self._edges, edge_links=self._links)

    def step(self, action: Any) -> tuple[GraphInstance, float, bool, bool, dict[str, Any]]:
        self._require_reset()
        a = self._action(action)
        mask = self._mask()
        self._t += 1
        if not (0 <= a < self._n and mask[a]):
            self._active = False
            return self._obs(), -float(self.config.illegal_penalty), True, False, self._info(mask, True)
        kind = int(self._kinds[a])
        if kind == _DOOR:
            self._draw(self.np_random, hub=True)
            return self._obs(), 0.0, False, False, self._info(self._mask(), False)
        reward = {_TRAP: self.config.trap_reward, _GOAL: self.config.goal_reward}.get(kind, 0.0)
        self._active = False
        return self._obs(), float(reward), True, False, self._info(mask, False, kind == _GOAL)
