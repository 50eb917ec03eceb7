"""GNNModule over typed (heterogeneous) graph observations: the TypedGraphEncoder's batch layout
(node- and graph-level actions, masks), messages across node types, batch independence,
``node_types``, graph-level ``globals``, the refused configs, and the IQL / CQL critics."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Discrete
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from offline_graph import EdgeAction, NodeAction
from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.typed import TypedGraph
from offline_graph.rllib.core.gnn_module import GNNModule, resolve_gnn_config
from offline_graph.rllib.core.hetero import TypedGraphEncoder
from offline_graph.rllib.core.selection import segment_log_softmax

LOW = torch.finfo(torch.float32).min
FITS, RUNS, NEXT = "job__fits__machine", "machine__runs__job", "job__next__job"


def box(n: int) -> Box:
    return Box(-np.inf, np.inf, (n,), np.float32)


SPACE = TypedGraph(
    {"job": box(3), "machine": box(2)},
    {("job", "fits", "machine"): box(1), ("machine", "runs", "job"): None, ("job", "next", "job"): None},
)
JOB_ACT = NodeAction(5, node_type="job")


def build(model_config=None, action_space=JOB_ACT, space=SPACE, seed=0) -> GNNModule:
    torch.manual_seed(seed)
    return RLModuleSpec(
        module_class=GNNModule,
        observation_space=space,
        action_space=action_space,
        model_config={"hidden": 8, "head_hidden": 8, **(model_config or {})},
    ).build()


def graph(jobs: int, machines: int, fits: list, seed: int, mask: list | None = None) -> dict:
    """One typed observation (numpy): random features, jobs chained by ``next``, every fit
    also ``runs`` back; ``fits`` = [(job, machine), ...]."""
    rng = np.random.default_rng(seed)
    fit = np.array(fits, np.int64).reshape(-1, 2).T
    chain = np.array([np.arange(jobs - 1), np.arange(1, jobs)], np.int64).reshape(2, -1)
    g = {
        "x": {
            "job": rng.normal(size=(jobs, 3)).astype(np.float32),
            "machine": rng.normal(size=(machines, 2)).astype(np.float32),
        },
        "edge_index": {FITS: fit, RUNS: fit[::-1].copy(), NEXT: chain},
        "edge_attr": {FITS: rng.normal(size=(fit.shape[1], 1)).astype(np.float32)},
    }
    if mask is not None:
        g["action_mask"] = np.array(mask, bool)
    return g


def collate(graphs: list[dict], globals_: list | None = None) -> dict:
    """The data layer's typed batch layout, built by hand: ``x:<t>``, ``batch:<t>``, ``ptr:<t>``,
    ``edge_index:<r>`` (batch-global rows), ``edge_attr:<r>``, ``action_mask``, ``globals``."""
    obs: dict[str, torch.Tensor] = {}
    offsets = {}
    for t in SPACE.node_types:
        counts = np.array([len(g["x"][t]) for g in graphs], np.int64)
        ptr = np.concatenate([[0], np.cumsum(counts)])
        offsets[t] = ptr
        obs[f"x:{t}"] = torch.from_numpy(np.concatenate([g["x"][t] for g in graphs]))
        obs[f"batch:{t}"] = torch.from_numpy(np.repeat(np.arange(len(graphs)), counts))
        obs[f"ptr:{t}"] = torch.from_numpy(ptr)
    for r, dim in SPACE.edge_dims.items():
        src, _, dst = r.split("__")
        shift = [np.array([[offsets[src][i]], [offsets[dst][i]]]) for i in range(len(graphs))]
        obs[f"edge_index:{r}"] = torch.from_numpy(
            np.concatenate([g["edge_index"][r] + s for g, s in zip(graphs, shift)], 1)
        )
        if dim is not None:
            obs[f"edge_attr:{r}"] = torch.from_numpy(np.concatenate([g["edge_attr"][r] for g in graphs]))
    if any("action_mask" in g for g in graphs):
        obs["action_mask"] = torch.from_numpy(np.concatenate([g["action_mask"] for g in graphs]))
    if globals_ is not None:
        obs["globals"] = torch.tensor(globals_, dtype=torch.float32)
    return obs


G0 = graph(3, 2, [(0, 0), (1, 0), (2, 1)], seed=1, mask=[True, False, True])
G1 = graph(2, 1, [(0, 0), (1, 0)], seed=2, mask=[True, True])
G_NO_MACHINE = graph(1, 0, [], seed=3, mask=[True])  # a type absent from the graph


def inference(module: GNNModule, graphs: list[dict], **kw) -> torch.Tensor:
    return module.forward_inference({Columns.OBS: collate(graphs, **kw)})[Columns.ACTION_DIST_INPUTS]


# --------------------------------------------------------------------------- layout
def test_node_action_layout_mask_and_distribution():
    m = build()
    assert isinstance(m._encoder, TypedGraphEncoder) and m.gnn_config["node_types"] == ["job", "machine"]
    obs = collate([G0, G1])
    logp = m.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    assert logp.shape == (2, 3)  # M = most jobs of any graph (3), not max_nodes or machines
    # exactly the segment log-softmax of the head's job scores, masked and filler at finfo.min
    enc = m._encoder(obs)
    assert (
        enc.nodes.shape == (5, 8) and enc.ptr.tolist() == [0, 3, 5] and enc.batch.tolist() == [0, 0, 0, 1, 1]
    )
    assert enc.graphs.shape == (2, 8 * 2 * 2)  # meanmax per node type, 2 node types
    scores = m._pi_head.scores(enc, obs).detach()
    expected = segment_log_softmax(scores, enc.batch, 2, obs["action_mask"])
    torch.testing.assert_close(logp[0, [0, 2]], expected[[0, 2]], rtol=0, atol=1e-6)
    torch.testing.assert_close(logp[1, :2], expected[3:], rtol=0, atol=1e-6)
    assert logp[0, 1] == LOW and logp[1, 2] == LOW
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(2), rtol=0, atol=1e-6)
    dist = m.get_inference_action_dist_cls().from_logits(logp)
    greedy = dist.to_deterministic().sample()
    assert int(greedy[0]) == [0, 2][int(scores[[0, 2]].argmax())]
    torch.manual_seed(0)
    draws = torch.stack([dist.sample() for _ in range(200)])
    assert set(draws[:, 0].tolist()) <= {0, 2} and set(draws[:, 1].tolist()) <= {0, 1}


def test_graph_level_action_and_value_head():
    m = build({"value_head": True}, action_space=Discrete(4))
    batch = {Columns.OBS: collate([G0, G1, G_NO_MACHINE])}
    out = m.forward_train(batch)
    assert out[Columns.ACTION_DIST_INPUTS].shape == (3, 4) and out[Columns.EMBEDDINGS].shape == (3, 32)
    assert m.compute_values(batch, embeddings=out[Columns.EMBEDDINGS]).shape == (3,)
    # encoding anchored on the first node type (jobs)
    assert m._encoder(batch[Columns.OBS]).ptr.tolist() == [0, 3, 5, 6]


def test_loss_reaches_every_parameter():
    m = build({"value_head": True}, action_space=Discrete(4))
    batch = {Columns.OBS: collate([G0, G1])}
    out = m.forward_train(batch)
    loss = (
        -m.get_train_action_dist_cls()
        .from_logits(out[Columns.ACTION_DIST_INPUTS])
        .logp(torch.tensor([1, 3]))
        .mean()
        + m.compute_values(batch, embeddings=out[Columns.EMBEDDINGS]).pow(2).mean()
    )
    loss.backward()
    assert not [n for n, p in m.named_parameters() if p.requires_grad and p.grad is None]


# --------------------------------------------------------------------------- messages
def with_machine_features(g: dict, value: float) -> dict:
    return {**g, "x": {**g["x"], "machine": np.full_like(g["x"]["machine"], value)}}


def test_messages_cross_node_types_and_node_types_key():
    changed = with_machine_features(G0, 5.0)
    full = build()
    # job embeddings of graph 0 move when its machines change: messages machine -> job
    nodes = full._encoder(collate([G0, G1])).nodes
    nodes_changed = full._encoder(collate([changed, G1])).nodes
    assert (nodes[:3] - nodes_changed[:3]).abs().max() > 1e-4
    torch.testing.assert_close(nodes[3:], nodes_changed[3:], rtol=0, atol=1e-6)  # graph 1 untouched
    a, b = inference(full, [G0, G1]), inference(full, [changed, G1])
    assert (a[0, [0, 2]] - b[0, [0, 2]]).abs().max() > 1e-4
    # no layers: job embeddings are the projections only
    flat = build({"layers": 0})
    torch.testing.assert_close(
        flat._encoder(collate([G0])).nodes, flat._encoder(collate([changed])).nodes, rtol=0, atol=0
    )
    # node_types=["job"]: machines (and the edges to / from them) are never read
    jobs_only = build({"node_types": ["job"]})
    enc = jobs_only._encoder
    assert enc.edge_types == [NEXT] and enc.out_dim == 16 and len(enc.inp) == 1
    torch.testing.assert_close(
        inference(jobs_only, [G0, G1]), inference(jobs_only, [changed, G1]), rtol=0, atol=0
    )


@pytest.mark.parametrize("action_space", [JOB_ACT, Discrete(4)])
def test_output_independent_of_other_graphs(action_space):
    m = build(action_space=action_space)
    for g in (G0, G1, G_NO_MACHINE):
        alone = inference(m, [g])[0]
        for others, idx in (([G1, g, G_NO_MACHINE], 1), ([g, G0, G0], 0), ([G_NO_MACHINE, G1, g], 2)):
            together = inference(m, others)[idx][: alone.shape[0]]
            torch.testing.assert_close(together, alone, rtol=0, atol=1e-6)


def test_job_permutation_permutes_node_logits():
    m = build()
    perm = np.array([2, 0, 1])  # new job i is old job perm[i]
    inv = np.argsort(perm)
    g = G0
    gp = {
        "x": {"job": g["x"]["job"][perm], "machine": g["x"]["machine"]},
        "edge_index": {
            FITS: np.stack([inv[g["edge_index"][FITS][0]], g["edge_index"][FITS][1]]),
            RUNS: np.stack([g["edge_index"][RUNS][0], inv[g["edge_index"][RUNS][1]]]),
            NEXT: inv[g["edge_index"][NEXT]],
        },
        "edge_attr": g["edge_attr"],
        "action_mask": g["action_mask"][perm],
    }
    torch.testing.assert_close(inference(m, [gp, G1])[0], inference(m, [g, G1])[0][perm], rtol=0, atol=1e-6)


def test_globals_of_a_dict_space():
    space = gym.spaces.Dict({"graph": SPACE, "clock": box(2), "mode": Discrete(3)})
    m = build(space=space, action_space=Discrete(2))
    assert m._encoder.globals_dim == 5 and m._encoder.out_dim == 32 + 5
    rows = [[0.5, 0.25, 0, 0, 1], [1, 0, 1, 0, 0]]
    a = inference(m, [G0, G1], globals_=rows)
    b = inference(m, [G0, G1], globals_=[rows[0], [0, 1, 0, 1, 0]])
    torch.testing.assert_close(a[0], b[0], rtol=0, atol=1e-6)
    assert (a[1] - b[1]).abs().max() > 1e-4
    with pytest.raises(ValueError, match=r"must carry globals \[2, 5\] \(found no 'globals'\)"):
        inference(m, [G0, G1])
    assert build({"globals": False}, space=space, action_space=Discrete(2))._encoder.out_dim == 32


def test_missing_batch_key_names_it():
    obs = collate([G0])
    del obs[f"edge_index:{NEXT}"]
    with pytest.raises(ValueError, match=f"must carry 'edge_index:{NEXT}'"):
        build()._encoder(obs)


# --------------------------------------------------------------------------- refused
@pytest.mark.parametrize(
    "model_config, action_space, match",
    [
        ({"memory": "gru"}, JOB_ACT, "'memory' must be unset for a typed graph"),
        ({"frame_stack": 2}, JOB_ACT, "'frame_stack' must be 1 for a typed graph"),
        ({"bag_of_nodes": True}, JOB_ACT, "'bag_of_nodes' must be False for a typed graph"),
        ({}, EdgeAction(5), "must be Discrete\\(k\\) or NodeAction\\(max, node_type=...\\)"),
        ({}, NodeAction(5), r"node_type must be one of .*\['job', 'machine'\] \(found None\)"),
        ({}, NodeAction(5, node_type="robot"), "found 'robot'"),
        ({"node_types": ["machine"]}, JOB_ACT, "'node_types' must include the action's node type 'job'"),
        ({"node_types": ["robot"]}, JOB_ACT, "'node_types' must be distinct node types .*found 'robot'"),
        ({"node_types": ["job", "job"]}, JOB_ACT, "found duplicates"),
        ({"node_types": "job"}, JOB_ACT, "'node_types' must be a non-empty list"),
        ({"node_types": []}, JOB_ACT, "'node_types' must be a non-empty list"),
    ],
)
def test_refused_configs(model_config, action_space, match):
    with pytest.raises(ConfigError, match=match):
        build(model_config, action_space=action_space)


def test_typed_keys_refused_on_plain_graphs():
    plain = gym.spaces.Graph(node_space=box(3), edge_space=None)
    with pytest.raises(ConfigError, match="node_type must be None for a plain Graph"):
        build(space=plain, action_space=JOB_ACT)
    with pytest.raises(ConfigError, match="'node_types' must be unset for a plain"):
        resolve_gnn_config({"node_types": ["job"]}, plain)
    assert resolve_gnn_config({}, SPACE)["conv"] == "sage"


# --------------------------------------------------------------------------- value-based
@pytest.mark.parametrize("action_space, width", [(JOB_ACT, 3), (Discrete(4), 4)])
def test_iql_and_cql_critics_on_typed_batches(action_space, width):
    obs = collate([G0, G1])
    iql = build({"value_based": "iql"}, action_space=action_space)
    assert isinstance(iql._critic.encoder, TypedGraphEncoder) and iql._critic.encoder is not iql._encoder
    _, qs = iql._critic(obs)
    assert len(qs) == 2 and all(q.shape == (2, width) for q in qs)
    if action_space is JOB_ACT:
        assert qs[0][0, 1] == LOW and qs[0][1, 2] == LOW  # masked job, filler
    out = iql.forward_train(
        {Columns.OBS: {**obs, "target": torch.tensor([0]), "next_index": torch.tensor([1])}}
    )
    assert out["q"].shape == (2, 1, width) and out["v"].shape == (1,) and out["q_target"].shape == (1, width)
    cql = build({"value_based": "cql"}, action_space=action_space)
    q = cql.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    assert q.shape == (2, width)
    raw = cql._q.q_heads[0](cql._q.encoder(obs), obs).detach()
    torch.testing.assert_close(q, raw, rtol=0, atol=0)
