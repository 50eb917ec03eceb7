"""What a valid episode looks like: :class:`EpisodeSpec`, derived from the spaces
(:func:`offline_graph.data.episodes.reader.spec_from_spaces`) and read by every check of
:mod:`offline_graph.data.episodes.validation` and :mod:`offline_graph.data.episodes.action_checks`."""

from __future__ import annotations

from dataclasses import dataclass

from offline_graph.data.graphs.globals import GlobalsLayout
from offline_graph.data.graphs.typed import TypedGraph


@dataclass(frozen=True)
class EpisodeSpec:
    """What a valid episode looks like."""

    num_features: int
    """F: node feature size of the observation space."""
    edge_dim: int | None
    """D: edge feature size, or None when the space has no edge features."""
    num_actions: int
    """k: actions must be integers in ``0..k-1`` (selection spaces: the space's limit)."""
    action_level: str | None = None
    """None: graph-level ``Discrete(k)`` actions; "node" / "edge": ``NodeAction`` /
    ``EdgeAction`` (the action indexes this step's nodes / edges; ``action_mask`` allowed)."""
    unfinished: bool = False
    """Accept an episode chunk that is neither terminated nor truncated (RLlib writes each
    ``sample()`` call's unfinished episodes so): off-policy evaluation joins an episode's
    chunks; training and conversion refuse them (reason ``not_finished``)."""
    globals: GlobalsLayout | None = None
    """A ``Dict`` observation space's graph key and flat parts (``globals [G]`` per
    observation, :mod:`offline_graph.data.graphs.globals`); None for a plain ``Graph``."""
    typed: TypedGraph | None = None
    """A typed graph's space (:mod:`offline_graph.data.graphs.typed`; ``num_features`` 0 and
    ``edge_dim`` None then); None for a plain graph."""
    node_type: str | None = None
    """Typed graphs with a ``NodeAction``: the node type whose nodes the action picks."""
