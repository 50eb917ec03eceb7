"""Node / edge selection: the spaces, the masked segment log-softmax and its distribution,
validation of recorded node/edge actions and masks, and the unpadded mask through the
prelearner and the learner collate."""

import math
import os
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from offline_graph import EdgeAction, GraphValidationError, NodeAction, collate
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.rllib.offline.episodes import encode_episode
from offline_graph.rllib.core.gnn_module import GNNModule
from offline_graph.rllib.core.selection import (
    TorchChoiceCategorical,
    dense_choices,
    segment_log_softmax,
)
from tests.helpers import make_graph, write_episode_file

F, D = 3, 1
OBS = gym.spaces.Graph(
    node_space=gym.spaces.Box(-np.inf, np.inf, (F,), np.float32),
    edge_space=gym.spaces.Box(-np.inf, np.inf, (D,), np.float32),
)
LOW = torch.finfo(torch.float32).min


# --------------------------------------------------------------------------- spaces
def test_spaces_contain_sample_repr_pickle():
    space = NodeAction(5)
    assert isinstance(space, gym.spaces.Discrete) and space.n == 5 and space.max_nodes == 5
    assert repr(space) == "NodeAction(max_nodes=5)" and repr(EdgeAction(7)) == "EdgeAction(max_edges=7)"
    assert space.contains(4) and not space.contains(5)
    assert pickle.loads(pickle.dumps(space)) == space and space != gym.spaces.Discrete(5)
    assert EdgeAction(5) != space
    space.seed(0)
    draws = {int(space.sample(mask=np.array([False, True, False, True]))) for _ in range(50)}
    assert draws == {1, 3}  # only allowed nodes of this 4-node graph
    with pytest.raises(ValueError, match="must allow at least one node"):
        space.sample(mask=np.zeros(3, bool))
    with pytest.raises(ValueError, match=r"C <= 5"):
        space.sample(mask=np.ones(6, bool))
    with pytest.raises(ValueError, match="max_nodes must be an int >= 1"):
        NodeAction(0)


# --------------------------------------------------------------------------- math
def two_graphs():
    """Graph 0: 3 nodes, scores [1, 2, 3], mask [T, F, T]; graph 1: 2 nodes, scores
    [0.5, -1], mask [F, T] (a single allowed node)."""
    scores = torch.tensor([1.0, 2.0, 3.0, 0.5, -1.0])
    index = torch.tensor([0, 0, 0, 1, 1])
    mask = torch.tensor([True, False, True, False, True])
    return scores, index, mask


def test_segment_log_softmax_exact_values():
    scores, index, mask = two_graphs()
    logp = segment_log_softmax(scores, index, 2, mask)
    # allowed {0, 2} of graph 0: log(e^1 / (e^1 + e^3)) = -log(1 + e^2)
    assert logp[0].item() == pytest.approx(-math.log(1 + math.e**2), abs=1e-6)
    assert logp[2].item() == pytest.approx(-math.log(1 + math.e**-2), abs=1e-6)
    assert logp[1].item() == float("-inf") and logp[3].item() == float("-inf")
    assert logp[4].item() == pytest.approx(0.0, abs=1e-7)  # the only allowed node of graph 1
    # without a mask: plain log-softmax per graph
    free = segment_log_softmax(scores, index, 2)
    expected = torch.cat([torch.log_softmax(scores[:3], 0), torch.log_softmax(scores[3:], 0)])
    assert torch.allclose(free, expected, atol=1e-6)


def test_choice_distribution_argmax_sample_logp():
    scores, index, mask = two_graphs()
    dense = dense_choices(segment_log_softmax(scores, index, 2, mask), index, 2)
    assert dense.shape == (2, 3)  # M = 3, the largest graph of the batch
    assert dense[1, 2].item() == LOW  # graph 1 has only 2 nodes: filler
    dist = TorchChoiceCategorical.from_logits(dense)
    assert dist.to_deterministic().sample().tolist() == [2, 1]
    probs = dist._dist.probs
    assert probs[0, 1].item() == 0.0 and probs[1, 0].item() == 0.0 and probs[1, 2].item() == 0.0
    assert probs[0, 0].item() == pytest.approx(1 / (1 + math.e**2), abs=1e-6)
    logp = dist.logp(torch.tensor([0, 1]))
    assert logp.tolist() == pytest.approx([-math.log(1 + math.e**2), 0.0], abs=1e-6)
    torch.manual_seed(0)
    samples = torch.stack([dist.sample() for _ in range(200)])
    assert set(samples[:, 0].tolist()) == {0, 2} and set(samples[:, 1].tolist()) == {1}


def test_edge_choices_follow_the_source_graph():
    # graph 0: 2 nodes, edges (0->1), (1->0); graph 1: 3 nodes, edges (0->1), (1->2), (2->0)
    edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 0, 3, 4, 2]])
    batch = torch.tensor([0, 0, 1, 1, 1])
    index = batch[edge_index[0]]
    scores = torch.tensor([0.0, 1.0, 2.0, 0.0, -2.0])
    mask = torch.tensor([True, True, False, True, True])
    dense = dense_choices(segment_log_softmax(scores, index, 2, mask), index, 2)
    dist = TorchChoiceCategorical.from_logits(dense)
    assert dist.to_deterministic().sample().tolist() == [1, 1]  # local edge indices
    z = 1 + math.e**-2
    assert dist.logp(torch.tensor([0, 2])).tolist() == pytest.approx(
        [-math.log(1 + math.e), -2 - math.log(z)], abs=1e-6
    )


# --------------------------------------------------------------------------- module
def masked_graphs():
    g0 = make_graph(4, 5, F=F, D=D, seed=1)
    g0["action_mask"] = np.array([False, True, True, False])
    g1 = make_graph(2, 2, F=F, D=D, seed=2)
    g1["action_mask"] = np.array([False, True])
    return [g0, g1]


@pytest.mark.parametrize("space", [NodeAction(8), EdgeAction(8)])
def test_module_inference_through_rllib_dist(space):
    graphs = masked_graphs()
    level = space.level
    if level == "edge":
        graphs[0]["action_mask"] = np.array([True, False, False, True, False])
        graphs[1]["action_mask"] = np.array([False, True])
    module = RLModuleSpec(
        module_class=GNNModule,
        observation_space=OBS,
        action_space=space,
        model_config={"hidden": 8, "layers": 2},
    ).build()
    b = collate(GraphColumns.from_graphs(graphs, D, level))
    obs = {k: torch.from_numpy(np.asarray(v)) for k, v in b.items()}
    assert obs["action_mask"].shape == ((6,) if level == "node" else (7,))  # unpadded
    for fwd, get in (
        (module.forward_inference, module.get_inference_action_dist_cls),
        (module.forward_exploration, module.get_exploration_action_dist_cls),
    ):
        out = fwd({Columns.OBS: obs})
        logits = out[Columns.ACTION_DIST_INPUTS]
        assert logits.shape == ((2, 4) if level == "node" else (2, 5))
        dist = get().from_logits(logits)
        probs = dist._dist.probs
        allowed = [np.flatnonzero(g["action_mask"]) for g in graphs]
        for row, ok in enumerate(allowed):
            assert probs[row].sum().item() == pytest.approx(1.0, abs=1e-5)
            forbidden = [i for i in range(logits.shape[1]) if i not in ok]
            assert probs[row, forbidden].abs().sum().item() == 0.0
        greedy = dist.to_deterministic().sample().tolist()
        assert greedy[0] in allowed[0] and greedy[1] == 1
        # logp of a local action equals the log of its probability
        acts = torch.tensor([int(allowed[0][0]), 1])
        expected = torch.log(probs[torch.arange(2), acts])
        assert torch.allclose(dist.logp(acts), expected, atol=1e-5)


# --------------------------------------------------------------------------- validation
def selection_episode(eid, actions, masks, sizes=((4, 5), (3, 3), (2, 1))):
    obs = [make_graph(n, e, F=F, D=D, seed=i) for i, (n, e) in enumerate(sizes)]
    for o, m in zip(obs, masks):
        if m is not None:
            o["action_mask"] = np.asarray(m)
    return encode_episode(
        obs, list(actions), [1.0] * len(actions), terminated=True, truncated=False, episode_id=eid
    )


GOOD = dict(actions=[1, 2], masks=[[False, True, True, False], [True, True, True], [False, False]])
BAD = {
    # action 3 outside 0..2 of step 1's 3-node graph
    "action": (
        dict(actions=[1, 3], masks=GOOD["masks"]),
        1,
        ["action must be a node index in 0..2", "N=3", "found action 3"],
    ),
    # action 0 forbidden by step 0's mask (2 of 4 nodes allowed)
    "masked_action": (
        dict(actions=[0, 2], masks=GOOD["masks"]),
        0,
        ["must be allowed by step 0's action_mask", "found action 0", "allows 2 of N=4"],
    ),
    "action_mask": (
        dict(actions=[1, 2], masks=[[True, True], None, None]),
        0,
        ["action_mask must be bool [N=4]", "found bool [2]"],
    ),
}


def prelearner(tmp_path, on_error, space=None):
    from ray.rllib.algorithms.bc import BCConfig

    import offline_graph
    from offline_graph import GraphOfflinePreLearner

    space = NodeAction(8) if space is None else space
    cfg = (
        BCConfig()
        .environment(observation_space=OBS, action_space=space)
        .offline_data(
            input_=[str(tmp_path)], input_read_episodes=True, prelearner_class=GraphOfflinePreLearner
        )
        .training(train_batch_size_per_learner=2)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config={"hidden": 4, "layers": 1})
        )
    )
    cfg = offline_graph.configure(cfg, on_error=on_error)
    return GraphOfflinePreLearner(config=cfg, spaces=(OBS, space))


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_node_actions_raise_or_are_counted(tmp_path, kind):
    args, step, texts = BAD[kind]
    rows = [selection_episode("g0", **GOOD), selection_episode("bad", **args)]
    path = write_episode_file(tmp_path / "rows.parquet", rows)
    batch = {"item": np.array(rows, dtype=object), "path": np.array([path] * 2, dtype=object)}
    with pytest.raises(GraphValidationError) as err:
        prelearner(tmp_path, "raise")(batch)
    msg = str(err.value)
    assert err.value.reason == kind
    for text in [f"file {path}, row 1", "episode 'bad'", f"step t={step}", *texts]:
        assert text in msg, (text, msg)
    pre = prelearner(tmp_path, "skip")
    out = pre(batch)
    assert out.num_rows == 2  # the good episode's 2 steps
    assert pre.stats.as_dict()["rejected_by_reason"] == {kind: 1}


def test_mask_allowing_nothing_is_legal_only_on_the_final_observation(tmp_path):
    final_empty = selection_episode("ok", [1, 2], [[False, True, False, False], None, [False, False]])
    acted_on_empty = selection_episode(
        "bad", [1, 2], [[False, True, False, False], [False, False, False], None]
    )
    path = write_episode_file(tmp_path / "rows.parquet", [final_empty, acted_on_empty])
    batch = {
        "item": np.array([final_empty, acted_on_empty], dtype=object),
        "path": np.array([path] * 2, dtype=object),
    }
    with pytest.raises(GraphValidationError, match=r"step t=1.*allow at least one node") as err:
        prelearner(tmp_path, "raise")(batch)
    assert err.value.reason == "action_mask"


def test_too_many_nodes_for_the_space(tmp_path):
    rows = [selection_episode("big", **GOOD)]
    path = write_episode_file(tmp_path / "rows.parquet", rows)
    batch = {"item": np.array(rows, dtype=object), "path": np.array([path], dtype=object)}
    with pytest.raises(GraphValidationError, match=r"number of nodes must be <= 3 .*found N=4"):
        prelearner(tmp_path, "raise", NodeAction(3))(batch)


def test_mask_travels_unpadded_to_the_learner_batch(tmp_path):
    from offline_graph.rllib.offline.collate_fn import GraphCollateFn

    rows = [selection_episode("g0", **GOOD)]
    path = write_episode_file(tmp_path / "rows.parquet", rows)
    batch = {"item": np.array(rows, dtype=object), "path": np.array([path], dtype=object)}
    table = prelearner(tmp_path, "raise")(batch)
    assert table.num_rows == 2 and "node_mask" in table.column_names
    out = GraphCollateFn()(table)
    mask = out["default_policy/obs/action_mask"]
    ptr = out["default_policy/obs/ptr"].tolist()
    # rows are sampled (with replacement) from the 4-node step 0 and the 3-node step 1;
    # each row's mask is its step's recorded mask, one entry per node, no padding
    by_size = {4: ([False, True, True, False], 1), 3: ([True, True, True], 2)}
    acts = out["default_policy/actions"].tolist()
    assert mask.shape == (ptr[-1],) and mask.dtype == torch.bool
    for b in range(2):
        seg = mask[ptr[b] : ptr[b + 1]].tolist()
        assert (seg, acts[b]) == by_size[len(seg)]


def test_edge_mask_without_masks_means_all_allowed(tmp_path):
    rows = [selection_episode("g0", [4, 0], [None, None, None])]
    path = write_episode_file(tmp_path / "rows.parquet", rows)
    batch = {"item": np.array(rows, dtype=object), "path": np.array([path], dtype=object)}
    table = prelearner(tmp_path, "raise", EdgeAction(16))(batch)
    masks = table.column("edge_mask").to_pylist()
    # 2 rows sampled from steps with E=5 and E=3: every mask is all-allowed, one entry per edge
    assert len(masks) == 2 and all(len(m) in (3, 5) and all(m) for m in masks)
    assert not os.path.exists(tmp_path / "nothing")
