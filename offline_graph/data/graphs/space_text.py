"""Spaces without an env: a compact text form, Python builders, and inference from the data.

Text form (``--observation-space`` / ``--action-space``, and what converted rows record)::

    graph:F=5,D=3     Graph(node_space=Box(F), edge_space=Box(D))
    graph:F=5         Graph with edges without features (also graph:F=5,D=0)
    typed:job=3,machine=2|job__fits__machine=1,machine__serves__job
                      TypedGraph: node types with their widths | edge types (=D: features)
    node:MAX@job      NodeAction(MAX, node_type="job") over a typed graph's node type
    discrete:K        Discrete(K): one action per graph
    node:MAX_NODES    NodeAction(MAX_NODES): the action is a node of the step's graph
    edge:MAX_EDGES    EdgeAction(MAX_EDGES): the action is an edge of the step's graph
    dict:graph=graph:F=5,D=3;clock=box:2;mode=discrete:3
                      Dict({"graph": Graph(...), "clock": Box(-inf, inf, (2,)), "mode":
                      Discrete(3)}): a graph with flat parts (``box:2x3`` a shape, ``discrete:K``,
                      ``multibinary:N``); the text keeps shapes, not a Box's bounds

:func:`space_text` is the inverse of :func:`parse_space`; :func:`spec_texts` gives the texts of a
validation spec and :func:`space_code` the Python that builds a space (for messages).
:func:`infer_spaces` reads the spaces off decoded episodes (F, D, whether masks exist, the action
kind; ``Discrete`` K = largest action + 1; selection limits = the largest node / edge count
seen), for data with no metadata and no env. Which source wins: :mod:`offline_graph.env.data_spaces`.
"""

from __future__ import annotations

from typing import Any, Iterable, Literal

import gymnasium as gym
import numpy as np

from offline_graph.data.episodes.codec import RawEpisode
from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.globals import GRAPH_KEYS, GlobalsLayout, globals_layout, graph_part
from offline_graph.data.graphs.graph import space_sizes
from offline_graph.data.graphs.spaces import EdgeAction, NodeAction, selection_level
from offline_graph.data.graphs.typed import TypedGraph, parse_typed
from offline_graph.data.graphs.typed_infer import infer_typed_spaces
from offline_graph.data.episodes.validation import EpisodeSpec

Role = Literal["observation", "action"]
_ACTIONS: dict[str, Any] = {"discrete": gym.spaces.Discrete, "node": NodeAction, "edge": EdgeAction}


def graph_space(num_features: int, edge_dim: int | None = None) -> gym.spaces.Graph:
    """``Graph(node_space=Box(-inf, inf, (F,)), edge_space=Box(-inf, inf, (D,)) or None)``."""
    edge = None if not edge_dim else gym.spaces.Box(-np.inf, np.inf, (int(edge_dim),), np.float32)
    return gym.spaces.Graph(
        node_space=gym.spaces.Box(-np.inf, np.inf, (int(num_features),), np.float32), edge_space=edge
    )


def _bad(role: Role, text: str, why: str) -> ConfigError:
    forms = (
        "graph:F=5,D=3, graph:F=5 or dict:graph=graph:F=5;clock=box:2;mode=discrete:3"
        if role == "observation"
        else "discrete:K, node:MAX or edge:MAX"
    )
    return ConfigError(f"--{role}-space: text must be {forms} (found {text!r}: {why}).")


def _positive(role: Role, text: str, value: str, allow_zero: bool = False) -> int:
    try:
        number = int(value)
    except ValueError:
        raise _bad(role, text, f"{value!r} is not an integer") from None
    if number < (0 if allow_zero else 1):
        raise _bad(role, text, f"{number} is below {0 if allow_zero else 1}")
    return number


def parse_space(text: str, role: Role) -> gym.Space:
    """The space a compact text names (see the module docstring); ConfigError on bad text."""
    kind, _, rest = text.strip().partition(":")
    kind = kind.lower()
    if role == "observation" and kind == "dict":
        return _parse_dict(text, rest)
    if role == "observation" and kind == "typed":
        return parse_typed(rest)
    if role == "observation":
        if kind != "graph" or not rest:
            raise _bad(role, text, "an observation space is graph:F=...,D=...")
        fields: dict[str, str] = {}
        for part in rest.split(","):
            key, eq, value = part.partition("=")
            if not eq or key.strip().upper() not in ("F", "D") or key.strip().upper() in fields:
                raise _bad(role, text, f"{part!r} is not F=<int> or D=<int>, each once")
            fields[key.strip().upper()] = value.strip()
        if "F" not in fields:
            raise _bad(role, text, "F (node features) is missing")
        edge_dim = _positive(role, text, fields["D"], allow_zero=True) if "D" in fields else 0
        return graph_space(_positive(role, text, fields["F"]), edge_dim or None)
    if kind not in _ACTIONS or not rest:
        raise _bad(role, text, f"kind {kind!r} is not one of {sorted(_ACTIONS)}")
    limit, at, node_type = rest.partition("@")
    if at and kind == "node":  # node:MAX@type: a NodeAction over a typed graph's node type
        return NodeAction(_positive(role, text, limit), node_type=node_type.strip())
    return _ACTIONS[kind](_positive(role, text, rest))  # type: ignore[no-any-return]


def _parse_dict(text: str, rest: str) -> gym.spaces.Dict:
    """``dict:key=part;...`` (one ``graph:`` part, flat ``box:`` / ``discrete:`` /
    ``multibinary:`` parts) -> the Dict space."""
    parts: dict[str, gym.Space] = {}
    for entry in rest.split(";"):
        key, eq, value = entry.partition("=")
        key, value = key.strip(), value.strip()
        kind, _, size = value.partition(":")
        if not eq or not key or key in parts:
            raise _bad("observation", text, f"{entry!r} is not key=<space>, each key once")
        if kind in ("graph", "typed"):
            parts[key] = parse_space(value, "observation")
        elif kind == "box" and size:
            shape = tuple(_positive("observation", text, d) for d in size.split("x"))
            parts[key] = gym.spaces.Box(-np.inf, np.inf, shape, np.float32)
        elif kind in ("discrete", "multibinary") and size:
            flat = gym.spaces.Discrete if kind == "discrete" else gym.spaces.MultiBinary
            parts[key] = flat(_positive("observation", text, size))
        else:
            kinds = "graph:..., box:SHAPE, discrete:K or multibinary:N"
            raise _bad("observation", text, f"{value!r} is not {kinds}")
    space = gym.spaces.Dict(parts)
    try:
        globals_layout(space)
    except ConfigError as err:
        raise _bad("observation", text, str(err).split(" (found")[0]) from None
    return space


def _part_text(space: gym.Space) -> str:
    if isinstance(space, TypedGraph):
        return space.text()
    if isinstance(space, gym.spaces.Graph):
        feat, edim = space_sizes(space)
        return f"graph:F={feat}" + (f",D={edim}" if edim is not None else "")
    if isinstance(space, gym.spaces.Discrete):
        return f"discrete:{int(space.n)}"
    if isinstance(space, gym.spaces.MultiBinary):
        return f"multibinary:{int(np.prod(space.shape))}"
    return "box:" + "x".join(str(int(d)) for d in space.shape or ())


def dict_text(layout: GlobalsLayout, graph: str) -> str:
    """The text of a Dict space: ``graph`` (its graph part's text) and the layout's parts."""
    entries = [f"{layout.graph_key}={graph}"] + [f"{k}={_part_text(s)}" for k, s in layout.parts]
    return "dict:" + ";".join(sorted(entries))


def space_text(space: gym.Space) -> str:
    """The compact text of a graph observation or an action space (inverse of :func:`parse_space`)."""
    layout = globals_layout(space)
    if layout is not None:
        return dict_text(layout, _part_text(graph_part(space)))
    if isinstance(space, TypedGraph):
        return space.text()
    if isinstance(space, (gym.spaces.Graph, gym.spaces.Dict)):
        feat, edim = space_sizes(space)
        return f"graph:F={feat}" + (f",D={edim}" if edim is not None else "")
    level = selection_level(space)
    if level is not None:
        node_type = getattr(space, "node_type", None)
        return f"{level}:{int(space.n)}" + ("" if node_type is None else f"@{node_type}")  # type: ignore[attr-defined]
    if isinstance(space, gym.spaces.Discrete):
        return f"discrete:{int(space.n)}"
    raise ConfigError(
        f"space: space must be a Graph, Discrete, NodeAction or EdgeAction (found {space!r}). "
        "Only these have a compact text form."
    )


def spec_texts(spec: EpisodeSpec) -> dict[str, str]:
    """``{"observation_space": ..., "action_space": ...}``: the compact texts of the spaces a
    validation spec checks against (what converted rows record in their metadata)."""
    observation = f"graph:F={spec.num_features}" + (f",D={spec.edge_dim}" if spec.edge_dim else "")
    if spec.typed is not None:
        observation = spec.typed.text()
    if spec.globals is not None:
        observation = dict_text(spec.globals, observation)
    action = f"{spec.action_level or 'discrete'}:{spec.num_actions}"
    return {
        "observation_space": observation,
        "action_space": action + ("" if spec.node_type is None else f"@{spec.node_type}"),
    }


def space_code(space: gym.Space) -> str:
    """The Python expression that builds ``space`` (for messages): ``offline_graph.graph_space(5)``,
    ``gymnasium.spaces.Discrete(3)``, ``offline_graph.NodeAction(64)``, ..."""
    text = space_text(space)
    kind, _, rest = text.partition(":")
    if kind in ("dict", "typed"):
        return f"offline_graph.parse_space({text!r}, 'observation')"
    if kind == "graph":
        sizes = dict(part.split("=") for part in rest.split(","))
        return f"offline_graph.graph_space({sizes['F']}" + (f", {sizes['D']})" if "D" in sizes else ")")
    name = {
        "discrete": "gymnasium.spaces.Discrete",
        "node": "offline_graph.NodeAction",
        "edge": "offline_graph.EdgeAction",
    }
    limit, at, node_type = rest.partition("@")
    return f"{name[kind]}({limit}" + (f", node_type={node_type!r})" if at else ")")


def _refuse_parts(obs: Any, where: str, episode_id: str) -> None:
    """Parts beside the graph (or a graph nested in a dict) are not inferred: their spaces
    (a Box's shape, a Discrete's size) are the user's to say, never guessed or dropped."""
    if not isinstance(obs, dict):
        return
    nested = any(isinstance(v, dict) or hasattr(v, "edge_links") for v in obs.values())
    if "x" not in obs and not nested:
        return  # no graph at all: the caller's "found none" says so
    extra = sorted(str(k) for k in obs if k not in GRAPH_KEYS)
    if extra:
        raise ConfigError(
            f"{where}, episode {episode_id!r}: observation keys must be the graph's "
            f"{list(GRAPH_KEYS)} to infer the spaces (found also {extra}). A graph with other "
            "parts needs its Dict space: pass --observation-space dict:graph=graph:F=..;<key>="
            "box:SHAPE|discrete:K;... (config.environment(observation_space=gymnasium.spaces."
            "Dict(...)) in Python), or write the files with write_episodes(..., "
            "observation_space=...)."
        )


def infer_spaces(episodes: Iterable[RawEpisode], where: str = "data") -> tuple[gym.Space, gym.Space]:
    """(observation space, action space) read off decoded episodes (module docstring).

    Raises ConfigError when the episodes disagree (F, D, mask level) or hold no observation.
    """
    episodes = list(episodes)
    first = next((o for raw in episodes for o in raw.observations), None)
    if isinstance(first, dict) and isinstance(first.get("x"), dict):  # a typed graph
        return infer_typed_spaces(episodes, where)
    seen: dict[str, Any] = {}
    levels: set[str] | None = None
    largest = {"action": -1, "node": 0, "edge": 0}
    for raw in episodes:
        for obs in raw.observations:
            _refuse_parts(obs, where, raw.id)
            if not isinstance(obs, dict) or "x" not in obs:
                continue
            x = np.asarray(obs["x"])
            n = int(x.shape[0]) if x.ndim == 2 else 0
            e = int(np.shape(obs.get("edge_index", np.zeros((2, 0))))[-1])
            attr = obs.get("edge_attr")
            mask = obs.get("action_mask")
            facts = {
                "F": int(x.shape[1]) if x.ndim == 2 else None,
                "D": int(np.shape(attr)[1]) if attr is not None and np.ndim(attr) == 2 else None,
            }
            if mask is not None:  # a mask has one entry per node or per edge (both if N == E)
                fits = {lvl for lvl, c in (("node", n), ("edge", e)) if np.size(mask) == c}
                levels = fits if levels is None else levels & fits
            for key, value in facts.items():
                if seen.setdefault(key, value) != value:
                    raise ConfigError(
                        f"{where}, episode {raw.id!r}: {key} must be the same in every observation "
                        f"to infer the spaces (found {seen[key]!r} and {value!r}). Pass "
                        "--observation-space / --action-space (or --env) explicitly."
                    )
            largest["node"], largest["edge"] = max(largest["node"], n), max(largest["edge"], e)
        actions = np.asarray([int(np.asarray(a)) for a in raw.actions]) if len(raw.actions) else None
        if actions is not None:
            largest["action"] = max(largest["action"], int(actions.max()))
    if seen.get("F") is None:
        raise ConfigError(
            f"{where}: observations must be graph dicts with 'x' [N, F] to infer the spaces "
            "(found none). Pass --observation-space graph:F=...,D=... and --action-space."
        )
    observation = graph_space(seen["F"], seen.get("D"))
    if levels is not None:
        if len(levels) != 1:
            raise ConfigError(
                f"{where}: action_mask must have one entry per node or one per edge in every "
                f"observation to infer the action kind (found it fits {sorted(levels) or 'neither'}). "
                "Pass --action-space node:MAX or edge:MAX."
            )
        level = levels.pop()
        return observation, (NodeAction if level == "node" else EdgeAction)(max(largest[level], 1))
    return observation, gym.spaces.Discrete(max(largest["action"] + 1, 1))
