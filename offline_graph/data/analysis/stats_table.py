"""The human-readable table of ``offline-graph inspect`` (:func:`format_table` of
:func:`offline_graph.data.analysis.stats.summarize`'s numbers)."""

from __future__ import annotations

from typing import Any


def _fmt_bytes(n: float) -> str:
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def format_table(s: dict[str, Any]) -> str:
    """A small human-readable table of :func:`summarize`'s numbers."""
    if s.get("multi_agent"):
        from offline_graph.data.analysis.ma_stats import format_multi_agent_table

        return format_multi_agent_table(s)
    rows = [
        ("files", str(s["files"])),
        ("format version", ", ".join(str(v) for v in s["format_version"]) or "-"),
        ("episodes", str(s["episodes"])),
        ("transitions", str(s["transitions"])),
    ]
    if s.get("spaces"):  # set by `offline-graph inspect` (offline_graph.env.data_spaces)
        sp = s["spaces"]
        rows.append(("spaces", f"{sp['observation_space']} / {sp['action_space']} ({sp['source']})"))
    if s["episodes_rejected"]:
        reasons = ", ".join(f"{k}={v}" for k, v in s["rejected_by_reason"].items())
        rows.append(("rejected", f"{s['episodes_rejected']} ({reasons})"))
    if s["episodes"]:
        r = s["return"]
        rows += [
            ("return", f"mean {r['mean']:.3f}  min {r['min']:.3f}  max {r['max']:.3f}"),
            ("terminated / truncated", f"{s['terminated']} / {s['truncated']}"),
            ("F / D / k", f"{s['num_features']} / {s['edge_dim']} / {s['num_actions']}"),
        ]
        if s.get("action_level"):
            rows[-1] = (
                "F / D / actions",
                f"{s['num_features']} / {s['edge_dim']} / "
                f"{s['action_level']} selection with masks (largest action "
                f"{s['num_actions'] - 1})",
            )
        if s.get("typed"):
            largest = ", ".join(f"{k} {v}" for k, v in s["typed"]["largest"].items())
            rows[-1] = (
                "actions",
                f"{s['action_level'] or 'graph'}-level (largest action {s['num_actions'] - 1})",
            )
            rows.append(("typed graph", f"{s['typed']['space']}; largest counts: {largest}"))
        if s.get("globals_dim"):
            rows.append(
                ("graph-level parts G", f"{s['globals_dim']} float32 per observation (one row per graph)")
            )
        for name in ("nodes", "edges"):
            p = s[name]
            rows.append((f"{name} per obs", "  ".join(f"{k} {v:g}" for k, v in p.items())))
        real = s["bytes_per_transition"]
        box, rep = s["padded_box"], s["padded_repeated"]
        padded = [(f"padded Box (N={box['n_max']}, E={box['e_max']})", box)]
        padded.append((f"padded Repeated (N={rep['n_max']}, N^2 edges)", rep))
        if s.get("typed"):  # one padded layout: each type to its largest count
            padded = [("padded per type (largest counts)", box)]
        rows.append(("bytes / transition", f"{real:.1f} ({_fmt_bytes(real)})"))
        for name, p in padded:
            size = p["bytes_per_transition"]
            rows.append((name, f"{size} ({_fmt_bytes(size)})  {p['x_fold']:.1f}x real"))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    for reason, msg in s.get("first_error_by_reason", {}).items():
        lines.append(f"first {reason}: {msg}")
    return "\n".join(lines)
