"""TeamEnv (``"offline_graph/Team-v0"``): a multi-agent RLlib env with two kinds of agents.

Each episode has 1..``max_color`` ``"color"`` agents and 1..``max_pick`` ``"pick"`` agents
(ids ``"color_0"``, ``"pick_1"``, ...). Every agent sees a fresh random graph each step and
acts on it; the agents differ in spaces and action kind:

* ``"color"``: the :class:`~offline_graph.env.graph_env.GraphEnv` task (F=8, D=2,
  ``Discrete(4)``): the color with the most same-colored edges.
* ``"pick"``: node selection (F=3 noise, D=1 constant 1.0, ``NodeAction(pick_max_nodes)``):
  among the allowed nodes (``info["action_mask"]``, a random subset of >= 2 nodes) the one
  with the most neighbours (:func:`pick_correct_action`); the candidates are drawn so that
  this node is unique (the answer never depends on node order).

Reward 1.0 for the correct action, else 0.0 (an illegal action, out of range or masked out,
also gets 0.0 and ``info["illegal_action"] = True``). An agent is terminated after
``max_mistakes`` wrong actions and truncated after ``max_steps`` of its own steps, so agents
finish at different times; with two or more pick agents the last one may join late (after
up to ``late_join_steps`` env steps, its first observation arriving without a reward).
The episode ends when every agent is done: ``terminateds["__all__"]`` if they all ended
terminated, else ``truncateds["__all__"]``. ``agents`` lists the agents that have joined and
were not done before the current step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import GraphInstance
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.utils.typing import AgentID, MultiAgentDict

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.env.graph_env import EnvConfig, GraphEnv, _quantize, resolve_config
from offline_graph.env.team_policies import (
    AGENT_KINDS,
    COLOR_EDGE_DIM,
    COLOR_NUM_ACTIONS,
    COLOR_NUM_FEATURES,
    PICK_EDGE_DIM,
    PICK_NUM_FEATURES,
    TEAM_POLICY_NAMES,
    TeamPolicy,
    agent_kind,
    make_team_policy,
    _node_degrees,
    pick_correct_action,
    pick_decoy_action,
    team_expert,
    team_policy_mapping_fn,
)

__all__ = [
    "AGENT_KINDS",
    "TEAM_POLICY_NAMES",
    "TeamConfig",
    "TeamEnv",
    "TeamPolicy",
    "pick_correct_action",
    "pick_decoy_action",
    "team_expert",
    "team_policy_mapping_fn",
]


@dataclasses.dataclass(frozen=True)
class TeamConfig:
    """Settings of :class:`TeamEnv`."""

    max_color: int = 2
    """Color agents per episode are drawn uniformly from ``1..max_color``."""
    max_pick: int = 2
    """Pick agents per episode are drawn uniformly from ``1..max_pick``."""
    max_steps: int = 10
    """Each agent is truncated after this many of its own steps."""
    max_mistakes: int = 3
    """Each agent is terminated once it took this many wrong actions."""
    late_join_steps: int = 2
    """With >= 2 pick agents the last one joins after ``0..late_join_steps`` env steps
    (uniform); 0 disables late joining."""
    color_poisson_lambda: float = 12.0
    """Color graphs: ``1 + Poisson(color_poisson_lambda)`` nodes (GraphEnv's distribution)."""
    color_max_nodes: int = 128
    """Color graphs' node counts are clipped to this (GraphEnv's ``n_max``)."""
    pick_poisson_lambda: float = 10.0
    """Pick graphs: ``2 + Poisson(pick_poisson_lambda)`` nodes, clipped to ``pick_max_nodes``."""
    pick_max_nodes: int = 64
    """The pick agents' ``NodeAction(pick_max_nodes)`` bound."""
    pick_edges_per_node: float = 1.5
    """Pick graphs: ``round(pick_edges_per_node * N)`` random node pairs become undirected
    edges (duplicates merged; each stored in both directions)."""
    pick_max_candidates: int = 6
    """The pick mask allows ``2..min(N, pick_max_candidates)`` nodes (uniform count)."""

    def __post_init__(self) -> None:
        def bad(name: str, expected: str, hint: str) -> ConfigError:
            found = getattr(self, name)
            return ConfigError(f"TeamConfig: {name} must be {expected} (found {found!r}). {hint}")

        for name in ("max_color", "max_pick", "max_steps", "max_mistakes"):
            if int(getattr(self, name)) < 1:
                raise bad(name, ">= 1", "Every episode has at least one agent of each kind acting once.")
        if int(self.late_join_steps) < 0:
            raise bad("late_join_steps", ">= 0", "Use 0 to let every agent start at reset.")
        for name in ("color_poisson_lambda", "pick_poisson_lambda", "pick_edges_per_node"):
            if not float(getattr(self, name)) >= 0:
                raise bad(name, ">= 0", "It is a mean count.")
        if int(self.color_max_nodes) < 1:
            raise bad("color_max_nodes", ">= 1", "Every graph has at least one node.")
        if int(self.pick_max_nodes) < 2:
            raise bad("pick_max_nodes", ">= 2", "The pick mask allows at least two nodes.")
        if int(self.pick_max_candidates) < 2:
            raise bad("pick_max_candidates", ">= 2", "The pick mask allows at least two nodes.")


@dataclasses.dataclass
class _Agent:
    kind: str
    t: int = 0
    mistakes: int = 0
    correct: int = 0
    n: int = 0
    mask: np.ndarray | None = None


def _unique_best_mask(rng: np.random.Generator, degrees: np.ndarray, max_candidates: int) -> np.ndarray:
    """A random candidate set (2..max_candidates nodes, fewer on tiny graphs) whose best node
    (most neighbours) is unique: the correct action is a function of the structure alone, never
    of node order. Redraws up to 20 times; then the tied best nodes but one leave the set."""
    n = degrees.shape[0]
    mask = np.zeros(n, dtype=bool)
    for _ in range(20):
        mask[:] = False
        size = int(rng.integers(min(2, n), min(n, int(max_candidates)) + 1))
        mask[rng.choice(n, size=size, replace=False)] = True
        best = degrees[mask].max()
        if int((degrees[mask] == best).sum()) == 1:
            return mask
    tied = np.flatnonzero(mask & (degrees == degrees[mask].max()))
    mask[tied[1:]] = False
    return mask


class TeamEnv(MultiAgentEnv):
    """Color and pick agents on random graphs (see the module doc).

    ``TeamEnv(config=None, **overrides)``: ``config`` is a :class:`TeamConfig`, a mapping of
    its fields (RLlib's ``env_config``) or None. Observations are ``GraphInstance``; use
    ``graph_to_dict(obs, env.edge_dim_of(agent_id))`` for the dict layout the policies take.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (as gymnasium.Env)
    module_of = staticmethod(agent_kind)
    make_policy = staticmethod(make_team_policy)

    def __init__(
        self,
        config: TeamConfig | Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        self.config: TeamConfig = resolve_config("TeamEnv", TeamConfig, config, overrides)
        if render_mode is not None:
            raise ConfigError(
                f"TeamEnv: render_mode must be None (found {render_mode!r}). "
                "This environment does not render."
            )
        self.render_mode = render_mode
        cfg = self.config
        color_ids = [f"color_{i}" for i in range(int(cfg.max_color))]
        pick_ids = [f"pick_{i}" for i in range(int(cfg.max_pick))]
        self.possible_agents: list[AgentID] = [*color_ids, *pick_ids]
        self.agents = []
        self._color_envs = {
            aid: GraphEnv(
                EnvConfig(
                    num_features=COLOR_NUM_FEATURES,
                    num_actions=COLOR_NUM_ACTIONS,
                    edge_dim=COLOR_EDGE_DIM,
                    poisson_lambda=float(cfg.color_poisson_lambda),
                    n_max=int(cfg.color_max_nodes),
                    max_steps=int(cfg.max_steps),
                    hazard=0.0,
                    max_mistakes=int(cfg.max_mistakes),
                )
            )
            for aid in color_ids
        }
        color_space = next(iter(self._color_envs.values())).observation_space
        pick_space = gym.spaces.Graph(
            node_space=gym.spaces.Box(-np.inf, np.inf, (PICK_NUM_FEATURES,), np.float32),
            edge_space=gym.spaces.Box(0.0, 1.0, (PICK_EDGE_DIM,), np.float32),
        )
        obs_spaces: dict[AgentID, gym.Space] = {a: color_space for a in color_ids}
        self.observation_spaces = obs_spaces | {a: pick_space for a in pick_ids}
        action_spaces: dict[AgentID, gym.Space] = {
            a: gym.spaces.Discrete(COLOR_NUM_ACTIONS) for a in color_ids
        }
        action_spaces |= {a: NodeAction(int(cfg.pick_max_nodes)) for a in pick_ids}
        self.action_spaces = action_spaces
        self._state: dict[str, _Agent] = {}
        self._acting: list[str] = []
        self._pending: dict[str, int] = {}
        self._done: dict[str, bool] = {}  # agent -> ended terminated (True) or truncated (False)
        self._t = 0
        super().__init__()

    @staticmethod
    def edge_dim_of(agent_id: Any) -> int:
        """D of the agent's edges, for ``graph_to_dict(obs, D)``."""
        return COLOR_EDGE_DIM if agent_kind(agent_id) == "color" else PICK_EDGE_DIM

    # ----------------------------------------------------------------- generation
    def _pick_graph(self, s: _Agent) -> tuple[GraphInstance, dict[str, Any]]:
        cfg, rng = self.config, self.np_random
        n = int(min(2 + rng.poisson(cfg.pick_poisson_lambda), cfg.pick_max_nodes))
        pairs = round(float(cfg.pick_edges_per_node) * n)
        src = rng.integers(0, n, size=pairs)
        dst = (src + rng.integers(1, n, size=pairs)) % n
        adj = np.zeros((n, n), dtype=bool)
        adj[src, dst] = True
        adj |= adj.T
        links = np.argwhere(adj).astype(np.int64)  # both directions, sorted by (source, target)
        x = _quantize(rng.standard_normal((n, PICK_NUM_FEATURES), dtype=np.float32))
        mask = _unique_best_mask(rng, _node_degrees({"x": x, "edge_index": links.T}), cfg.pick_max_candidates)
        obs = GraphInstance(nodes=x, edges=np.ones((links.shape[0], 1), np.float32), edge_links=links)
        s.correct = pick_correct_action({"x": x, "edge_index": links.T}, mask)
        s.n, s.mask = n, mask
        return obs, {"action_mask": mask.copy(), "num_nodes": n, "num_edges": int(links.shape[0])}

    def _observe(self, aid: str, illegal: bool) -> tuple[GraphInstance, dict[str, Any]]:
        """A fresh graph for ``aid``; remembers its correct action and mask."""
        s = self._state[aid]
        if s.kind == "pick":
            obs, info = self._pick_graph(s)
        else:
            obs, ginfo = self._color_envs[aid]._generate()
            s.correct, s.n = int(ginfo["correct_action"]), int(ginfo["num_nodes"])
            info = {"num_nodes": s.n, "num_edges": int(ginfo["num_edges"])}
        info["illegal_action"] = illegal
        return obs, info

    # ----------------------------------------------------------------- MultiAgentEnv API
    def reset(  # type: ignore[override]  # (as MultiAgentEnv.reset)
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[MultiAgentDict, MultiAgentDict]:
        super().reset(seed=seed)
        cfg, rng = self.config, self.np_random
        n_color = int(rng.integers(1, int(cfg.max_color) + 1))
        n_pick = int(rng.integers(1, int(cfg.max_pick) + 1))
        ids = [f"color_{i}" for i in range(n_color)] + [f"pick_{i}" for i in range(n_pick)]
        self._state = {aid: _Agent(agent_kind(aid)) for aid in ids}
        for aid in ids[:n_color]:
            self._color_envs[aid].reset(seed=int(rng.integers(2**31)))
        self._pending, self._done, self._t = {}, {}, 0
        if n_pick >= 2 and int(cfg.late_join_steps) > 0:
            join = int(rng.integers(0, int(cfg.late_join_steps) + 1))
            if join > 0:
                self._pending[ids[-1]] = join
        self._acting = [aid for aid in ids if aid not in self._pending]
        self.agents = list(self._acting)
        obs: MultiAgentDict = {}
        infos: MultiAgentDict = {}
        for aid in self._acting:
            obs[aid], infos[aid] = self._observe(aid, False)
        return obs, infos

    def _judge(self, aid: str, action: Any) -> tuple[float, bool]:
        """(reward, illegal) of ``action`` for ``aid``'s current graph."""
        s = self._state[aid]
        try:
            a = int(action)
        except (TypeError, ValueError):
            raise ConfigError(
                f"TeamEnv.step: action_dict[{aid!r}] must be an integer (found {action!r}). "
                f"It is a {'color' if s.kind == 'color' else 'node index'}."
            ) from None
        if s.kind == "color":
            legal = 0 <= a < COLOR_NUM_ACTIONS
        else:
            legal = 0 <= a < s.n and s.mask is not None and bool(s.mask[a])
        return (1.0 if legal and a == s.correct else 0.0), not legal

    def step(  # type: ignore[override]  # (as MultiAgentEnv.step)
        self, action_dict: MultiAgentDict
    ) -> tuple[MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]:
        if not self._acting:
            raise RuntimeError("TeamEnv: reset() must be called before step() (and after the episode ends).")
        if set(action_dict) != set(self._acting):
            raise ConfigError(
                f"TeamEnv.step: action_dict keys must be the agents that got an observation "
                f"{sorted(self._acting)} (found {sorted(map(str, action_dict))}). Send one action per "
                "acting agent, none for agents that are done or not yet joined."
            )
        cfg = self.config
        self.agents = [aid for aid in self.agents if aid not in self._done]
        self._t += 1
        obs: MultiAgentDict = {}
        rewards: MultiAgentDict = {}
        terminateds: MultiAgentDict = {}
        truncateds: MultiAgentDict = {}
        infos: MultiAgentDict = {}
        for aid in self._acting:
            s = self._state[aid]
            reward, illegal = self._judge(aid, action_dict[aid])
            s.t += 1
            s.mistakes += reward == 0.0
            terminated = s.mistakes >= int(cfg.max_mistakes)
            truncated = not terminated and s.t >= int(cfg.max_steps)
            obs[aid], infos[aid] = self._observe(aid, illegal)
            rewards[aid], terminateds[aid], truncateds[aid] = reward, terminated, truncated
            if terminated or truncated:
                self._done[aid] = terminated
        self._acting = [aid for aid in self._acting if aid not in self._done]
        for aid, at in list(self._pending.items()):
            if at <= self._t or not self._acting:  # nobody left: join now rather than never
                del self._pending[aid]
                self._acting.append(aid)
                self.agents.append(aid)
                obs[aid], infos[aid] = self._observe(aid, False)
        over = not self._acting
        terminateds["__all__"] = over and all(self._done.values())
        truncateds["__all__"] = over and not terminateds["__all__"]
        return obs, rewards, terminateds, truncateds, infos

    def render(self) -> None:
        return None
