"""Behaviour policies for recording episodes from :class:`~offline_graph.env.GraphEnv`.

A policy is a callable ``policy(obs, info) -> int`` where ``obs`` is the observation in the
dict layout (``{"x", "edge_index", "edge_attr"}``, see :mod:`offline_graph.data.graphs.graph`; convert
an env observation with ``graph_to_dict(obs, env.edge_dim)``) and ``info`` the env's info.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from offline_graph.env.graph_env import correct_action
from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict

Policy = Callable[[GraphDict, dict[str, Any]], int]

POLICY_NAMES = ("expert", "random", "mixed", "decoy")


def _check_k(k: int, where: str) -> int:
    if int(k) < 1:
        raise ConfigError(f"{where}: k must be >= 1 (found {k!r}). It is the number of actions.")
    return int(k)


RANDOM_ACTION_HINT = "It is the probability of a random action."
MIXED_HINT = "'mixed' is the expert with probability 1-epsilon, else uniformly random."


def check_name(where: str, name: str, names: Sequence[str], hint: str) -> None:
    """Raise ``<where>: name must be one of [...] (found 'x'). <hint>`` unless ``name`` is one
    of ``names`` (a policy's name)."""
    if name not in names:
        raise ConfigError(f"{where}: name must be one of {list(names)} (found {name!r}). {hint}")


def check_epsilon(where: str, epsilon: float, hint: str, *, refuse_bool: bool = False) -> float:
    """``epsilon`` as a float in [0, 1], else ``<where>: epsilon must be in [0, 1] (found x).
    <hint>`` (``refuse_bool``: True and False are refused too)."""
    if (refuse_bool and isinstance(epsilon, bool)) or not 0.0 <= float(epsilon) <= 1.0:
        raise ConfigError(f"{where}: epsilon must be in [0, 1] (found {epsilon!r}). {hint}")
    return float(epsilon)


def expert_policy(k: int) -> Policy:
    """Always the correct action: :func:`~offline_graph.env.graph_env.correct_action`."""
    k = _check_k(k, "expert_policy")

    def policy(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        return correct_action(obs, k)

    return policy


def random_policy(k: int, rng: np.random.Generator) -> Policy:
    """A uniformly random action in ``0..k-1`` (ignores the observation)."""
    k = _check_k(k, "random_policy")

    def policy(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        return int(rng.integers(k))

    return policy


def epsilon_policy(k: int, epsilon: float, rng: np.random.Generator) -> Policy:
    """The expert action with probability ``1 - epsilon``, else a uniformly random action."""
    k = _check_k(k, "epsilon_policy")
    eps = check_epsilon("epsilon_policy", epsilon, RANDOM_ACTION_HINT)

    def policy(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        if rng.random() < eps:
            return int(rng.integers(k))
        return correct_action(obs, k)

    return policy


def majority_color(obs: GraphDict, k: int) -> int:
    """The most frequent node color (ties to the lowest index; 0 for an empty graph).

    A plausible-looking heuristic that ignores the edges: in the default env it equals
    :func:`~offline_graph.env.graph_env.correct_action` in only ~27% of the states (25% would
    be chance), so it is a *systematic* mistake that a model of the node bag can learn.
    """
    x = np.asarray(obs["x"])
    if x.shape[0] == 0:
        return 0
    return int(np.argmax(np.bincount(np.argmax(x[:, :k], axis=1), minlength=k)))


def decoy_policy(k: int, epsilon: float, rng: np.random.Generator) -> Policy:
    """The expert action with probability ``1 - epsilon``, else :func:`majority_color`.

    With ``epsilon > 0.5`` the wrong heuristic is the behaviour's most frequent action in every
    state where it differs from the expert, so greedy behaviour cloning learns the heuristic,
    while advantage weighting (MARWIL) can recover the expert from the rewards.
    """
    k = _check_k(k, "decoy_policy")
    eps = check_epsilon("decoy_policy", epsilon, "It is the probability of the majority-color action.")

    def policy(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        if rng.random() < eps:
            return majority_color(obs, k)
        return correct_action(obs, k)

    return policy


def make_policy(name: str, k: int, epsilon: float = 0.3, rng: np.random.Generator | None = None) -> Policy:
    """Policy by name: ``"expert"``, ``"random"``, ``"mixed"`` (epsilon-expert with uniform
    noise) or ``"decoy"`` (epsilon-expert whose noise is the :func:`majority_color` heuristic).

    ``rng`` defaults to a fresh, unseeded ``np.random.default_rng()``.
    """
    rng = np.random.default_rng() if rng is None else rng
    check_name(
        "make_policy",
        name,
        POLICY_NAMES,
        "'mixed' is the expert with probability 1-epsilon, else uniformly random; "
        "'decoy' the expert, else the most frequent node color.",
    )
    if name == "expert":
        return expert_policy(k)
    if name == "random":
        return random_policy(k, rng)
    if name == "mixed":
        return epsilon_policy(k, epsilon, rng)
    return decoy_policy(k, epsilon, rng)
