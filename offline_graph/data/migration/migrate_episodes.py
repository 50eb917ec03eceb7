"""Old transition rows -> finished episodes: grouping by ``eps_id``, ordering by ``t``, checks
(pure numpy, no Ray, no torch). The vectors are unpadded by :mod:`offline_graph.data.migration.migrate`.

An episode is the rows of one ``eps_id`` sorted by ``t``: ``obs_0..obs_{T-1}`` from ``obs``,
``obs_T`` from the last row's ``new_obs``. Rows may come in any order and from several files;
an episode is emitted as soon as its rows ``t = 0..T-1`` are all there and the last one is
terminated or truncated (an episode starting at ``t > 0`` is emitted at the end of the input,
when no earlier row can arrive any more). Memory holds the open episodes' unpadded graphs only.

Row and episode checks (besides the vector checks of ``data.migrate``), by skip-mode reason:

=====================  ==========================================================================
``vector_length``      ``obs`` / ``new_obs`` length differs from the layout's (found by the reader)
``eps_id``             a row without an eps_id (counted once per row: it has no episode)
``t_value``            ``t`` missing, negative or not an integer
``action``             an action that is not an integer in the action space (node / edge
                       actions: below this step's node / edge count)
``reward``             a missing or non-finite reward
``t_duplicate``        two rows of one episode with the same ``t``
``t_gap``              a missing step between the first and the last row of an episode
``done_before_end``    a terminated / truncated row that is not the episode's last
``unfinished``         the input ends before the episode's terminated / truncated row
``new_obs_mismatch``   a row's ``new_obs`` differs from the next row's ``obs``
``duplicate_episode``  rows of an eps_id whose episode was already written
=====================  ==========================================================================

``raise`` stops at the first problem (the message names file, row, eps_id, t and column);
``skip`` drops the whole episode and counts it once, under its first problem's reason.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from offline_graph.data.episodes.action_checks import float32_finite
from offline_graph.data.errors import GraphValidationError, OfflineGraphError, where
from offline_graph.data.graphs.graph import GraphDict
from offline_graph.data.migration.migrate import Problem, RepeatedLayout, unpad

OnError = Literal["raise", "skip"]


@dataclass
class OldBatch:
    """A batch of old transition rows as numpy columns (what the job's file readers make)."""

    file: str
    rows: np.ndarray
    """int64 [R]: each transition's row in its file (JSON: the n-th object, 0-based)."""
    eps_id: list[Any]
    """[R] the recorded ids (int or str; None where missing)."""
    t: np.ndarray
    """float64 [R] (NaN where missing)."""
    obs: np.ndarray
    """[R, layout.size] flat vectors (zeros where ``problems`` says the row is bad)."""
    new_obs: np.ndarray
    actions: np.ndarray
    """float64 [R] (NaN where missing)."""
    rewards: np.ndarray
    terminated: np.ndarray
    """bool [R]"""
    truncated: np.ndarray
    problems: dict[int, Problem] = field(default_factory=dict)
    """Rows the reader already found bad (e.g. ``vector_length``)."""
    done_column: str = "terminateds"
    """The flag column named in messages: ``terminateds`` or ``dones``."""


@dataclass(slots=True)
class _Step:
    file: str
    row: int
    graph: GraphDict
    action: int
    reward: float
    done: bool
    obs_digest: bytes
    next_digest: bytes
    final: GraphDict | None
    terminated: bool
    truncated: bool


@dataclass
class MigratedEpisode:
    """One rebuilt episode: ``len(observations) == len(actions) + 1``."""

    id: str
    observations: list[GraphDict]
    actions: list[int]
    rewards: list[float]
    terminated: bool
    truncated: bool
    t_start: int


_WEIGHTS: dict[int, np.ndarray] = {}


def _digests(vectors: np.ndarray, rows: np.ndarray) -> dict[int, bytes]:
    """A 128-bit checksum per row of ``vectors[rows]``: two weighted sums (mod 2**64) of the
    float32 bit patterns, vectorized (to tell a ``new_obs`` from the next ``obs``; not a
    cryptographic hash: it guards against recording mistakes, not against forgery)."""
    with np.errstate(over="ignore"):  # a value beyond float32 digests as inf (then mismatches)
        bits = np.ascontiguousarray(vectors[rows], np.float32).view(np.uint32)
    size = bits.shape[1]
    if size not in _WEIGHTS:
        rng = np.random.default_rng(size)
        _WEIGHTS[size] = rng.integers(1, 2**63, (size, 2), dtype=np.uint64) | np.uint64(1)
    sums = np.zeros((len(rows), 2), np.uint64)
    for start in range(0, len(rows), 256):  # bounded temporaries
        sums[start : start + 256] = bits[start : start + 256].astype(np.uint64) @ _WEIGHTS[size]
    return {int(i): s.tobytes() for i, s in zip(rows, sums)}


class Assembler:
    """Feed :class:`OldBatch` es with :meth:`add`, then call :meth:`finish`; both return the
    episodes completed. ``action_level`` / ``num_actions``: the action space (None, K) for
    ``Discrete(K)``, ("node" | "edge", MAX) for selections; ``num_actions=None``: any
    non-negative integer."""

    def __init__(
        self,
        layout: RepeatedLayout,
        on_error: OnError = "raise",
        action_level: str | None = None,
        num_actions: int | None = None,
    ) -> None:
        self.layout, self.on_error = layout, on_error
        self.action_level, self.num_actions = action_level, num_actions
        self.open: dict[str, dict[int, _Step]] = {}
        self.written: set[str] = set()
        self.dropped: set[str] = set()
        self.rejected: Counter = Counter()
        self.examples: dict[str, str] = {}
        self.transitions_rejected = 0

    def reject(self, err: OfflineGraphError, key: str | None, rows: int = 1) -> None:
        """Raise ``err`` (raise mode), or count it and drop episode ``key`` (skip mode): its open
        rows, ``rows`` more (the bad row being read) and every later row of ``key``."""
        if self.on_error == "raise":
            raise err
        reason = err.reason or "invalid"
        if key is None or key not in self.dropped:
            self.rejected[reason] += 1
            self.examples.setdefault(reason, str(err))
        self.transitions_rejected += rows + (len(self.open.pop(key, {})) if key is not None else 0)
        if key is not None:
            self.dropped.add(key)

    def _row_problems(
        self, b: OldBatch, graphs: list[GraphDict | None], nodes: np.ndarray, edges: np.ndarray
    ) -> dict[int, Problem]:
        problems: dict[int, Problem] = {}
        t, a = b.t, b.actions
        with np.errstate(invalid="ignore"):
            bad_t = ~(np.isfinite(t) & (t == np.floor(t)) & (t >= 0))
            any_action = 2.0**63  # no action space: any int64 (what the episode row can carry)
            limit = np.full(len(a), any_action if self.num_actions is None else float(self.num_actions))
            if self.action_level is not None:
                limit = np.minimum(limit, nodes if self.action_level == "node" else edges)
            bad_a = ~(np.isfinite(a) & (a == np.floor(a)) & (a >= 0) & (a < limit))
        for i in np.flatnonzero(bad_t):
            problems[int(i)] = (
                "t_value",
                "t",
                f"t must be a non-negative integer (found {float(t[i])!r}). "
                "t is the step index within the episode.",
            )
        for i in np.flatnonzero(bad_a):
            if graphs[i] is not None:
                kind = {
                    None: "",
                    "node": " (a node of this step's graph)",
                    "edge": " (an edge of this step's graph)",
                }[self.action_level]
                expected = (
                    "a non-negative int64"
                    if limit[i] == 2.0**63
                    else f"an integer in 0..{limit[i] - 1:.0f}{kind}"
                )
                problems.setdefault(
                    int(i),
                    (
                        "action",
                        "actions",
                        (
                            f"action must be {expected} (found {float(a[i])!r}). Check "
                            "--action-space against the recording."
                        ),
                    ),
                )
        for i in np.flatnonzero(~float32_finite(b.rewards)):
            problems.setdefault(
                int(i),
                (
                    "reward",
                    "rewards",
                    (
                        f"reward must be a finite number in float32's range (found "
                        f"{float(b.rewards[i])!r}). The row is damaged."
                    ),
                ),
            )
        return problems

    def add(self, b: OldBatch) -> list[MigratedEpisode]:
        """Add one batch's rows; returns the episodes it completed."""
        obs = unpad(b.obs, self.layout, "obs")
        problems = {**obs.problems, **b.problems}
        for i, p in self._row_problems(b, obs.graphs, obs.nodes, obs.edges).items():
            problems.setdefault(i, p)
        done = b.terminated | b.truncated
        last = np.array([i for i in np.flatnonzero(done) if int(i) not in problems], np.int64)
        finals = unpad(b.new_obs[last], self.layout, "new_obs")
        for j, p in finals.problems.items():
            problems.setdefault(int(last[j]), p)
        good = np.array([i for i in range(len(b.rows)) if i not in problems], np.int64)
        obs_digest, next_digest = _digests(b.obs, good), _digests(b.new_obs, good)
        final_of = {int(i): finals.graphs[j] for j, i in enumerate(last)}
        touched: dict[str, None] = {}
        for i in range(len(b.rows)):
            raw_id = b.eps_id[i]
            key = None if raw_id is None else str(raw_id)
            t = int(b.t[i]) if np.isfinite(b.t[i]) and b.t[i] == np.floor(b.t[i]) else None
            if key is not None and key in self.dropped:
                self.transitions_rejected += 1
                continue
            if key is None:
                problems.setdefault(
                    i,
                    (
                        "eps_id",
                        "eps_id",
                        "eps_id must be present (found null). Rows are grouped into episodes by eps_id.",
                    ),
                )
            if i in problems:
                reason, column, text = problems[i]
                ctx = where(file=b.file, row=int(b.rows[i]), episode_id=key, t=t, column=column)
                self.reject(GraphValidationError(f"{ctx}: {text}", reason=reason), key)
                continue
            assert key is not None and t is not None
            ctx = where(file=b.file, row=int(b.rows[i]), episode_id=key, t=t, column="eps_id")
            if key in self.written:  # counted once; later rows of the id are dropped silently
                self.reject(
                    GraphValidationError(
                        f"{ctx}: rows of an episode must come before it ends (found this row after the "
                        "episode's last step was written). Two recordings share eps_id values; "
                        "migrate them separately.",
                        reason="duplicate_episode",
                    ),
                    key,
                )
                continue
            steps = self.open.setdefault(key, {})
            if t in steps:
                ctx = where(file=b.file, row=int(b.rows[i]), episode_id=key, t=t, column="t")
                self.reject(
                    GraphValidationError(
                        f"{ctx}: t must be unique within an episode (found t={t} "
                        f"also in file {steps[t].file}, row {steps[t].row}). The same transition was "
                        "recorded twice, or two episodes share an eps_id.",
                        reason="t_duplicate",
                    ),
                    key,
                )
                continue
            graph = obs.graphs[i]
            assert graph is not None  # rows without problems have their graph
            steps[t] = _Step(
                b.file,
                int(b.rows[i]),
                graph,
                int(b.actions[i]),
                float(b.rewards[i]),
                bool(done[i]),
                obs_digest[i],
                next_digest[i],
                final_of.get(i),
                bool(b.terminated[i]),
                bool(b.truncated[i]),
            )
            touched[key] = None
        return [
            ep
            for key in touched
            if key in self.open
            for ep in [self._complete(key, b.done_column, at_end=False)]
            if ep is not None
        ]

    def finish(self, done_column: str = "terminateds") -> list[MigratedEpisode]:
        """End of input: complete or reject every episode still open."""
        out = []
        for key in list(self.open):
            ep = self._complete(key, done_column, at_end=True)
            if ep is not None:
                out.append(ep)
        return out

    def _complete(self, key: str, done_column: str, at_end: bool) -> MigratedEpisode | None:
        steps = self.open[key]
        ts = sorted(steps)
        ends = [t for t in ts if steps[t].done]

        def fail(reason: str, t: int, column: str, text: str) -> None:
            s = steps[t]
            ctx = where(file=s.file, row=s.row, episode_id=key, t=t, column=column)
            self.reject(GraphValidationError(f"{ctx}: {text}", reason=reason), key, rows=0)

        if ends and ends[0] != ts[-1]:
            fail(
                "done_before_end",
                ends[0],
                done_column,
                (
                    f"a terminated/truncated row must be the episode's last (found step t={ts[-1]} "
                    "after it). Two episodes share an eps_id, or the flags are shifted."
                ),
            )
            return None
        if not ends:
            if at_end:
                fail(
                    "unfinished",
                    ts[-1],
                    done_column,
                    (
                        f"the episode's last row must be terminated or truncated (found neither; the "
                        f"input ends after t={ts[-1]}). Only finished episodes are migrated; an episode "
                        "cut off by the end of the recording is dropped."
                    ),
                )
            return None
        if len(ts) != ts[-1] - ts[0] + 1:
            if at_end:
                k = next(k for k in range(len(ts) - 1) if ts[k + 1] != ts[k] + 1)
                fail(
                    "t_gap",
                    ts[k + 1],
                    "t",
                    (
                        f"steps must be contiguous (found t={ts[k]} then t={ts[k + 1]}: "
                        f"t={ts[k] + 1} missing). Rows of the episode are missing from the input."
                    ),
                )
            return None
        if ts[0] != 0 and not at_end:
            return None
        for a, b in itertools.pairwise(ts):
            if steps[a].next_digest != steps[b].obs_digest:
                fail(
                    "new_obs_mismatch",
                    a,
                    "new_obs",
                    (
                        f"new_obs must equal the next row's obs (found it differs from t={b}'s obs in "
                        f"file {steps[b].file}, row {steps[b].row}). obs_T would be ambiguous."
                    ),
                )
                return None
        del self.open[key]
        self.written.add(key)
        end = steps[ts[-1]]
        assert end.final is not None  # a done row without problems has its new_obs graph
        return MigratedEpisode(
            id=key,
            observations=[steps[t].graph for t in ts] + [end.final],
            actions=[steps[t].action for t in ts],
            rewards=[steps[t].reward for t in ts],
            terminated=end.terminated,
            truncated=end.truncated,
            t_start=ts[0],
        )
