"""``offline-graph inspect`` on typed graphs (pure numpy): the spec (the file metadata's
spaces, else inferred once from the data's first episodes), per-type counts and the bytes per
transition as stored (each type's real counts) against each type padded to its largest count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from offline_graph.data.episodes.codec import RawEpisode
from offline_graph.data.episodes.reader import spec_from_spaces
from offline_graph.data.episodes.spec import EpisodeSpec
from offline_graph.data.graphs.typed import TypedGraph, typed_space
from offline_graph.data.graphs.typed_infer import infer_typed_spaces


def metadata_spec(meta: Mapping[str, Any]) -> EpisodeSpec | None:
    """The validation spec of a typed graph's files whose metadata records both spaces (the
    spaces themselves, a ``Dict``'s flat parts and the ``NodeAction``'s node type included);
    None for other files."""
    from offline_graph.data.graphs.space_text import parse_space

    text, action = meta.get("observation_space"), meta.get("action_space")
    if not isinstance(text, str) or not text.startswith(("typed:", "dict:")) or not isinstance(action, str):
        return None
    observation = parse_space(text, "observation")
    if typed_space(observation) is None:
        return None
    return spec_from_spaces(observation, parse_space(action, "action"))


def is_typed(raw: RawEpisode) -> bool:
    """Whether a raw episode's first observation is a typed graph dict (its ``x`` a dict)."""
    first = raw.observations[0] if len(raw.observations) else None
    return isinstance(first, Mapping) and isinstance(first.get("x"), Mapping)


def inferred_spec(raws: list[RawEpisode], where: str) -> EpisodeSpec:
    """The spec of typed episodes with no spaces recorded, inferred once from ``raws`` (the
    first episodes of the data: every node and edge type they show, the masked node type)."""
    return spec_from_spaces(*infer_typed_spaces(raws, where))


def typed_bytes(
    parts: Mapping[str, np.ndarray], typed: TypedGraph, keep: np.ndarray
) -> tuple[float, int, dict[str, int]]:
    """(mean bytes per kept observation as stored, bytes with each type padded to its largest
    count, those counts): ``x`` float32, ``edge_index`` int64 pairs, ``edge_attr`` float32."""
    width = {t: 4 * f for t, f in typed.node_dims.items()}
    width.update({r: 16 + 4 * (d or 0) for r, d in typed.edge_dims.items()})
    real = sum(parts[k][keep].astype(np.float64) * width[k] for k in parts)
    largest = {k: int(parts[k].max()) for k in parts}
    return float(np.mean(real)), int(sum(largest[k] * width[k] for k in parts)), largest
