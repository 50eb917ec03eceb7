"""Multi-agent episode files: per-agent spaces, per-agent validation, and ``inspect`` numbers.

Each agent id has its own spaces: the file metadata's ``agent_spaces`` (``{str(agent_id):
{"observation_space": text, "action_space": text}}``, compact texts of
:mod:`offline_graph.data.graphs.space_text`), else inferred per agent id from the first
``INFER_EPISODES`` decodable episodes of the first ``INFER_FILES`` files
(:func:`~offline_graph.data.graphs.space_text.infer_spaces` over that agent's steps). Agents are keyed
by ``str(agent_id)`` (the ``agent_id`` column of converted rows). Every agent's steps are
validated with :func:`offline_graph.data.episodes.multi_agent.read_agent_episodes` against its agent's
spec; a bad agent rejects its whole episode (the message names file, row, episode, agent,
step and column), an agent id without spaces is rejected with reason ``unknown_agent``.

``inspect`` numbers per agent id (:func:`summarize_multi_agent`): episodes it appears in, its
steps, node / edge count percentiles over all of its observations (its ``T+1`` per episode,
numpy's linear interpolation), and its return (sum of its own rewards per episode) mean / min /
max; per recorded module id (the recording's mapping, when the rows carry one) agents, episodes
and steps; total agent steps; and rejections by reason as for single-agent files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from offline_graph.data.errors import (
    ConfigError,
    GraphValidationError,
    where,
)
from offline_graph.data.store.files import FileScan, FirstRows, read_episode_table, sample_rows
from offline_graph.data.store.format import read_file_metadata
from offline_graph.data.episodes.multi_agent import (
    AgentEpisode,
    MultiAgentRaw,
    decode_multi_agent,
    is_multi_agent,
    unpack,
)
from offline_graph.data.episodes.reader import OnError, ReadStats, spec_from_spaces
from offline_graph.data.graphs.space_text import infer_spaces, parse_space, space_text
from offline_graph.data.episodes.validation import EpisodeSpec

INFER_EPISODES = 64
INFER_FILES = 4
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class AgentSpaces:
    """Per agent key (``str(agent_id)``): its validation spec, space texts and their source."""

    specs: dict[str, EpisodeSpec]
    texts: dict[str, dict[str, str]]
    """``{key: {"observation_space", "action_space", "source"}}``."""

    def metadata(self) -> dict[str, dict[str, str]]:
        """The ``agent_spaces`` metadata value (texts only)."""
        return {
            k: {"observation_space": v["observation_space"], "action_space": v["action_space"]}
            for k, v in sorted(self.texts.items())
        }


def first_item(files: Sequence[str] | FileScan) -> bytes | None:
    """The first ``item`` of the files (a :class:`FileScan`: through its kept first rows)."""
    rows = files.first_rows() if isinstance(files, FileScan) else FirstRows(files, 1)
    for _, _, item in rows.rows():
        return item  # type: ignore[no-any-return]
    return None


def is_multi_agent_data(files: Sequence[str] | FileScan, metadata: dict[str, Any]) -> bool:
    """Multi-agent episode data: the metadata says so, or (files without it) the first row
    is a multi-agent episode."""
    if metadata.get("multi_agent"):
        return True
    if metadata.get("kind", "episodes") != "episodes" or not metadata.get("foreign"):
        return False
    try:
        item = first_item(files)
        return item is not None and is_multi_agent(unpack(item))
    except Exception:  # an undecodable first row: the single-agent path names it
        return False


def sample_episodes(files: Sequence[str] | FileScan) -> tuple[list[MultiAgentRaw], int]:
    """Up to INFER_EPISODES decodable episodes of the first INFER_FILES files (undecodable
    rows are skipped: validation names and counts them later); (episodes, files read)."""
    return sample_rows(
        files, lambda item, path: decode_multi_agent(unpack(item, path), path), INFER_EPISODES, INFER_FILES
    )


def _sample(files: Sequence[str] | FileScan) -> tuple[dict[str, list[Any]], int, int]:
    """Raw steps per agent key of :func:`sample_episodes`; (by agent, episodes, files)."""
    episodes, used_files = sample_episodes(files)
    by_agent: dict[str, list[Any]] = {}
    for ma in episodes:
        for agent in ma.agents:
            by_agent.setdefault(str(agent.agent_id), []).append(agent.raw)
    return by_agent, len(episodes), used_files


def resolve_agent_spaces(files: Sequence[str] | FileScan, metadata: dict[str, Any], who: str) -> AgentSpaces:
    """Per agent id: the metadata's ``agent_spaces``, else inferred from the data."""
    specs: dict[str, EpisodeSpec] = {}
    texts: dict[str, dict[str, str]] = {}
    recorded = metadata.get("agent_spaces") or {}
    for key, pair in sorted(recorded.items()):
        try:
            obs = parse_space(str(pair["observation_space"]), "observation")
            act = parse_space(str(pair["action_space"]), "action")
        except (ConfigError, KeyError, TypeError) as err:
            raise ConfigError(
                f"{who}: metadata 'agent_spaces' of agent {key!r} must hold compact "
                f"observation_space / action_space texts (found {pair!r}: {err}). Re-record the data."
            ) from None
        specs[str(key)] = spec_from_spaces(obs, act)
        texts[str(key)] = {
            "observation_space": space_text(obs),
            "action_space": space_text(act),
            "source": "the file metadata",
        }
    by_agent, episodes, used = _sample(files)
    what = f"the first {episodes} episode{'s' * (episodes != 1)} of {used} file{'s' * (used != 1)}"
    for key, raws in sorted(by_agent.items()):
        if key in specs:
            continue
        obs, act = infer_spaces(raws, where=f"{who}: data, agent {key!r}")
        specs[key] = spec_from_spaces(obs, act)
        texts[key] = {
            "observation_space": space_text(obs),
            "action_space": space_text(act),
            "source": f"inferred from {what}",
        }
    if not specs:
        raise ConfigError(
            f"{who}: multi-agent data must name its agents' spaces in the metadata 'agent_spaces' "
            f"or hold a decodable episode to infer them from (found neither in {what}). Write "
            "the episodes with offline_graph.write_episodes(observation_space=Dict, action_space=Dict)."
        )
    return AgentSpaces(specs, texts)


def agent_route(specs: dict[str, EpisodeSpec], path: str | None, modules: dict | None = None) -> Any:
    """A ``read_agent_episodes`` route: each agent to its own key and spec; ``modules`` (if
    given) receives ``(episode id, key) -> recorded module id``."""

    def route(agent_id: Any, module_id: str | None, episode_id: str) -> tuple[str, EpisodeSpec]:
        key = str(agent_id)
        spec = specs.get(key)
        if spec is None:
            raise GraphValidationError(
                f"{where(file=path, episode_id=episode_id)}, agent {agent_id!r}: agent id must "
                f"have spaces (found none; agents with spaces: {sorted(specs)}). Record the "
                "agent's spaces in the metadata 'agent_spaces' or drop its episodes.",
                reason="unknown_agent",
            )
        if modules is not None:
            modules[(episode_id, key)] = module_id
        return key, spec

    return route


def read_parts(
    items: Sequence[Any],
    paths: Sequence[str | None],
    specs: dict[str, EpisodeSpec],
    *,
    on_error: OnError,
    stats: ReadStats,
    seen_ids: dict[str, bytes] | None = None,
    modules: dict | None = None,
) -> list[AgentEpisode]:
    """Validated agent parts of episode rows (file by file: errors name the file)."""
    from offline_graph.data.episodes.multi_agent import read_agent_episodes

    out: list[AgentEpisode] = []
    lo = 0
    while lo < len(items):
        hi = lo
        while hi < len(items) and paths[hi] == paths[lo]:
            hi += 1
        route = agent_route(specs, paths[lo], modules)
        out += read_agent_episodes(
            items[lo:hi], paths[lo:hi], route, on_error=on_error, seen_ids=seen_ids, stats=stats
        )
        lo = hi
    return out


@dataclass
class AgentNumbers:
    episodes: int = 0
    steps: int = 0
    returns: list[float] = field(default_factory=list)
    nodes: list[np.ndarray] = field(default_factory=list)
    edges: list[np.ndarray] = field(default_factory=list)
    int_id: bool = False


def _percentiles(values: list[np.ndarray]) -> dict[str, float | int]:
    flat = np.concatenate(values) if values else np.zeros(0, np.int64)
    if not flat.size:
        return {}
    out: dict[str, float | int] = {f"p{q}": float(np.percentile(flat, q)) for q in PERCENTILES}
    out["max"] = int(flat.max())
    return out


def inspect_multi_agent(path: str, files: Sequence[str], *, strict: bool = False) -> dict[str, Any]:
    """Read, validate and summarize every multi-agent episode under ``path`` (``files``)."""
    meta0 = read_file_metadata(files[0])
    spaces = resolve_agent_spaces(files, meta0, "inspect")
    stats = ReadStats()
    seen: dict[str, bytes] = {}
    modules: dict[tuple[str, str], str | None] = {}
    agents: dict[str, AgentNumbers] = {}
    by_module: dict[str, dict[str, Any]] = {}
    versions: set[int] = set()
    for file in files:
        meta, table = read_episode_table(file)
        versions.add(int(meta["version"]))
        items = table.column("item").to_pylist()
        parts = read_parts(
            items,
            [file] * len(items),
            spaces.specs,
            on_error="raise" if strict else "skip",
            stats=stats,
            seen_ids=seen,
            modules=modules,
        )
        for part in parts:
            key = str(part.agent_id)
            ep = part.episode
            num = agents.setdefault(key, AgentNumbers(int_id=isinstance(part.agent_id, int)))
            num.episodes += 1
            num.steps += len(ep)
            num.returns.append(float(np.sum(ep.rewards, dtype=np.float64)))
            num.nodes.append(ep.obs.num_nodes)
            num.edges.append(ep.obs.num_edges)
            mid = modules.get((ep.id, key))
            if mid is not None:
                mod = by_module.setdefault(str(mid), {"agents": set(), "episodes": set(), "steps": 0})
                mod["agents"].add(key)
                mod["episodes"].add(ep.id)
                mod["steps"] += len(ep)
    return summarize_multi_agent(files, versions, stats, agents, by_module, spaces)


def summarize_multi_agent(
    files: Sequence[str],
    versions: set[int],
    stats: ReadStats,
    agents: dict[str, AgentNumbers],
    by_module: dict[str, dict[str, Any]],
    spaces: AgentSpaces,
) -> dict[str, Any]:
    """The JSON-ready numbers of ``offline-graph inspect`` on multi-agent data."""
    per_agent: dict[str, Any] = {}
    for key in sorted(set(agents) | set(spaces.texts)):
        num = agents.get(key, AgentNumbers())
        returns = np.asarray(num.returns, np.float64)
        per_agent[key] = {
            "agent_id_int": num.int_id,
            "episodes": num.episodes,
            "steps": num.steps,
            "nodes": _percentiles(num.nodes),
            "edges": _percentiles(num.edges),
            "return": (
                {"mean": float(returns.mean()), "min": float(returns.min()), "max": float(returns.max())}
                if returns.size
                else {}
            ),
            **spaces.texts.get(key, {}),
        }
    modules = {
        mid: {"agents": sorted(m["agents"]), "episodes": len(m["episodes"]), "steps": m["steps"]}
        for mid, m in sorted(by_module.items())
    }
    steps = sum(n.steps for n in agents.values())
    return {
        "multi_agent": True,
        "files": len(files),
        "format_version": sorted(versions),
        "episodes": stats.episodes_used,
        "episodes_rejected": int(sum(stats.rejected.values())),
        "rejected_by_reason": dict(sorted(stats.rejected.items())),
        "first_error_by_reason": dict(sorted(stats.examples.items())),
        "agent_steps": steps,
        "transitions": steps,
        "agents": per_agent,
        "modules": modules,
    }


def format_multi_agent_table(s: dict[str, Any]) -> str:
    """A small human-readable table of :func:`summarize_multi_agent`'s numbers."""
    rows = [
        ("files", str(s["files"])),
        ("format version", ", ".join(str(v) for v in s["format_version"]) or "-"),
        ("episodes (multi-agent)", str(s["episodes"])),
        ("agent steps", str(s["agent_steps"])),
    ]
    if s["episodes_rejected"]:
        reasons = ", ".join(f"{k}={v}" for k, v in s["rejected_by_reason"].items())
        rows.append(("rejected", f"{s['episodes_rejected']} ({reasons})"))
    for key, a in s["agents"].items():
        name = f"agent {key}" + (" (int id)" if a.get("agent_id_int") else "")
        spaces = f"{a.get('observation_space', '?')} / {a.get('action_space', '?')} ({a.get('source', '-')})"
        rows.append((name, f"episodes {a['episodes']}  steps {a['steps']}  spaces {spaces}"))
        if a["return"]:
            r = a["return"]
            rows.append(("  return", f"mean {r['mean']:.3f}  min {r['min']:.3f}  max {r['max']:.3f}"))
        for what in ("nodes", "edges"):
            if a[what]:
                rows.append((f"  {what} per obs", "  ".join(f"{k} {v:g}" for k, v in a[what].items())))
    for mid, m in s["modules"].items():
        rows.append(
            (
                f"module {mid}",
                f"agents {', '.join(m['agents'])}  episodes {m['episodes']}  steps {m['steps']}",
            )
        )
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    for reason, msg in s.get("first_error_by_reason", {}).items():
        lines.append(f"first {reason}: {msg}")
    return "\n".join(lines)
