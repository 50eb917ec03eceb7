"""Experts and behaviour policies of the multi-agent :class:`~offline_graph.env.team.TeamEnv`.

No Ray import here: the policies work on recorded data too. A team policy is a callable
``policy(agent_id, obs, info) -> int`` where ``obs`` is the agent's observation in the dict
layout (``graph_to_dict(obs, env.edge_dim_of(agent_id))``) and ``info`` its info dict (for
``"pick"`` agents ``info["action_mask"]``; a recorded ``obs["action_mask"]`` works as well).

Agent kinds, read from the agent id (``"color_0"``, ``"pick_1"``, ...):

* ``"color"``: the :class:`~offline_graph.env.graph_env.GraphEnv` task (action: the color with
  the most same-colored edges, :func:`~offline_graph.env.graph_env.correct_action`);
* ``"pick"``: pick the allowed node with the most neighbours (:func:`pick_correct_action`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict
from offline_graph.env.graph_env import correct_action
from offline_graph.env.policies import check_epsilon, check_name, majority_color

TeamPolicy = Callable[[str, GraphDict, dict[str, Any]], int]

AGENT_KINDS = ("color", "pick")
TEAM_POLICY_NAMES = ("expert", "random", "mixed", "decoy")

COLOR_NUM_FEATURES = 8
"""F of a color agent's nodes: one-hot color (``COLOR_NUM_ACTIONS`` columns), then noise."""
COLOR_NUM_ACTIONS = 4
"""k, the color agents' ``Discrete(k)`` actions (and node colors)."""
COLOR_EDGE_DIM = 2
"""D of a color agent's edges (noise)."""
PICK_NUM_FEATURES = 3
"""F of a pick agent's nodes (noise: the features do not reveal the degree)."""
PICK_EDGE_DIM = 1
"""D of a pick agent's edges (the constant 1.0)."""


def agent_kind(agent_id: Any) -> str:
    """``"color"`` or ``"pick"``: the part of ``agent_id`` before the last ``_``."""
    kind = str(agent_id).rpartition("_")[0]
    if kind not in AGENT_KINDS:
        raise ConfigError(
            f"TeamEnv: agent_id must be '<kind>_<index>' with kind in {list(AGENT_KINDS)} "
            f"(found {agent_id!r}). Use an id from TeamEnv.possible_agents."
        )
    return kind


def team_policy_mapping_fn(agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
    """RLlib ``policy_mapping_fn``: one module per agent kind (``"color"`` / ``"pick"``)."""
    return agent_kind(agent_id)


def _node_degrees(obs: GraphDict) -> np.ndarray:
    """Int ``[N]``: distinct neighbours per node (either edge direction, self-loops ignored)."""
    n = int(np.shape(obs["x"])[0])
    ei = np.asarray(obs["edge_index"], dtype=np.int64).reshape(2, -1)
    ei = ei[:, ei[0] != ei[1]]
    pairs = np.unique(np.sort(ei, axis=0), axis=1)
    return np.bincount(pairs.reshape(-1), minlength=n)


def _candidates(obs: GraphDict, mask: Any, where: str) -> np.ndarray:
    n = int(np.shape(obs["x"])[0])
    m = np.ones(n, dtype=bool) if mask is None else np.asarray(mask).astype(bool).reshape(-1)
    if m.shape[0] != n or not m.any():
        raise ConfigError(
            f"{where}: mask must be bool [{n}] with at least one True entry (found "
            f"{m.shape[0]} entries, {int(m.sum())} allowed). Pass info['action_mask'] of this step."
        )
    return np.flatnonzero(m)


def pick_correct_action(obs: GraphDict, mask: Any = None) -> int:
    """The pick agents' correct action: the allowed node (``mask`` bool ``[N]``; None: all)
    with the most distinct neighbours; ties go to the lowest node index."""
    cand = _candidates(obs, mask, "pick_correct_action")
    return int(cand[np.argmax(_node_degrees(obs)[cand])])


def pick_decoy_action(obs: GraphDict, mask: Any = None) -> int:
    """A structure-blind heuristic: the allowed node with the largest first feature (noise),
    right about as often as a random allowed node."""
    cand = _candidates(obs, mask, "pick_decoy_action")
    return int(cand[np.argmax(np.asarray(obs["x"])[cand, 0])])


def _mask_of(obs: GraphDict, info: dict[str, Any] | None) -> Any:
    if info and info.get("action_mask") is not None:
        return info["action_mask"]
    return obs.get("action_mask")


def team_expert(agent_id: Any, obs: GraphDict, info: dict[str, Any] | None = None) -> int:
    """The correct action of any agent (usable as ``"offline_graph.env.team_policies:team_expert"``)."""
    if agent_kind(agent_id) == "color":
        return correct_action(obs, COLOR_NUM_ACTIONS)
    return pick_correct_action(obs, _mask_of(obs, info))


def team_random(rng: np.random.Generator) -> TeamPolicy:
    """Uniform over the allowed actions: all ``k`` colors, or the pick agent's allowed nodes."""

    def policy(agent_id: Any, obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        if agent_kind(agent_id) == "color":
            return int(rng.integers(COLOR_NUM_ACTIONS))
        cand = _candidates(obs, _mask_of(obs, info), "team_random")
        return int(cand[rng.integers(cand.size)])

    return policy


def team_decoy(epsilon: float, rng: np.random.Generator) -> TeamPolicy:
    """The expert with probability ``1 - epsilon``, else a structure-blind heuristic
    (:func:`~offline_graph.env.policies.majority_color` / :func:`pick_decoy_action`).

    With ``epsilon > 0.5`` the heuristic is the most frequent action wherever it differs from
    the expert, so behaviour cloning learns it while MARWIL can recover the expert."""

    def policy(agent_id: Any, obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        if rng.random() >= epsilon:
            return team_expert(agent_id, obs, info)
        if agent_kind(agent_id) == "color":
            return majority_color(obs, COLOR_NUM_ACTIONS)
        return pick_decoy_action(obs, _mask_of(obs, info))

    return policy


def make_team_policy(name: str, epsilon: float = 0.6, rng: np.random.Generator | None = None) -> TeamPolicy:
    """Team policy by name: ``"expert"``, ``"random"``, ``"mixed"`` (= ``"decoy"``: the expert
    with probability ``1 - epsilon``, else the heuristic). ``rng`` defaults to an unseeded one."""
    where = "TeamEnv.make_policy"
    check_name(
        where,
        name,
        TEAM_POLICY_NAMES,
        "'mixed' (alias 'decoy') is the expert with probability 1-epsilon, else a heuristic.",
    )
    hint = "It is the probability of the heuristic (decoy) action."
    eps = check_epsilon(where, epsilon, hint, refuse_bool=True)
    rng = np.random.default_rng() if rng is None else rng
    if name == "expert":
        return team_expert
    if name == "random":
        return team_random(rng)
    return team_decoy(eps, rng)
