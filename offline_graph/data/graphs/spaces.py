"""Selection action spaces: the action is a node (``NodeAction``) or an edge (``EdgeAction``)
of *this step's* graph.

Both are :class:`gymnasium.spaces.Discrete` subclasses, so RLlib's config, connectors and
checkpoints accept them. ``Discrete(max_nodes)`` bounds the index; the real number of choices
is the number of nodes ``N`` (edges ``E``, in the order of ``edge_index``'s columns) of the
step's graph, and the observation dict may carry ``action_mask`` (bool ``[N]`` / ``[E]``) to
say which of them are allowed (no mask: all are).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from offline_graph.data.errors import ConfigError


class _SelectionAction(gym.spaces.Discrete):
    """Common part of :class:`NodeAction` and :class:`EdgeAction`."""

    level = ""  # "node" or "edge"
    _arg = ""  # constructor argument name

    def __init__(self, limit: int, seed: int | np.random.Generator | None = None):
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or int(limit) < 1:
            raise ConfigError(
                f"{type(self).__name__}: {self._arg} must be an int >= 1 (found {limit!r}). "
                f"It is the largest number of {self.level}s a graph may have."
            )
        super().__init__(int(limit), seed=seed)

    def choices(self, obs: Any) -> int:
        """The number of choices of observation ``obs`` (a dict or a ``GraphInstance``)."""
        if isinstance(obs, gym.spaces.GraphInstance):
            if self.level == "node":
                return int(np.shape(obs.nodes)[0])
            return 0 if obs.edge_links is None else int(np.shape(obs.edge_links)[0])
        node_type = getattr(self, "node_type", None)
        if self.level == "node":
            x = obs["x"]
            return int(np.shape(x[node_type] if node_type is not None and isinstance(x, dict) else x)[0])
        return int(np.shape(obs["edge_index"])[1])

    def sample(  # type: ignore[override]
        self, mask: np.ndarray | None = None, probability: np.ndarray | None = None
    ) -> np.int64:
        """A uniformly random allowed index.

        ``mask``: bool or 0/1 ``[C]`` with ``C <= limit`` (this step's nodes or edges); the
        sample is drawn among its true entries, and indices ``>= C`` are never drawn. Without
        a mask every index ``0..n-1`` can be drawn (gymnasium's behaviour).
        """
        if mask is None or probability is not None:
            return super().sample(mask=None, probability=probability)
        m = np.asarray(mask)
        if m.ndim != 1 or m.shape[0] > self.n or (m.dtype != bool and m.dtype.kind not in "iu"):
            raise ConfigError(
                f"{type(self).__name__}.sample: mask must be bool or 0/1 [C] with C <= "
                f"{self.n} (found {m.dtype} {list(m.shape)}). C is this graph's number of "
                f"{self.level}s."
            )
        allowed = np.flatnonzero(m.astype(bool))
        if allowed.size == 0:
            raise ConfigError(
                f"{type(self).__name__}.sample: mask must allow at least one {self.level} "
                f"(found {m.shape[0]} entries, none allowed). No action can be taken here."
            )
        return np.int64(allowed[self.np_random.integers(allowed.size)])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._arg}={int(self.n)})"

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and int(other.n) == int(self.n)

    def __hash__(self) -> int:
        return hash((type(self).__name__, int(self.n)))

    def __reduce__(self) -> Any:
        return (type(self), (int(self.n),))


class NodeAction(_SelectionAction):
    """The action is a node of this step's graph: an index in ``0..N-1`` (``N <= max_nodes``).

    ``node_type``: for a typed graph (:class:`~offline_graph.data.graphs.typed.TypedGraph`),
    the node type whose nodes are the choices (the index counts that type's nodes, and
    ``action_mask`` is ``[N_type]``); None for a plain graph.
    """

    level = "node"
    _arg = "max_nodes"

    def __init__(
        self, max_nodes: int, seed: int | np.random.Generator | None = None, node_type: str | None = None
    ):
        if node_type is not None and (not isinstance(node_type, str) or not node_type):
            raise ConfigError(
                f"NodeAction: node_type must be a node type's name or None (found {node_type!r}). "
                "It names the typed graph's node type whose nodes are the choices."
            )
        self.node_type = node_type
        super().__init__(max_nodes, seed=seed)

    def __repr__(self) -> str:
        extra = "" if self.node_type is None else f", node_type={self.node_type!r}"
        return f"NodeAction(max_nodes={int(self.n)}{extra})"

    def __eq__(self, other: Any) -> bool:
        return super().__eq__(other) and other.node_type == self.node_type

    def __hash__(self) -> int:
        return hash(("NodeAction", int(self.n), self.node_type))

    def __reduce__(self) -> Any:
        return (NodeAction, (int(self.n), None, self.node_type))

    @property
    def max_nodes(self) -> int:
        return int(self.n)


class EdgeAction(_SelectionAction):
    """The action is an edge of this step's graph: a column of ``edge_index``, ``0..E-1``
    (``E <= max_edges``)."""

    level = "edge"
    _arg = "max_edges"

    def __init__(self, max_edges: int, seed: int | np.random.Generator | None = None):
        super().__init__(max_edges, seed=seed)

    @property
    def max_edges(self) -> int:
        return int(self.n)


def selection_level(space: Any) -> str | None:
    """``"node"`` / ``"edge"`` for a selection action space, None for any other space."""
    return space.level if isinstance(space, _SelectionAction) else None
