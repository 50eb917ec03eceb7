"""GNNModule memory over time: frame stacking, graph GRU, node GRU (offline_graph.rllib.core.memory).

Hand-built run batches (prev / seq_pos / node_prev / target) and step-by-step inference with
STATE_IN / STATE_OUT threaded by hand must compute the same function of a run's graphs.
"""

from __future__ import annotations

import pytest
import torch
from gymnasium.spaces import Discrete
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.space_text import graph_space
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.rllib.core.gnn_module import GNNModule

F, D, K, H = 3, 2, 4, 8
KINDS = [{"frame_stack": 3}, {"memory": "gru"}, {"memory": "node_gru"}]
BASE = {"hidden": H, "head_hidden": 8, "layers": 1}


def build(mc: dict, action=None, seed: int = 0) -> GNNModule:
    torch.manual_seed(seed)
    return RLModuleSpec(
        module_class=GNNModule,
        observation_space=graph_space(F, D),
        action_space=action or Discrete(K),
        model_config={**BASE, **mc},
    ).build()


def graph(n: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    edges = [(i, (i + 1) % n) for i in range(n)] if n > 1 else []
    ei = torch.tensor(edges, dtype=torch.long).reshape(-1, 2).T.contiguous()
    x = torch.randn(n, F, generator=g)
    return {"x": x, "edge_index": ei, "edge_attr": torch.randn(ei.shape[1], D, generator=g)}


def union(graphs: list[dict]) -> dict:
    counts = torch.tensor([g["x"].shape[0] for g in graphs])
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    return {
        "x": torch.cat([g["x"] for g in graphs]),
        "edge_index": torch.cat([g["edge_index"] + ptr[i] for i, g in enumerate(graphs)], 1),
        "edge_attr": torch.cat([g["edge_attr"] for g in graphs]),
        "batch": torch.repeat_interleave(torch.arange(len(graphs)), counts),
        "ptr": ptr,
    }


def run_batch(runs: list[list[dict]], target: list[int] | None = None) -> dict:
    """Training layout: the runs' graphs one after the other, linked by prev / node_prev."""
    graphs = [g for run in runs for g in run]
    obs = union(graphs)
    prev, seq_pos, node_prev = [], [], []
    i = 0
    for run in runs:
        for p, g in enumerate(run):
            n = g["x"].shape[0]
            prev.append(i - 1 if p else -1)
            seq_pos.append(p)
            same = p > 0 and run[p - 1]["x"].shape[0] == n
            start = int(obs["ptr"][i - 1]) if same else 0
            node_prev += [start + v if same else -1 for v in range(n)]
            i += 1
    obs["prev"] = torch.tensor(prev)
    obs["seq_pos"] = torch.tensor(seq_pos)
    obs["node_prev"] = torch.tensor(node_prev)
    obs["target"] = torch.tensor(list(range(len(graphs))) if target is None else target)
    return {Columns.OBS: obs}


def train_out(m: GNNModule, runs, target=None) -> torch.Tensor:
    with torch.no_grad():
        return m.forward_train(run_batch(runs, target))[Columns.ACTION_DIST_INPUTS]


def step_outputs(m: GNNModule, runs: list[list[dict]]) -> list[torch.Tensor]:
    """Step-by-step inference, all runs in lockstep (a batch of len(runs) graphs per step);
    node_h is aligned by hand (kept when the node count is unchanged, else zeros)."""
    init = m.get_initial_state()
    states = [dict(init) for _ in runs]
    outs: list[list[torch.Tensor]] = [[] for _ in runs]
    for t in range(max(len(r) for r in runs)):
        live = [j for j, r in enumerate(runs) if t < len(r)]
        graphs = [runs[j][t] for j in live]
        if "node_h" in init:
            parts = []
            for j, g in zip(live, graphs):
                s = states[j]["node_h"]
                parts.append(s if s.shape[0] == g["x"].shape[0] else torch.zeros(g["x"].shape[0], H))
            state_in = {"node_h": torch.cat(parts)}
        else:
            state_in = {k: torch.stack([states[j][k] for j in live]) for k in init}
        out = m.forward_inference({Columns.OBS: union(graphs), Columns.STATE_IN: state_in})
        ptr = union(graphs)["ptr"]
        for row, j in enumerate(live):
            outs[j].append(out[Columns.ACTION_DIST_INPUTS][row])
            so = out[Columns.STATE_OUT]
            if "node_h" in so:
                states[j] = {"node_h": so["node_h"][ptr[row] : ptr[row + 1]]}
            else:
                states[j] = {k: v[row] for k, v in so.items()}
    return [o for run in outs for o in run]


def with_x(g: dict, seed: int) -> dict:
    return {**g, "x": torch.randn(g["x"].shape, generator=torch.Generator().manual_seed(seed))}


RUN_A = [graph(4, s) for s in (1, 2, 3, 4)]
RUN_B = [graph(3, s) for s in (11, 12)]


def test_frame_stack_dependence():
    m = build({"frame_stack": 3})
    base = train_out(m, [RUN_A, RUN_B])  # rows: a0..a3, b0, b1
    a2 = train_out(m, [RUN_A[:2] + [with_x(RUN_A[2], 99), RUN_A[3]], RUN_B])
    assert not torch.allclose(base[3], a2[3])  # a3 sees a2 (1 back)
    assert torch.allclose(base[4:], a2[4:])  # other run untouched
    a1 = train_out(m, [[RUN_A[0], with_x(RUN_A[1], 98)] + RUN_A[2:], RUN_B])
    assert not torch.allclose(base[3], a1[3])  # a3 sees a1 (k-1 = 2 back)
    a0 = train_out(m, [[with_x(RUN_A[0], 97)] + RUN_A[1:], RUN_B])
    assert torch.allclose(base[3], a0[3])  # a0 is older than k-1 frames for a3
    assert not torch.allclose(base[2], a0[2])
    b = train_out(m, [RUN_A, [with_x(RUN_B[0], 96), RUN_B[1]]])
    assert torch.allclose(base[:4], b[:4])  # run starts never see other runs (missing frames)
    alone = train_out(m, [[RUN_A[0]]])
    assert torch.allclose(base[0], alone[0], atol=1e-6)


@pytest.mark.parametrize("mc", KINDS[1:], ids=["gru", "node_gru"])
def test_recurrent_dependence(mc):
    m = build(mc)
    base = train_out(m, [RUN_A, RUN_B])
    a0 = train_out(m, [[with_x(RUN_A[0], 97)] + RUN_A[1:], RUN_B])
    assert not torch.allclose(base[3], a0[3])  # state carries a0 to a3
    assert torch.allclose(base[4:], a0[4:])
    b = train_out(m, [RUN_A, [with_x(RUN_B[0], 96), RUN_B[1]]])
    assert torch.allclose(base[:4], b[:4])
    assert not torch.allclose(base[5], b[5])
    assert torch.allclose(base[0], train_out(m, [[RUN_A[0]]])[0], atol=1e-6)


def test_node_gru_resets_when_node_count_changes():
    m = build({"memory": "node_gru"})
    other = graph(5, 21)  # N changes 4 -> 5: node_prev = -1 for all its nodes
    out = train_out(m, [[RUN_A[0], other]])
    start = train_out(m, [[other]])
    assert torch.allclose(out[1], start[0], atol=1e-6)
    changed = train_out(m, [[with_x(RUN_A[0], 5), other]])
    assert torch.allclose(changed[1], out[1], atol=1e-6)
    # same N: the state links the nodes, so the earlier graph matters
    same = [RUN_A[0], RUN_A[1]]
    assert not torch.allclose(train_out(m, [same])[1], train_out(m, [[with_x(RUN_A[0], 5), RUN_A[1]]])[1])


@pytest.mark.parametrize("action", [Discrete(K), NodeAction(6)], ids=["discrete", "node"])
@pytest.mark.parametrize("mc", KINDS, ids=["frame_stack", "gru", "node_gru"])
def test_runs_equal_step_by_step(mc, action):
    m = build(mc, action)
    run_c = [graph(4, 31), graph(5, 32), graph(5, 33), graph(5, 34), graph(2, 35)]  # N changes
    runs = [RUN_A, RUN_B, run_c]
    steps = step_outputs(m, runs)
    graphs = [g for r in runs for g in r]
    target = [1, 3, 4, 7, 8, 9, 10]  # some graphs are context only
    got = train_out(m, runs, target)
    assert got.shape[0] == len(target)
    for row, i in enumerate(target):
        n = graphs[i]["x"].shape[0] if isinstance(action, NodeAction) else K
        torch.testing.assert_close(got[row, :n], steps[i][:n], atol=1e-5, rtol=1e-5)
    if isinstance(action, NodeAction):  # filler columns stay impossible
        assert (got[0, 4:] == torch.finfo(got.dtype).min).all()


@pytest.mark.parametrize("mc", KINDS, ids=["frame_stack", "gru", "node_gru"])
def test_compute_values_marwil_style(mc):
    m = build({**mc, "value_head": True})
    batch = run_batch([RUN_A, RUN_B], target=[2, 3, 5])
    out = m.forward_train(batch)
    assert out[Columns.ACTION_DIST_INPUTS].shape == (3, K)
    emb = out[Columns.EMBEDDINGS]
    assert emb.shape[0] == 3
    values = m.compute_values(batch, embeddings=emb)
    assert values.shape == (3,)
    torch.testing.assert_close(values, m.compute_values(batch))
    values.sum().backward()  # gradients reach the temporal layer
    assert any(p.grad is not None for p in m._memory.parameters())


@pytest.mark.parametrize(
    "mc, what",
    [
        ({"frame_stack": 0}, "'frame_stack' must be an int >= 1"),
        ({"frame_stack": True}, "'frame_stack' must be an int >= 1"),
        ({"frame_stack": 2.0}, "'frame_stack' must be an int >= 1"),
        ({"memory": "lstm"}, "'memory' must be one of"),
        ({"memory": "gru", "frame_stack": 2}, "'frame_stack' must be 1 when 'memory' is set"),
        ({"max_seq_len": 0}, "'max_seq_len' must be an int >= 1"),
    ],
)
def test_config_errors(mc, what):
    with pytest.raises(ConfigError, match=what):
        build(mc)


def test_initial_state_and_is_stateful():
    plain = build({})
    assert plain.get_initial_state() == {} and not plain.is_stateful()
    assert not build({"frame_stack": 1, "max_seq_len": 5}).is_stateful()
    fs = build({"frame_stack": 3})
    s = fs.get_initial_state()
    assert s["frames"].shape == (2, 2 * H) and s["valid"].shape == (2,) and fs.is_stateful()
    assert not s["frames"].any() and not s["valid"].any()
    gru = build({"memory": "gru"})
    assert gru.get_initial_state()["h"].shape == (2 * H,) and gru.is_stateful()
    ng = build({"memory": "node_gru"})
    assert ng.get_initial_state()["node_h"].shape == (0, H) and ng.is_stateful()


def test_step_layout_errors_and_defaults():
    ng = build({"memory": "node_gru"})
    obs = union([RUN_A[0]])
    with pytest.raises(ValueError, match="node_h"):
        ng.forward_inference({Columns.OBS: obs, Columns.STATE_IN: {"node_h": torch.zeros(3, H)}})
    out = ng.forward_inference({Columns.OBS: obs})  # no STATE_IN = initial state
    assert out[Columns.STATE_OUT]["node_h"].shape == (4, H)
    bad = run_batch([RUN_A])
    bad[Columns.OBS]["seq_pos"] = torch.tensor([0, 2, 2, 3])
    with pytest.raises(ValueError, match="seq_pos"):
        build({"memory": "gru"}).forward_train(bad)
