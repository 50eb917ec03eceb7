"""``offline-graph inspect`` on typed graphs (pure numpy): the space (file metadata, else read
off the first observation), per-type counts and the bytes per transition as stored (each type's
real counts) against each type padded to its largest count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from offline_graph.data.episodes.codec import RawEpisode
from offline_graph.data.episodes.spec import EpisodeSpec
from offline_graph.data.graphs.typed import TypedGraph, typed_space
from offline_graph.data.graphs.typed_infer import infer_typed


def metadata_typed(meta: Mapping[str, Any]) -> tuple[TypedGraph | None, str | None]:
    """(the typed graph the file metadata's observation space names, the node type of its
    ``NodeAction``); (None, None) for other spaces or none recorded."""
    from offline_graph.data.graphs.space_text import parse_space

    text, action = meta.get("observation_space"), meta.get("action_space")
    typed = typed_space(parse_space(text, "observation")) if isinstance(text, str) else None
    node_type = action.partition("@")[2] or None if isinstance(action, str) else None
    return typed, node_type


def typed_spec(
    spec: EpisodeSpec, raw: RawEpisode, typed: TypedGraph | None, node_type: str | None
) -> EpisodeSpec:
    """``spec`` (read off a raw episode as for a plain graph) for a typed graph: the metadata's
    space, else the first observation's; a recorded mask means a ``NodeAction`` over
    ``node_type`` (else the type whose node count the first mask matches)."""
    first = raw.observations[0] if len(raw.observations) else None
    typed = typed or infer_typed(first)
    if typed is None:
        return spec
    level = None
    if isinstance(first, Mapping) and first.get("action_mask") is not None:
        level = "node"
        if node_type is None:
            size = np.shape(first["action_mask"])
            node_type = next(
                (t for t, x in first["x"].items() if np.shape(x)[:1] == size), typed.node_types[0]
            )
    return replace(
        spec,
        num_features=0,
        edge_dim=None,
        typed=typed,
        node_type=node_type if level else None,
        action_level=level,
    )


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
