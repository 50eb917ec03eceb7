"""Padded RLlib ``Repeated`` observations -> unpadded graph dicts (pure numpy, no Ray, no torch).

Users of RLlib's old (ModelV2) stack described a graph as a ``gymnasium.spaces.Dict`` of RLlib
``Repeated`` spaces and recorded the flat vectors that ``get_preprocessor(space)(space)
.transform(obs)`` makes. The layout, verified by running that preprocessor (Ray 2.60,
``DictFlatteningPreprocessor`` over one ``RepeatedValuesPreprocessor`` per key; float32)::

    for each key in space order (gymnasium sorts a plain dict's keys: edge_attr, edge_index, x):
        [len, elem_0 (c floats), elem_1, ..., elem_{max_len-1}]      # 1 + max_len * c floats

    x            Repeated(Box(F), max_len=N_max)   c = F: element i = node i's features
    edge_index   Repeated(Box(2), max_len=E_max)   c = 2: element j = (source, target) of edge j,
                                                   i.e. column j of our edge_index [2, E]
    edge_attr    Repeated(Box(D), max_len=E_max)   c = D: element j = edge j's features

and slots past ``len`` hold zeros. :func:`unpad` reverses it for a whole batch of vectors at
once and checks every row (the reasons below are the skip-mode counting keys):

======================  =======================================================================
``nonfinite``           a NaN or inf anywhere in the vector
``length_field``        a length slot that is not an integer in ``0..max_len``
``padding``             a nonzero value past a length (the space does not match the recording)
``empty_graph``         ``x`` has length 0 (our episodes need N >= 1)
``edge_count``          ``edge_attr``'s length differs from ``edge_index``'s
``edge_index_value``    an edge index that is not an integer
``edge_index_range``    an edge index outside ``0..N-1`` of its own graph
======================  =======================================================================

Values round-trip exactly: the preprocessor stored float32, ``x`` / ``edge_attr`` come back as
float32 and ``edge_index`` as int64 (exact while indices stay below 2**24, which float32
storage already imposed). Rows are grouped into episodes by
:mod:`offline_graph.data.migration.migrate_episodes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from offline_graph.data.episodes.action_checks import float32_finite
from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict

KEYS = ("x", "edge_index", "edge_attr")
Problem = tuple[str, str, str]
"""(reason, column, ``<what> must be <expected> (found <actual>). <hint>``) of one bad row."""
NOT_SPACE = (
    "The recorded vectors can only be unpadded with the space they were padded with: "
    "check max_len and the Box sizes."
)


@dataclass(frozen=True)
class Segment:
    """One ``Repeated`` key's part of the flat vector."""

    key: str
    offset: int
    """Flat index of the length slot; elements start at ``offset + 1``."""
    max_len: int
    child: int
    """Floats per element (F, 2 or D)."""

    @property
    def size(self) -> int:
        return 1 + self.max_len * self.child


@dataclass(frozen=True)
class RepeatedLayout:
    """The flat layout of a ``Dict`` of ``Repeated`` spaces (see the module docstring)."""

    segments: tuple[Segment, ...]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def get(self, key: str) -> Segment | None:
        return next((s for s in self.segments if s.key == key), None)

    @property
    def num_features(self) -> int:
        return self.segments[[s.key for s in self.segments].index("x")].child

    @property
    def edge_dim(self) -> int | None:
        seg = self.get("edge_attr")
        return seg.child if seg is not None else None

    def describe(self) -> dict[str, Any]:
        """JSON-able summary (the migration report's ``layout``)."""
        return {
            "size": self.size,
            "order": [s.key for s in self.segments],
            **{s.key: {"offset": s.offset, "max_len": s.max_len, "child": s.child} for s in self.segments},
        }


def layout_from_space(space: Any, name: str = "--observation-space") -> RepeatedLayout:
    """The layout of ``space``: a ``Dict`` with ``x`` and ``edge_index`` (and optionally
    ``edge_attr``) ``Repeated`` spaces of 1-D ``Box`` children, in the Dict's key order (the
    order RLlib's preprocessor writes them). ``Repeated`` is recognised by its ``child_space``
    and ``max_len`` attributes, so this module needs no Ray import."""
    example = (
        "Dict({'x': Repeated(Box(-inf, inf, (F,)), max_len=N_max), 'edge_index': "
        "Repeated(Box(0, N_max - 1, (2,)), max_len=E_max), 'edge_attr': "
        "Repeated(Box(-inf, inf, (D,)), max_len=E_max)}) (edge_attr optional)"
    )
    if not isinstance(space, gym.spaces.Dict):
        raise ConfigError(
            f"{name}: space must be a gymnasium Dict of RLlib Repeated spaces (found "
            f"{space!r}). Expected {example}."
        )
    keys = list(space.spaces)
    if "x" not in keys or "edge_index" not in keys or set(keys) - set(KEYS):
        raise ConfigError(
            f"{name}: Dict keys must be 'x', 'edge_index' and optionally 'edge_attr' "
            f"(found {keys}). Expected {example}."
        )
    segments, offset = [], 0
    for key in keys:
        sub = space.spaces[key]
        child, max_len = getattr(sub, "child_space", None), getattr(sub, "max_len", None)
        if not isinstance(child, gym.spaces.Box) or len(child.shape) > 1 or not isinstance(max_len, int):
            raise ConfigError(
                f"{name}: space[{key!r}] must be Repeated(Box of one dimension, "
                f"max_len=int) (found {sub!r}). Expected {example}."
            )
        size = int(np.prod(child.shape)) if child.shape else 1
        if (key == "edge_index" and size != 2) or size < 1 or max_len < 1:
            raise ConfigError(
                f"{name}: space[{key!r}] must have {'2' if key == 'edge_index' else '>= 1'}"
                f" values per element and max_len >= 1 (found {size} and {max_len}). "
                f"Expected {example}."
            )
        segments.append(Segment(key, offset, int(max_len), size))
        offset += segments[-1].size
    return RepeatedLayout(tuple(segments))


def dense_vectors(values: np.ndarray, lengths: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated vectors with per-row ``lengths`` -> ``([R, size] matrix, bad row indices)``;
    rows whose length is not ``size`` (a null row: length -1) are left as zeros."""
    lengths = np.asarray(lengths, np.int64)
    ok = lengths == size
    if ok.all():
        return np.asarray(values).reshape(len(lengths), size), np.zeros(0, np.int64)
    out = np.zeros((len(lengths), size), np.asarray(values).dtype)
    starts = np.concatenate([[0], np.cumsum(np.maximum(lengths, 0))[:-1]])
    for i in np.flatnonzero(ok):
        out[i] = values[starts[i] : starts[i] + size]
    return out, np.flatnonzero(~ok)


@dataclass
class Unpadded:
    """One batch of flat vectors unpadded: a graph per good row, a problem per bad one."""

    graphs: list[GraphDict | None]
    problems: dict[int, Problem] = field(default_factory=dict)
    nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    edges: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _length_text(seg: Segment, raw: np.ndarray) -> Callable[[int], str]:
    return lambda i: (
        f"Repeated {seg.key!r} length (flat index {seg.offset}) must be an integer in "
        f"0..{seg.max_len} (found {float(raw[i])!r}). {NOT_SPACE}"
    )


def _padding_text(seg: Segment, lens: np.ndarray, spill: np.ndarray) -> Callable[[int], str]:
    return lambda i: (
        f"Repeated {seg.key!r} elements past its length {int(lens[i])} must be zero "
        f"padding (found a nonzero value in element {_first(spill[i])}). {NOT_SPACE}"
    )


def unpad(vectors: np.ndarray, layout: RepeatedLayout, column: str = "obs") -> Unpadded:
    """Check and unpad ``vectors`` ``[R, layout.size]`` (module docstring); ``column`` names the
    source column in the problems. Vectorized over the batch; only bad rows are looked at one
    by one (to describe them)."""
    vec = np.asarray(vectors)
    rows = vec.shape[0]
    problems: dict[int, Problem] = {}

    def note(mask: np.ndarray, reason: str, text: Callable[[int], str]) -> None:
        for i in np.flatnonzero(mask):
            if int(i) not in problems:
                problems[int(i)] = (reason, column, text(int(i)))

    finite = np.asarray(float32_finite(vec).all(axis=1))  # RLlib's preprocessor held float32
    note(
        ~finite,
        "nonfinite",
        lambda i: (
            f"values must be finite float32 (found {float(vec[i][~float32_finite(vec[i])][0])} at flat "
            f"index {_first(~float32_finite(vec[i]))}). The recording holds NaN/inf; our episodes may not."
        ),
    )
    lens: dict[str, np.ndarray] = {}
    blocks: dict[str, np.ndarray] = {}
    for seg in layout.segments:
        raw = vec[:, seg.offset]
        ok = finite & (raw == np.floor(raw)) & (raw >= 0) & (raw <= seg.max_len)
        note(~ok, "length_field", _length_text(seg, raw))
        lens[seg.key] = np.where(ok, raw, 0).astype(np.int64)
        block = vec[:, seg.offset + 1 : seg.offset + seg.size].reshape(rows, seg.max_len, seg.child)
        blocks[seg.key] = block
        unused = np.arange(seg.max_len)[None, :] >= lens[seg.key][:, None]
        spill = (block != 0).any(axis=2) & unused
        note(spill.any(axis=1), "padding", _padding_text(seg, lens[seg.key], spill))
    n, e = lens["x"], lens["edge_index"]
    note(
        n == 0,
        "empty_graph",
        lambda i: (
            "Repeated 'x' length must be >= 1 (found 0 nodes). Our episodes need a node in "
            "every graph; an empty observation cannot be migrated."
        ),
    )
    if "edge_attr" in lens:
        note(
            lens["edge_attr"] != e,
            "edge_count",
            lambda i: (
                f"Repeated 'edge_attr' length must equal 'edge_index' length {int(e[i])} (found "
                f"{int(lens['edge_attr'][i])}). Every edge needs one feature row."
            ),
        )
    used_e = np.arange(blocks["edge_index"].shape[1])[None, :] < e[:, None]
    pairs = blocks["edge_index"][used_e]
    owner = np.repeat(np.arange(rows), e)
    not_int = (pairs != np.floor(pairs)).any(axis=1)
    outside = ((pairs < 0) | (pairs >= n[owner][:, None])).any(axis=1)

    def edge_text(kind: str) -> Callable[[int], str]:
        def text(i: int) -> str:
            own = blocks["edge_index"][i, : e[i]]
            bad = (
                (own != np.floor(own)).any(axis=1)
                if kind == "value"
                else ((own < 0) | (own >= n[i])).any(axis=1)
            )
            j = _first(bad)
            expected = "integers" if kind == "value" else f"node indices in 0..{int(n[i]) - 1}"
            return (
                f"Repeated 'edge_index' element {j} must be {expected} (found "
                f"{own[j].tolist()} with {int(n[i])} nodes). {NOT_SPACE}"
            )

        return text

    for bad_edges, kind in ((not_int, "value"), (outside, "range")):
        mask = np.zeros(rows, bool)
        mask[owner[bad_edges]] = True
        note(mask, f"edge_index_{kind}", edge_text(kind))
    return _extract(blocks, lens, layout, problems)


def _extract(
    blocks: dict[str, np.ndarray],
    lens: dict[str, np.ndarray],
    layout: RepeatedLayout,
    problems: dict[int, Problem],
) -> Unpadded:
    """The graphs of the rows without problems (bad rows: None)."""
    rows = len(lens["x"])
    good = np.ones(rows, bool)
    good[list(problems)] = False
    parts: dict[str, list[np.ndarray]] = {}
    for seg in layout.segments:
        count = np.where(good, lens[seg.key], 0)
        used = np.arange(seg.max_len)[None, :] < count[:, None]
        dtype = np.int64 if seg.key == "edge_index" else np.float32
        values = blocks[seg.key][used].astype(dtype)
        parts[seg.key] = np.split(values, np.cumsum(count)[:-1])
    graphs: list[GraphDict | None] = [None] * rows
    for i in np.flatnonzero(good):
        graph = {"x": parts["x"][i], "edge_index": np.ascontiguousarray(parts["edge_index"][i].T)}
        if "edge_attr" in parts:
            graph["edge_attr"] = parts["edge_attr"][i]
        graphs[i] = graph
    return Unpadded(graphs, problems, lens["x"], lens["edge_index"])
