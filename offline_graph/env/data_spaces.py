"""Where the observation and action spaces come from: one resolver for ``inspect``, ``convert``,
``train``, ``evaluate``, ``record`` and :func:`offline_graph.configure`.

Each space (observation, action) is taken from the first of these that has it:

1. the file metadata: keys ``observation_space`` / ``action_space`` (compact text, see
   :mod:`offline_graph.data.graphs.space_text`), written by ``record``, ``convert`` and ``migrate``;
   older files without them: the env their metadata names (left out of the comparison below
   when 2 or 3 is given and that env cannot be built);
2. ``--env`` (with ``--env-config``): the env's spaces;
3. explicit ``--observation-space`` / ``--action-space`` (texts or space objects);
4. else inferred from the data: the first ``INFER_EPISODES`` episodes of at most
   ``INFER_FILES`` files, with a warning that says how to pin them.

Every source that is given must agree (compared by compact text), else a ConfigError names
both. The default env (``offline_graph/Graph-v0``) is used only when the metadata names it.
The env to evaluate in is ``--env``, else the env the metadata names, else None (then
``train`` reports offline metrics on held-out episodes instead of env returns).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import gymnasium as gym

from offline_graph.data.episodes.codec import RawEpisode, decode_state
from offline_graph.data.errors import ConfigError, DecodeError
from offline_graph.data.store.files import FileScan, sample_rows, scan_files
from offline_graph.data.graphs.space_text import Role, infer_spaces, parse_space, space_code, space_text

logger = logging.getLogger(__name__)

ROLES: tuple[Role, Role] = ("observation", "action")
METADATA_KEYS = {"observation": "observation_space", "action": "action_space"}
INFER_EPISODES = 64
"""Inference decodes at most this many episodes ..."""
INFER_FILES = 4
"""... from at most this many files (the first ones, in path order)."""
METADATA_LABEL = "the file metadata"


@dataclass(frozen=True)
class ResolvedSpaces:
    """The spaces of a data set, where each came from, and the env to evaluate in."""

    observation_space: gym.Space
    action_space: gym.Space
    sources: dict[str, str]
    """Per role ("observation", "action"): where the space came from (a sentence fragment)."""
    env: str | None = None
    """The env to evaluate in: given, else recorded in the metadata, else None."""
    env_config: dict = field(default_factory=dict)
    """Its keyword arguments."""
    inferred: str | None = None
    """What inference read ("the first 12 episodes of 1 file"), when any space was inferred."""

    @property
    def texts(self) -> dict[str, str]:
        """``{"observation_space": ..., "action_space": ...}`` (what converted rows record)."""
        return {
            "observation_space": space_text(self.observation_space),
            "action_space": space_text(self.action_space),
        }

    @property
    def source(self) -> str:
        """Where the spaces came from: one fragment, or one per role when they differ."""
        obs, act = self.sources["observation"], self.sources["action"]
        return obs if obs == act else f"observation: {obs}; action: {act}"

    def describe(self) -> str:
        """``graph:F=5 / discrete:3 (inferred from the first 12 episodes of 1 file)``."""
        texts = self.texts
        return f"{texts['observation_space']} / {texts['action_space']} ({self.source})"

    def pin_flags(self) -> str:
        """The command-line options that pin these spaces."""
        texts = self.texts
        return f"--observation-space {texts['observation_space']} --action-space {texts['action_space']}"

    def pin_code(self) -> str:
        """The Python that pins these spaces on an RLlib config."""
        return (
            f"config.environment(observation_space={space_code(self.observation_space)}, "
            f"action_space={space_code(self.action_space)})"
        )


@dataclass
class _Candidate:
    label: str
    space: gym.Space
    rank: int
    """Which object to keep when sources agree: user objects (0) > env spaces (1) > parsed texts (2)."""


def _sample_episodes(scan: FileScan) -> tuple[list[RawEpisode], int]:
    """Up to ``INFER_EPISODES`` decodable episodes of the first ``INFER_FILES`` files (read
    through the scan: a file the multi-agent probe opened is not opened again)."""
    return sample_rows(
        scan, lambda item, path: decode_state(item, file=path), INFER_EPISODES, INFER_FILES, DecodeError
    )


def _infer(scan: FileScan, who: str) -> tuple[gym.Space, gym.Space, str]:
    if scan.kind == "transitions":
        raise ConfigError(
            f"{who}: converted rows must record observation_space / action_space (or env) in "
            "their metadata (found neither). Pass --observation-space and --action-space (or "
            "--env), or re-convert the episodes with this offline_graph."
        )
    raws, files = _sample_episodes(scan)
    if not raws:
        raise ConfigError(
            f"{who}: the data must hold a decodable episode to infer the spaces from (found none "
            f"in the first {files} file(s)). Pass --observation-space and --action-space, or --env."
        )
    obs, act = infer_spaces(raws, where=f"{who}: data")
    what = f"the first {len(raws)} episode{'s' * (len(raws) != 1)} of {files} file{'s' * (files != 1)}"
    return obs, act, what


def _make_env(name: str, config: dict | None) -> gym.Env:
    from offline_graph.env.making import make_env

    return make_env(name, config)


def _check_agreement(who: str, role: str, found: list[_Candidate]) -> _Candidate:
    """The candidate to use; ConfigError when two given sources disagree."""
    first = found[0]
    first_text = space_text(first.space)
    for other in found[1:]:
        other_text = space_text(other.space)
        if other_text != first_text:
            raise ConfigError(
                f"{who}: the {role} space must be the same in {first.label} and {other.label} "
                f"(found {first_text} and {other_text}). Give only one of them, or the one "
                "that matches the data."
            )
    best = min(found, key=lambda c: c.rank)
    labels = [first.label] + [c.label for c in found[1:] if c.label != first.label]
    label = first.label if len(labels) == 1 else f"{labels[0]}; agrees with {', '.join(labels[1:])}"
    return _Candidate(label, best.space, best.rank)


def resolve_spaces(
    input_: Any = None,
    *,
    scan: FileScan | None = None,
    env: str | None = None,
    env_config: dict | None = None,
    observation_space: str | gym.Space | None = None,
    action_space: str | gym.Space | None = None,
    on_error: Literal["raise", "skip"] = "raise",
    who: str = "offline_graph",
    explicit_labels: dict[str, str] | None = None,
    announce: Callable[[str], None] | None = None,
    pin: Literal["flags", "code"] = "flags",
) -> ResolvedSpaces:
    """The spaces of the data at ``input_`` (or of an earlier ``scan``), by the module's order.

    ``who`` starts error messages; ``explicit_labels`` names the explicit sources in them
    (default ``--observation-space`` / ``--action-space``); ``announce`` receives the warning
    when a space is inferred (default: ``logging`` warning); ``pin`` says how that warning
    tells to pin the spaces (command-line options or Python).
    """
    if scan is None:
        scan = scan_files(input_, on_error)
    meta = scan.metadata or {}
    labels = dict(explicit_labels or {role: f"--{role}-space" for role in ROLES})
    if observation_space is not None and action_space is not None and len(set(labels.values())) > 1:
        labels = {role: " / ".join(labels[r] for r in ROLES) for role in ROLES}
    found: dict[str, list[_Candidate]] = {role: [] for role in ROLES}
    for role in ROLES:
        text = meta.get(METADATA_KEYS[role])
        if text:
            try:
                space = parse_space(str(text), role)
            except ConfigError as err:
                raise ConfigError(
                    f"{who}: metadata key {METADATA_KEYS[role]!r} of {scan.files[0]} must be a "
                    f"compact space text (found {text!r}: {err}). Re-record or re-convert the data."
                ) from None
            found[role].append(_Candidate(METADATA_LABEL, space, 2))
    if env:
        instance = _make_env(env, env_config)
        for role, space in zip(ROLES, (instance.observation_space, instance.action_space)):
            found[role].append(_Candidate(f"--env {env}", space, 1))
        instance.close()
    for role, given in zip(ROLES, (observation_space, action_space)):
        if given is not None:
            space = parse_space(given, role) if isinstance(given, str) else given
            found[role].append(_Candidate(labels[role], space, 2 if isinstance(given, str) else 0))
    recorded = meta.get("env")
    untexted = [role for role in ROLES if not any(c.label == METADATA_LABEL for c in found[role])]
    if recorded and untexted:  # older files: the env they name stands for their spaces
        try:
            instance = _make_env(str(recorded), meta.get("env_config"))
        except Exception as err:
            if any(not found[role] for role in untexted):
                raise
            logger.info("%s: not comparing with the recorded env %s (%s)", who, recorded, err)
        else:
            label = f"the env {recorded} recorded in the file metadata"
            for role, space in zip(ROLES, (instance.observation_space, instance.action_space)):
                if role in untexted:
                    found[role].insert(0, _Candidate(label, space, 1))
            instance.close()
    inferred = None
    missing = [role for role in ROLES if not found[role]]
    if missing:
        obs, act, inferred = _infer(scan, who)
        for role, space in zip(ROLES, (obs, act)):
            if role in missing:
                found[role].append(_Candidate(f"inferred from {inferred}", space, 2))
    chosen = {role: _check_agreement(who, role, found[role]) for role in ROLES}
    eval_env = env or (str(recorded) if recorded else None)
    if env:
        eval_config = dict(env_config or {})
    else:
        eval_config = dict(env_config if env_config is not None else meta.get("env_config") or {})
    resolved = ResolvedSpaces(
        observation_space=chosen["observation"].space,
        action_space=chosen["action"].space,
        sources={role: chosen[role].label for role in ROLES},
        env=eval_env,
        env_config=eval_config if eval_env else {},
        inferred=inferred,
    )
    if missing:
        texts = resolved.texts
        shown = " / ".join(texts[METADATA_KEYS[r]] for r in ROLES if r in missing)
        how = resolved.pin_flags() if pin == "flags" else resolved.pin_code()
        message = f"spaces inferred from the data ({inferred}): {shown}; pin them with {how}"
        (announce or logger.warning)(message)
    return resolved
