"""The forms a task's targets take, each ``{what, value, holds}`` (``se`` too for a gap
between two lines), or None when a line it needs was not run: :func:`at_least` (a statistic of
one line), :func:`gap` (the difference of two lines' means) and :func:`near` (a line's mean
against a baseline's score). ``stats``: the table lines' statistics by key (``row`` or
``row/module``)."""

from __future__ import annotations

import math
from typing import Any

Stats = dict[str, dict[str, Any]]


def at_least(stats: Stats, key: str, stat: str, low: float) -> dict[str, Any] | None:
    """``stats[key][stat] >= low`` (``stat``: ``mean`` or ``min`` over the seeds)."""
    if key not in stats:
        return None
    value = stats[key][stat]
    word = "min over seeds" if stat == "min" else stat
    return {"what": f"{key}: {word} >= {low:g}", "value": value, "holds": value >= low}


def gap(stats: Stats, a: str, b: str, low: float | None) -> dict[str, Any] | None:
    """``a``'s mean minus ``b``'s, with the standard error of the difference; holds when it is
    ``>= low`` (``low=None``: within two standard errors of 0, "within noise")."""
    if a not in stats or b not in stats:
        return None
    sa, sb = stats[a], stats[b]
    se = math.sqrt(sa["std"] ** 2 / len(sa["scores"]) + sb["std"] ** 2 / len(sb["scores"]))
    diff = sa["mean"] - sb["mean"]
    if low is None:
        return {
            "what": f"{a} - {b}: within noise (2 s.e.)",
            "value": diff,
            "se": se,
            "holds": abs(diff) <= 2 * se,
        }
    return {"what": f"{a} - {b}: mean >= {low:g}", "value": diff, "se": se, "holds": diff >= low}


def near(stats: Stats, key: str, name: str, score: float, tolerance: float) -> dict[str, Any] | None:
    """``key``'s mean within ``tolerance`` of the baseline ``name``'s normalized ``score``."""
    if key not in stats:
        return None
    diff = stats[key]["mean"] - score
    what = f"{key}: mean within {tolerance:g} of the {name}'s {score:.1f}"
    return {"what": what, "value": diff, "holds": abs(diff) <= tolerance}


def present(*found: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The targets that the lines run can check, in the order given."""
    return [t for t in found if t is not None]
