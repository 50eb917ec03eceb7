"""Expert mixtures: policies of known, graded quality for checking off-policy evaluation.

The mixture with ``eps`` of an env's expert takes a uniformly random allowed choice with
probability ``eps``, else the expert's choice, so its probabilities are::

    pi(a | s) = eps * 1[a allowed] / (number of allowed choices) + (1 - eps) * 1[a = expert(s)]

This is the ``"mixed"`` policy that Graph-v0 and NextHop-v0 record (``make_policy("mixed",
eps, rng)``). :data:`EXPERTS` names each env's (or Team-v0 module's) expert and allowed
choices on one observation dict (the recorded layout, ``action_mask`` included):

- ``"offline_graph/Graph-v0"``: ``correct_action`` over ``Discrete(k)`` (all allowed);
- ``"offline_graph/NextHop-v0"``: the next hop of a shortest path, among the current node's
  neighbours (``NodeAction``);
- ``"offline_graph/Team-v0:color"`` / ``":pick"``: Team-v0's two modules (color: Graph-v0's
  task with ``k = 4``; pick: the allowed node with the most neighbours).

The same mixture exists three ways: :func:`mixture_probs` (one observation),
:func:`mixture_policy` (acting in the env, numpy) and :func:`expert_mixture_module` (an
RLModule whose ``forward_inference`` reads the learner batch, un-collates it and returns the
mixture's log-probabilities as ``ACTION_DIST_INPUTS``, so the estimators evaluate it like any
trained module). :func:`with_mixture_logp` attaches a mixture's exact ``log mu(a | s)`` to
logs recorded by it (what ``action_logp`` would carry).

Team-v0's own ``"mixed"`` policy is its decoy heuristic, which never takes most actions (no
support for IS); :func:`team_mixed` is the uniform mixture as a ``module:function`` recording
policy, drawing from the RNG that :func:`seed_team_mixed` sets (record in-process).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict
from offline_graph.data.episodes.logged import Logged, load_logged
from offline_graph.data.episodes.reader import spec_from_spaces
from offline_graph.env.graph_env import EnvConfig, correct_action
from offline_graph.env.next_hop import next_hop_choices, next_hop_expert
from offline_graph.env.team_policies import COLOR_NUM_ACTIONS, agent_kind, pick_correct_action


@dataclass(frozen=True)
class Expert:
    """An expert and its allowed choices on one observation dict."""

    level: str
    """``"discrete"`` (``num_actions`` choices) or ``"node"`` (one per node)."""
    expert: Callable[[GraphDict], int]
    allowed: Callable[[GraphDict], np.ndarray]
    """Bool over the observation's choices."""


def _all(k: int) -> Callable[[GraphDict], np.ndarray]:
    return lambda obs: np.ones(k, dtype=bool)


def _mask(obs: GraphDict) -> np.ndarray:
    return np.asarray(obs["action_mask"], dtype=bool).reshape(-1)  # type: ignore[typeddict-item]


_K = EnvConfig().num_actions
EXPERTS: dict[str, Expert] = {
    "offline_graph/Graph-v0": Expert("discrete", lambda obs: correct_action(obs, _K), _all(_K)),
    "offline_graph/NextHop-v0": Expert("node", next_hop_expert, next_hop_choices),
    "offline_graph/Team-v0:color": Expert(
        "discrete", lambda obs: correct_action(obs, COLOR_NUM_ACTIONS), _all(COLOR_NUM_ACTIONS)
    ),
    "offline_graph/Team-v0:pick": Expert("node", lambda obs: pick_correct_action(obs, _mask(obs)), _mask),
}


def expert_for(key: str) -> Expert:
    """``EXPERTS[key]`` (ConfigError naming the keys otherwise)."""
    if key not in EXPERTS:
        raise ConfigError(
            f"expert_mixture: key must be one of {sorted(EXPERTS)} (found {key!r}). "
            "Team-v0's modules are '<env>:color' and '<env>:pick'."
        )
    return EXPERTS[key]


def mixture_probs(expert: Expert, obs: GraphDict, eps: float) -> np.ndarray:
    """``pi(. | obs)`` of the ``eps`` mixture (module doc), float64 over the choices."""
    allowed = expert.allowed(obs)
    p = eps * allowed / allowed.sum()
    p[expert.expert(obs)] += 1.0 - eps
    return p


def mixture_policy(expert: Expert, eps: float, rng: np.random.Generator) -> Callable[..., int]:
    """``policy(obs, info) -> int`` drawing from the mixture as the envs' ``"mixed"`` does."""

    def policy(obs: GraphDict, info: Any = None) -> int:
        if rng.random() < eps:
            allowed = np.flatnonzero(expert.allowed(obs))
            return int(allowed[rng.integers(allowed.size)])
        return expert.expert(obs)

    return policy


_TEAM: dict[str, Any] = {"rng": np.random.default_rng(0), "eps": 0.5}


def seed_team_mixed(seed: int, eps: float) -> None:
    """Set the RNG and ``eps`` of :func:`team_mixed` (module doc)."""
    _TEAM.update(rng=np.random.default_rng(seed), eps=float(eps))


def team_mixture(eps: float, rng: np.random.Generator) -> Callable[..., int]:
    """``policy(agent_id, obs, info)``: every Team-v0 agent acts by its module's ``eps`` mixture."""
    policies = {
        kind: mixture_policy(EXPERTS[f"offline_graph/Team-v0:{kind}"], eps, rng) for kind in ("color", "pick")
    }
    return lambda agent_id, obs, info=None: policies[agent_kind(agent_id)](obs, info)


def team_mixed(agent_id: Any, obs: GraphDict, info: Any = None) -> int:
    """Team-v0's uniform mixture for recording (``offline_graph.bench.ope_targets:team_mixed``)."""
    return team_mixture(_TEAM["eps"], _TEAM["rng"])(agent_id, obs, info)


def _expert_mixture_class() -> type:
    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

    from offline_graph.data.graphs.collate import uncollate
    from offline_graph.data.graphs.spaces import selection_level
    from offline_graph.rllib.core.selection import TorchChoiceCategorical

    class ExpertMixture(TorchRLModule):
        """An expert mixture as an RLModule: ``model_config = {"epsilon", "expert"}`` (an
        :data:`EXPERTS` key); ACTION_DIST_INPUTS ``[B, M]`` log-probabilities."""

        def setup(self) -> None:
            cfg: Any = self.model_config
            self.eps = float(cfg["epsilon"])
            self.expert = expert_for(str(cfg["expert"]))
            self.level = selection_level(self.action_space)
            self.dummy = torch.nn.Parameter(torch.zeros(1))  # a device and parameters

        def _forward(self, batch: dict, **kwargs: Any) -> dict:
            obs = {k: v.detach().cpu().numpy() for k, v in batch[Columns.OBS].items()}
            graphs = uncollate(obs, self.level)
            rows = [mixture_probs(self.expert, graphs.graph(g), self.eps) for g in range(len(graphs))]
            probs = np.zeros((len(rows), max((len(r) for r in rows), default=1)))
            for g, r in enumerate(rows):
                probs[g, : len(r)] = r
            low = np.finfo(np.float32).min
            logits = np.where(probs > 0, np.log(np.where(probs > 0, probs, 1.0)), low)
            return {Columns.ACTION_DIST_INPUTS: torch.from_numpy(logits).float()}

        def get_inference_action_dist_cls(self) -> Any:
            return TorchChoiceCategorical if self.level else super().get_inference_action_dist_cls()

        get_exploration_action_dist_cls = get_train_action_dist_cls = get_inference_action_dist_cls

    return ExpertMixture


def expert_mixture_module(key: str, eps: float, observation_space: Any, action_space: Any) -> Any:
    """The ``eps`` mixture of expert ``key`` as an RLModule (module doc)."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    expert_for(key)
    spec = RLModuleSpec(
        module_class=_expert_mixture_class(),
        observation_space=observation_space,
        action_space=action_space,
        model_config={"epsilon": float(eps), "expert": key},
    )
    return spec.build()


def with_mixture_logp(data: Any, behaviour: Any) -> Logged:
    """The logs ``data`` (single-agent episodes) with ``log mu(a | s)`` of the mixture module
    ``behaviour`` that recorded them (exact, as ``action_logp`` would carry it)."""
    from offline_graph.rllib.ope.ope_policy import target_choices

    logged = load_logged(data, spec_from_spaces(behaviour.observation_space, behaviour.action_space))
    mu = target_choices(behaviour, logged.trans.obs, explore=True).at(logged.trans.actions)
    return Logged(logged.trans, logged.ptr, np.log(mu))
