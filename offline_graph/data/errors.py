"""The project's exceptions: one base class, one class per kind of failure.

Every message has the form ``<where>: <what> must be <expected> (found <actual>). <hint>``,
where ``<where>`` is as precise as known (file, row, episode id, step t, column).
All classes subclass :class:`ValueError` so callers that catch ``ValueError`` keep working.
"""

from __future__ import annotations


class OfflineGraphError(ValueError):
    """Base class of every error raised by offline_graph on bad input or configuration.

    ``reason`` is the short rejection reason that skip mode counts by (e.g. ``"schema"``,
    ``"duplicate_id"``, a validation check's name); None where there is none.
    """

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


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


class OutputExistsError(ConfigError, FileExistsError):
    """A job's output directory already holds files (a ``FileExistsError`` too, what it was
    before it became a ConfigError the CLI prints as one line)."""


class StorageError(OfflineGraphError):
    """Object storage did not answer a request on a URI within the retry policy (endpoint
    down or unreachable, credentials refused); see :mod:`offline_graph.data.store.storage`."""


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


REASON_SUFFIX = " [reason: {}]"


def find_project_error(err: BaseException) -> OfflineGraphError | None:
    """The offline_graph error inside a (possibly Ray-wrapped) exception chain, if any.

    Ray re-raises worker exceptions wrapped (``RayTaskError``, Ray Data's
    ``UserCodeException``) and does not always keep the original object; then the error is
    rebuilt from the last ``offline_graph.data.errors.<Class>: <message>`` line of the text.
    """
    import re
    import sys

    seen: set[int] = set()
    stack: list[BaseException | None] = [err]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OfflineGraphError):
            return e
        stack += [e.__cause__, e.__context__, getattr(e, "cause", None)]
    matches = re.findall(r"offline_graph\.(?:data\.)?errors\.(\w+): (.*)", str(err))
    if not matches:
        return None
    name, message = matches[-1]
    cls = getattr(sys.modules[__name__], name, OfflineGraphError)
    reason = re.search(r"\[reason: (\w+)\]$", message.strip())
    return cls(message.strip(), reason=reason.group(1) if reason else None)


def reraise_project_error(err: BaseException) -> None:
    """Raise the offline_graph error found in ``err``'s chain as itself (no Ray wrapping)."""
    found = find_project_error(err)
    if found is not None:
        raise found from None
