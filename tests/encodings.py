"""The encodings zoo: one small base episode set, written every way RLlib's own
``SingleAgentEpisode`` API accepts (shared by ``tests/test_encodings_zoo.py``).

Every variant is a function ``base episode -> item bytes`` (``msgpack.packb(episode.get_state(),
default=msgpack_numpy.encode)``, what RLlib's recorder writes). ``plain`` is the reference
encoding: the constructor with lists of Python ints / floats and no lookback.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import gymnasium as gym
import msgpack
import msgpack_numpy as mnp
import numpy as np
from gymnasium.spaces import GraphInstance
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from offline_graph.data.graphs.graph import GraphDict, dict_to_graph
from offline_graph.data.episodes.validation import EpisodeSpec

F, D, K, MAX_NODES = 3, 2, 4, 6
GRAPH_SPEC = EpisodeSpec(num_features=F, edge_dim=D, num_actions=K)
NODE_SPEC = EpisodeSpec(num_features=F, edge_dim=D, num_actions=MAX_NODES, action_level="node")
GAMMA = 0.5
LOOKBACK = 2
"""Steps of history in front of the lookback variants' episodes (not transitions)."""

INT_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOAT_TYPES = ("float16", "float32", "float64")


@dataclass(frozen=True)
class Base:
    """One episode of the base set: T+1 observation dicts, T actions and rewards."""

    id: str
    obs: list[GraphDict]
    actions: list[int]
    rewards: list[float]
    terminated: bool
    truncated: bool
    history: list[GraphDict]
    """LOOKBACK graphs before ``obs[0]`` (same sizes as ``obs[0]``), for the lookback variants."""


def graph(n: int, e: int, seed: int, masked: bool) -> GraphDict:
    rng = np.random.default_rng(seed)
    obs: GraphDict = {
        "x": rng.standard_normal((n, F)).astype(np.float32),
        "edge_index": rng.integers(0, n, (2, e)).astype(np.int64),
        "edge_attr": rng.standard_normal((e, D)).astype(np.float32),
    }
    if masked:
        obs["action_mask"] = rng.random(n) < 0.6
        obs["action_mask"][0] = True
    return obs


def _episode(eid: str, sizes: list[tuple[int, int]], end: str, seed: int, masked: bool) -> Base:
    obs = [graph(n, e, seed * 100 + i, masked) for i, (n, e) in enumerate(sizes)]
    history = [graph(*sizes[0], seed * 100 + 50 + i, masked) for i in range(LOOKBACK)]
    rng = np.random.default_rng(seed)
    actions = []
    for o in obs[:-1]:
        allowed = np.flatnonzero(o["action_mask"]) if masked else np.arange(K)
        actions.append(int(rng.choice(allowed)))
    # Small non-negative integers: exact in every numpy int and float width.
    rewards = [float(r) for r in rng.integers(0, 4, len(actions))]
    return Base(eid, obs, actions, rewards, end == "terminated", end == "truncated", history)


def base_set(masked: bool) -> list[Base]:
    """Four episodes of varying N and E (one with an edgeless graph, one single-step, one
    truncated) and one whose graphs all have the same size (where ``to_numpy`` works)."""
    return [
        _episode("a", [(3, 2), (4, 0), (2, 1), (5, 6)], "terminated", 1, masked),
        _episode("b", [(2, 3), (6, 1), (1, 0)], "truncated", 2, masked),
        _episode("c", [(4, 4), (3, 0)], "terminated", 3, masked),
        _episode("same_size", [(3, 2)] * 4, "truncated", 4, masked),
        _episode("d", [(1, 0), (5, 2), (2, 2), (3, 1), (4, 3)], "terminated", 5, masked),
    ]


def pack(episode: SingleAgentEpisode) -> bytes:
    return msgpack.packb(episode.get_state(), default=mnp.encode)


def construct(b: Base, *, obs: Callable = lambda o: o, lookback: int = 0, **kw: Any) -> SingleAgentEpisode:
    """The constructor with whole lists; ``lookback`` history steps in front."""
    history = b.history[:lookback]
    fields: dict[str, Any] = {
        "actions": [K - 1] * lookback + b.actions,
        "rewards": [100.0] * lookback + b.rewards,
    }
    fields.update(kw)
    return SingleAgentEpisode(
        id_=b.id,
        observations=[obs(o) for o in history + b.obs],
        terminated=b.terminated,
        truncated=b.truncated,
        len_lookback_buffer=lookback,
        **fields,
    )


def stepwise(
    b: Base,
    act: Callable = lambda a: a,
    rew: Callable = lambda r: r,
    obs: Callable = lambda o: o,
    extras: bool = False,
) -> SingleAgentEpisode:
    """``add_env_reset`` + one ``add_env_step`` per step (what an EnvRunner does)."""
    ep = SingleAgentEpisode(id_=b.id)
    ep.add_env_reset(observation=obs(b.obs[0]), infos={"reset": True} if extras else {})
    last = len(b.actions) - 1
    for t, (a, r) in enumerate(zip(b.actions, b.rewards)):
        ep.add_env_step(
            observation=obs(b.obs[t + 1]),
            action=act(a),
            reward=rew(r),
            infos={"t": t, "arr": np.arange(3)} if extras else None,
            terminated=b.terminated and t == last,
            truncated=b.truncated and t == last,
            extra_model_outputs=(
                {"action_logp": np.float32(-0.5 * t), "action_dist_inputs": np.ones(K, np.float32)}
                if extras
                else None
            ),
        )
    return ep


def gym_instance(o: GraphDict) -> GraphInstance:
    """What gymnasium's ``Graph.sample`` makes: int32 ``edge_links``, and no ``edges`` /
    ``edge_links`` at all (None) for a graph without edges."""
    e = o["edge_index"].shape[1]
    if e == 0:
        return GraphInstance(o["x"], None, None)
    return GraphInstance(o["x"], o["edge_attr"], o["edge_index"].T.astype(np.int32))


def same_sizes(b: Base, lookback: int = 0) -> bool:
    """Whether RLlib's ``to_numpy`` can stack this episode's observations (same shapes)."""
    obs = b.history[:lookback] + b.obs
    return len({tuple((k, v.shape) for k, v in o.items()) for o in obs}) == 1


def numpied(ep: SingleAgentEpisode, b: Base, lookback: int = 0) -> SingleAgentEpisode:
    """``ep.to_numpy()`` where RLlib allows it (observations of one size), else ``ep``."""
    if same_sizes(b, lookback):
        ep.to_numpy()
        assert ep.is_numpy
    return ep


def _numpy_scalars(column: str, type_name: str) -> Callable[[Base], bytes]:
    """Each step's action (reward) a numpy scalar of ``type_name``."""
    return lambda b: pack(stepwise(b, **{column: np.dtype(type_name).type}))


def _float_list(values: list[float]) -> list[float]:
    return [float(v) for v in values]


VARIANTS: dict[str, Callable[[Base], bytes]] = {
    "plain": lambda b: pack(construct(b)),
    "steps_python_numbers": lambda b: pack(stepwise(b)),
    "python_float_actions": lambda b: pack(construct(b, actions=_float_list(b.actions))),
    **{f"actions_np_{t}": _numpy_scalars("act", t) for t in INT_TYPES + FLOAT_TYPES},
    **{f"rewards_np_{t}": _numpy_scalars("rew", t) for t in INT_TYPES + FLOAT_TYPES},
    "actions_array": lambda b: pack(
        construct(b, actions=np.array(b.actions), rewards=np.array(b.rewards, np.float32))
    ),
    "actions_array_uint8_rewards_float16": lambda b: pack(
        construct(b, actions=np.array(b.actions, np.uint8), rewards=np.array(b.rewards, np.float16))
    ),
    "step_0d_arrays": lambda b: pack(
        stepwise(b, act=lambda a: np.array(a), rew=lambda r: np.array(r, np.float32))
    ),
    "step_0d_arrays_int16_float64": lambda b: pack(
        stepwise(b, act=lambda a: np.array(a, np.int16), rew=lambda r: np.array(r))
    ),
    "lookback": lambda b: pack(construct(b, lookback=LOOKBACK)),
    "lookback_arrays": lambda b: pack(
        construct(
            b,
            lookback=LOOKBACK,
            actions=np.array([K - 1] * LOOKBACK + b.actions, np.int32),
            rewards=np.array([100.0] * LOOKBACK + b.rewards, np.float32),
        )
    ),
    "infos_extra_model_outputs": lambda b: pack(
        construct(
            b,
            infos=[{"i": i, "arr": np.arange(i)} for i in range(len(b.obs))],
            extra_model_outputs={
                "action_logp": [np.float32(-i) for i in range(len(b.actions))],
                "vf_preds": np.arange(len(b.actions), dtype=np.float32),
            },
        )
    ),
    "infos_extra_model_outputs_steps": lambda b: pack(stepwise(b, extras=True)),
    "to_numpy": lambda b: pack(numpied(construct(b), b)),
    "to_numpy_lookback": lambda b: pack(numpied(construct(b, lookback=LOOKBACK), b, LOOKBACK)),
}
"""Variants for every base set (graph-level and node-selection with masks)."""

GRAPH_INSTANCE_VARIANTS: dict[str, Callable[[Base], bytes]] = {
    "graph_instance": lambda b: pack(construct(b, obs=dict_to_graph)),
    "graph_instance_gym": lambda b: pack(construct(b, obs=gym_instance)),
    "graph_instance_steps": lambda b: pack(stepwise(b, obs=gym_instance)),
    "graph_instance_lookback": lambda b: pack(construct(b, obs=gym_instance, lookback=LOOKBACK)),
    "graph_instance_to_numpy": lambda b: pack(numpied(construct(b, obs=dict_to_graph), b)),
}
"""Observations as gymnasium ``GraphInstance``s (they carry no ``action_mask``: graph-level set)."""

OBS_SPACE = gym.spaces.Graph(
    node_space=gym.spaces.Box(-np.inf, np.inf, (F,), np.float32),
    edge_space=gym.spaces.Box(-np.inf, np.inf, (D,), np.float32),
)


def with_id(b: Base, prefix: str) -> Base:
    return replace(b, id=f"{prefix}/{b.id}")
