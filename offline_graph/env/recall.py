"""A memory task on graphs: answer, at the last step, the cue shown several steps earlier.

Each episode draws ``N`` nodes once (node ``i`` stays node ``i`` for the whole episode), a cue
``c in 0..K-1`` and a delay ``D in [min_delay, max_delay]``; the episode has ``D + 1`` steps.
Every step redraws the edges (a random undirected graph stored as two directed edges per
pair) and the noise features, so only the node count carries over between steps.

Node features ``x [N, K + 2 + noise_features]``:

* columns ``0..K-1``: the one-hot cue on every node at step 0 only (zeros later);
* column ``K``: 1.0 on every node at the final step only (the "answer now" flag);
* column ``K + 1``: always 0.0 (reserved; no clock beyond the flag);
* the rest: quantized standard-normal noise, redrawn each step.

Reward 1.0 at the final step when the action is the cue, else 0.0; every earlier step gives
0.0 whatever the action. A memoryless policy sees no cue at the final step, so it can only
guess there: expected return ``1/K``. The expert (:func:`recall_expert`) remembers the cue.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import GraphInstance

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict, graph_to_dict
from offline_graph.env.graph_env import _quantize, resolve_config
from offline_graph.env.policies import MIXED_HINT, RANDOM_ACTION_HINT, Policy, check_epsilon, check_name

RECALL_POLICY_NAMES = ("expert", "random", "mixed")


@dataclasses.dataclass(frozen=True)
class RecallConfig:
    """Settings of :class:`RecallEnv`."""

    num_actions: int = 4
    """K, the number of actions and of cues."""
    noise_features: int = 2
    """Noise columns after the ``K + 2`` cue / flag / reserved columns."""
    base_nodes: int = 6
    """The node count is ``base_nodes + Poisson(poisson_lambda)``, drawn once per episode ..."""
    poisson_lambda: float = 6.0
    min_nodes: int = 4
    """... clipped to ``[min_nodes, max_nodes]``."""
    max_nodes: int = 32
    edges_per_node: float = 2.0
    """Mean degree: ``round(edges_per_node * N / 2)`` distinct undirected pairs per step, each
    stored in both directions (so ``E ~= edges_per_node * N`` directed edges)."""
    min_delay: int = 2
    """The delay ``D`` (steps between the cue and the answer) is uniform in
    ``[min_delay, max_delay]``; the episode has ``D + 1`` steps."""
    max_delay: int = 5

    def __post_init__(self) -> None:
        def bad(name: str, expected: str, hint: str) -> ConfigError:
            return ConfigError(
                f"RecallConfig: {name} must be {expected} (found {getattr(self, name)!r}). {hint}"
            )

        if int(self.num_actions) < 2:
            raise bad("num_actions", ">= 2", "It is the number of actions and cues.")
        if int(self.noise_features) < 0:
            raise bad("noise_features", ">= 0", "Use 0 for no noise columns.")
        if int(self.min_nodes) < 2:
            raise bad("min_nodes", ">= 2", "Edges join two distinct nodes.")
        if int(self.max_nodes) < int(self.min_nodes):
            raise bad("max_nodes", f">= min_nodes={self.min_nodes}", "Node counts are clipped to it.")
        if int(self.base_nodes) < 0:
            raise bad("base_nodes", ">= 0", "It is the node count before the Poisson draw.")
        if not float(self.poisson_lambda) >= 0:
            raise bad("poisson_lambda", ">= 0", "It is the mean of the extra node count.")
        if not float(self.edges_per_node) >= 0:
            raise bad("edges_per_node", ">= 0", "Use 0 for graphs without edges.")
        if int(self.min_delay) < 1:
            raise bad("min_delay", ">= 1", "The cue step and the answer step must differ.")
        if int(self.max_delay) < int(self.min_delay):
            raise bad("max_delay", f">= min_delay={self.min_delay}", "D is drawn in [min_delay, max_delay].")


def _cue_of(obs: GraphDict | GraphInstance, k: int) -> int | None:
    """The cue shown by ``obs`` (argmax of the first ``k`` columns), or None on a non-cue step."""
    if isinstance(obs, GraphInstance):
        obs = graph_to_dict(obs, 1)
    x = np.asarray(obs["x"])
    if x.shape[0] == 0 or not np.any(x[:, :k] != 0):
        return None
    return int(np.argmax(x[0, :k]))


def recall_expert(k: int) -> Policy:
    """A fresh expert for ONE episode of a ``K = k`` :class:`RecallEnv`.

    The expert is stateful across the steps of an episode: it reads the cue from the
    observation (any nonzero in columns ``0..k-1``, seen at step 0 only), keeps it in its
    closure and answers it at every step. Seeing a cue step again (a new episode) replaces the
    stored cue, but build one per episode anyway (the recorder does: ``policy_for`` is called
    for every episode). Before any cue was seen it answers 0.
    """
    memory: dict[str, int] = {"cue": 0}

    def policy(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        cue = _cue_of(obs, k)
        if cue is not None:
            memory["cue"] = cue
        return memory["cue"]

    return policy


class RecallEnv(gym.Env):
    """The memory task (module docstring). ``RecallEnv(config=None, **overrides)``: ``config``
    is a :class:`RecallConfig`, a mapping of its fields or None.

    ``reset(options={"cue": c, "delay": d, "num_nodes": n})`` fixes any of the episode's draws.
    ``info``: ``cue_step`` (t == 0), ``answer_step`` (the final step: act now),
    ``num_nodes``, ``num_edges``.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (as gymnasium.Env)
    edge_dim = 1
    """D, the edge feature size (a constant 1.0), for ``graph_to_dict(obs, env.edge_dim)``."""

    def __init__(
        self,
        config: RecallConfig | Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        self.config = resolve_config("RecallEnv", RecallConfig, config, overrides)
        if render_mode is not None:
            raise ConfigError(
                f"RecallEnv: render_mode must be None (found {render_mode!r}). "
                "This environment does not render."
            )
        self.render_mode = render_mode
        cfg = self.config
        self.num_actions = int(cfg.num_actions)
        self.num_features = self.num_actions + 2 + int(cfg.noise_features)
        self.observation_space = gym.spaces.Graph(
            node_space=gym.spaces.Box(-np.inf, np.inf, (self.num_features,), np.float32),
            edge_space=gym.spaces.Box(0.0, 1.0, (1,), np.float32),
        )
        self.action_space = gym.spaces.Discrete(self.num_actions)
        self._n = 0
        self._cue = 0
        self._delay = 0
        self._t = 0
        self._num_edges = 0
        self._active = False

    # ----------------------------------------------------------------- generation
    def _option(self, options: Mapping[str, Any], key: str, lo: int, hi: int) -> int | None:
        value = options.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
            raise ConfigError(
                f"RecallEnv.reset: options[{key!r}] must be an integer in [{lo}, {hi}] (found {value!r})."
            )
        return int(value)

    def _obs(self) -> GraphInstance:
        """The graph of step ``self._t``: fresh edges and noise, the cue / flag columns."""
        cfg, rng, n, k = self.config, self.np_random, self._n, self.num_actions
        x = np.zeros((n, self.num_features), dtype=np.float32)
        if self._t == 0:
            x[:, self._cue] = 1.0
        if self._t == self._delay:
            x[:, k] = 1.0
        if cfg.noise_features:
            x[:, k + 2 :] = _quantize(rng.standard_normal((n, int(cfg.noise_features)), dtype=np.float32))
        iu, ju = np.triu_indices(n, 1)
        m = min(round(float(cfg.edges_per_node) * n / 2), iu.size)
        pick = np.sort(rng.choice(iu.size, size=m, replace=False))
        src = np.concatenate([iu[pick], ju[pick]])
        dst = np.concatenate([ju[pick], iu[pick]])
        order = np.lexsort((dst, src))
        links = np.stack([src[order], dst[order]], axis=1).astype(np.int64)
        self._num_edges = int(links.shape[0])
        return GraphInstance(nodes=x, edges=np.ones((self._num_edges, 1), np.float32), edge_links=links)

    def _info(self) -> dict[str, Any]:
        return {
            "cue_step": self._t == 0,
            "answer_step": self._t == self._delay,
            "num_nodes": self._n,
            "num_edges": self._num_edges,
        }

    # ----------------------------------------------------------------- gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[GraphInstance, dict[str, Any]]:
        super().reset(seed=seed)
        cfg, rng, opts = self.config, self.np_random, options or {}
        n = int(cfg.base_nodes) + int(rng.poisson(cfg.poisson_lambda))
        n = min(max(n, int(cfg.min_nodes)), int(cfg.max_nodes))
        cue = int(rng.integers(self.num_actions))
        delay = int(rng.integers(int(cfg.min_delay), int(cfg.max_delay) + 1))
        given_n = self._option(opts, "num_nodes", int(cfg.min_nodes), int(cfg.max_nodes))
        given_cue = self._option(opts, "cue", 0, self.num_actions - 1)
        given_delay = self._option(opts, "delay", int(cfg.min_delay), int(cfg.max_delay))
        self._n = n if given_n is None else given_n
        self._cue = cue if given_cue is None else given_cue
        self._delay = delay if given_delay is None else given_delay
        self._t, self._active = 0, True
        obs = self._obs()
        return obs, self._info()

    def step(self, action: Any) -> tuple[GraphInstance, float, bool, bool, dict[str, Any]]:
        if not self._active:
            raise RuntimeError("RecallEnv: reset() must be called before step().")
        try:
            a = int(action)
        except (TypeError, ValueError):
            a = -1
        if not 0 <= a < self.num_actions:
            raise ValueError(f"RecallEnv.step: action must be in [0, {self.num_actions}) (found {action!r}).")
        final = self._t == self._delay
        reward = 1.0 if final and a == self._cue else 0.0
        self._t += 1
        if final:
            self._active = False
        obs = self._obs()  # after the final step: a plain graph (no cue, no flag)
        return obs, reward, final, False, self._info()

    def render(self) -> None:
        return None

    # ----------------------------------------------------------------- policies
    def make_policy(self, name: str, epsilon: float, rng: np.random.Generator) -> Policy:
        """``"expert"`` (:func:`recall_expert`: stateful, so build one per episode, as the
        recorder does), ``"random"`` (uniform) or ``"mixed"`` (the expert with probability
        ``1 - epsilon`` per step, else random; the expert sees every step, so it keeps the cue
        even when the step-0 action was random)."""
        k = self.num_actions
        check_name("RecallEnv.make_policy", name, RECALL_POLICY_NAMES, MIXED_HINT)
        eps = check_epsilon("RecallEnv.make_policy", epsilon, RANDOM_ACTION_HINT)
        expert = recall_expert(k)

        def random_action(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
            return int(rng.integers(k))

        def mixed(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
            answer = expert(obs, {} if info is None else info)  # always called: it must see the cue step
            return int(rng.integers(k)) if rng.random() < eps else answer

        return {"expert": expert, "random": random_action, "mixed": mixed}[name]
