"""The project's exceptions: one base class, one class per kind of failure.

Every message has the form ``<where>: <what> must be <expected> (found <actual>). <hint>``,
where ``<where>`` is as precise as known (file, row, episode id, step t, column).
All classes subclass :class:`ValueError` so callers that catch ``ValueError`` keep working.
"""

from __future__ import annotations


class OfflineGraphError(ValueError):
    """Base class of every error raised by offline_graph on bad input or configuration."""


class FormatVersionError(OfflineGraphError):
    """A file was written in a format (kind or version) this reader cannot read."""


class SchemaError(OfflineGraphError):
    """A file lacks a required column, or a column has the wrong Arrow type."""


class DecodeError(OfflineGraphError):
    """An episode row could not be decoded (not msgpack, or not an episode state)."""


class GraphValidationError(OfflineGraphError):
    """A decoded episode is not a valid graph episode for the configured spaces."""


class ConfigError(OfflineGraphError):
    """An RLlib / offline_graph setting is missing or conflicts with graph training."""


def where(
    file: str | None = None,
    row: int | None = None,
    episode_id: str | None = None,
    t: int | None = None,
    column: str | None = None,
) -> str:
    """Format the ``<where>`` part of an error message from whatever is known."""
    parts = []
    if file is not None:
        parts.append(f"file {file}")
    if row is not None:
        parts.append(f"row {row}")
    if episode_id is not None:
        parts.append(f"episode {episode_id!r}")
    if t is not None:
        parts.append(f"step t={t}")
    if column is not None:
        parts.append(f"column {column!r}")
    return ", ".join(parts) if parts else "offline_graph"
