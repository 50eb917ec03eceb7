"""Value runs (offline_graph.data.learning.value_runs): steps plus the graph after them, each graph once;
and the masked Q helpers of offline_graph.rllib.core.critic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.errors import SchemaError
from offline_graph.data.learning.transitions import Transitions
from offline_graph.data.learning.value_runs import (
    collate_value_runs,
    is_value_table,
    sample_value_runs,
    value_runs_to_arrow,
)
from offline_graph.rllib.core.critic import masked_argmax, masked_logsumexp, masked_max, pick
from offline_graph.rllib.algorithms.value_learner import (
    advantage_weights,
    cql_losses,
    expectile_loss,
    iql_losses,
)
from tests.helpers import FixedRows, two_episode_transitions

LOW = torch.finfo(torch.float32).min


def with_finals():
    """The two chain episodes of tests.helpers (A rows 0..4 tags 10..14, B rows 5..7 tags
    20..22) with final observations tagged 15 (A, 5 nodes) and 23 (B, 2 nodes)."""
    trans = two_episode_transitions()
    finals = [
        {"x": np.full((n, 2), tag, np.float32), "edge_index": np.zeros((2, 0), np.int64)}
        for n, tag in ((5, 15), (2, 23))
    ]
    trans.final_obs = GraphColumns.from_graphs(finals, None)
    return trans


def test_runs_are_chunks_of_the_picked_rows() -> None:
    # FixedRows picks rows 3, 1, 7, 4; length 2 chunks start at each episode's first step
    start, stop = sample_value_runs(with_finals(), FixedRows(), 4, 2)
    assert start.tolist() == [2, 0, 7, 4]
    assert stop.tolist() == [4, 2, 8, 5]


def test_each_graph_once_with_next_index_pointing_at_the_next_graph() -> None:
    trans = with_finals()
    table = value_runs_to_arrow(trans, np.array([2, 0, 7, 4]), np.array([4, 2, 8, 5]))
    assert is_value_table(table.column_names) and table.num_rows == 4
    batch = collate_value_runs(table)
    obs = batch["obs"]
    tags = obs["x"][obs["ptr"][:-1], 0].tolist()
    # run [2, 4) + row 4; run [0, 2) + row 2; run [7, 8) + B's final; run [4, 5) + A's final
    assert tags == [12, 13, 14, 10, 11, 12, 22, 23, 14, 15]
    assert obs["target"].tolist() == [0, 1, 3, 4, 6, 8]
    assert obs["next_index"].tolist() == [1, 2, 4, 5, 7, 9]
    assert batch["actions"].tolist() == [2, 3, 0, 1, 2, 4]
    assert batch["terminateds"].tolist() == [False, False, False, False, True, True]
    assert batch["truncateds"].tolist() == [False] * 6
    assert batch["rewards"].tolist() == [1.0] * 6
    # the final observations keep their own sizes: 2 nodes (B's) and 5 nodes (A's)
    assert np.diff(obs["ptr"]).tolist() == [3, 4, 4, 3, 3, 3, 2, 2, 4, 5]


def test_whole_episode_runs_ship_one_extra_graph_per_episode() -> None:
    trans = with_finals()
    one = collate_value_runs(value_runs_to_arrow(trans, *sample_value_runs(trans, FixedRows(), 8, 1)))
    assert (len(one["actions"]), len(one["obs"]["ptr"]) - 1) == (8, 16)  # L = 1: 2 graphs each
    whole = collate_value_runs(value_runs_to_arrow(trans, np.array([0, 5]), np.array([5, 8])))
    assert (len(whole["actions"]), len(whole["obs"]["ptr"]) - 1) == (8, 10)  # 5 + 1 and 3 + 1


def test_a_run_ending_an_episode_needs_its_final_observation() -> None:
    trans = two_episode_transitions()  # no final observations (like old converted rows)
    value_runs_to_arrow(trans, np.array([0]), np.array([2]))  # inside the episode: fine
    with pytest.raises(SchemaError, match="final observation of every episode must be kept"):
        value_runs_to_arrow(trans, np.array([3]), np.array([5]))


def tags(table) -> list[list[float]]:
    """Per value-run row: the tag (x) of each of its graphs, steps then next graph."""
    return [[g[0][0] for g in run] for run in table.column("x").to_pylist()]


def test_a_cut_episode_trains_a_step_once_its_next_step_is_buffered() -> None:
    """Converted rows cut inside episode A (rows of t 0..2, then t 3..4 with B): the first
    piece's last step has no next graph until the second piece is buffered; never a wrong one."""
    rows = with_finals().to_arrow()
    first, rest = Transitions.from_table(rows.slice(0, 3)), Transitions.from_table(rows.slice(3))
    assert first.final_obs.num_nodes.tolist() == [0]  # A's end is not in the first piece
    # alone, the first piece trains t 0..1 only (chunks of 2: [0, 2) + row 2)
    start, stop = sample_value_runs(first, np.random.default_rng(0), 50, 2)
    assert set(zip(start.tolist(), stop.tolist())) == {(0, 2)}
    assert tags(value_runs_to_arrow(first, start[:1], stop[:1])) == [[10, 11, 12]]
    with pytest.raises(SchemaError, match=r"episode 'A' step 2: the next observation of a run's last step"):
        value_runs_to_arrow(first, np.array([2]), np.array([3]))
    # a piece of one step without its next: no run at all
    start, stop = sample_value_runs(Transitions.from_table(rows.slice(2, 1)), np.random.default_rng(0), 5, 2)
    assert start.size == stop.size == 0
    # both pieces buffered (two entries of A): A t 2 gets its next graph from the second piece
    both = Transitions.concat([first, rest])
    start, stop = sample_value_runs(both, np.random.default_rng(0), 200, 2)
    assert set(zip(start.tolist(), stop.tolist())) == {(0, 2), (2, 3), (3, 5), (5, 7), (7, 8)}
    table = value_runs_to_arrow(both, np.array([2, 3, 7]), np.array([3, 5, 8]))
    assert tags(table) == [[12, 13], [13, 14, 15], [22, 23]]  # next step; A's and B's finals


def test_masked_helpers_ignore_masked_and_missing_choices() -> None:
    q = torch.tensor([[1.0, 5.0, LOW], [LOW, LOW, LOW], [-2.0, -1.0, -3.0]])
    assert masked_argmax(q).tolist()[::2] == [1, 1]
    assert masked_max(q).tolist() == [5.0, 0.0, -1.0]
    lse = masked_logsumexp(q)
    assert lse[0].item() == pytest.approx(np.log(np.exp(1.0) + np.exp(5.0)), rel=1e-6)
    assert lse[1].item() == 0.0
    assert lse[2].item() == pytest.approx(np.log(np.exp(-2.0) + np.exp(-1.0) + np.exp(-3.0)), rel=1e-6)
    assert pick(q, torch.tensor([0, 1, 2])).tolist() == [1.0, LOW, -3.0]


def test_expectile_loss_weights_positive_and_negative_errors() -> None:
    diff = torch.tensor([2.0, -1.0])
    # 0.8 * 4 and 0.2 * 1, averaged
    assert expectile_loss(diff, 0.8).item() == pytest.approx((0.8 * 4 + 0.2 * 1) / 2)


def test_iql_losses_by_hand() -> None:
    fwd_out = {
        # two Q heads, two transitions, three choices (the third masked in the first graph)
        "q": torch.tensor([[[1.0, 2.0, LOW], [0.0, 1.0, 3.0]], [[2.0, 1.0, LOW], [0.0, 0.0, 1.0]]]),
        "q_target": torch.tensor([[1.5, 2.5, LOW], [0.0, 0.0, 2.0]]),
        "v": torch.tensor([2.0, 3.0]),
        "v_next": torch.tensor([4.0, 10.0]),
    }
    batch = {
        "actions": torch.tensor([1, 2]),
        "rewards": torch.tensor([1.0, 0.0]),
        "terminateds": torch.tensor([False, True]),
    }
    logp = torch.tensor([-0.5, -1.0])
    out = iql_losses(fwd_out, batch, logp, gamma=0.5, beta=2.0, expectile=0.7)
    # Q_t(s, a) = 2.5, 2.0; u = Q_t - V = 0.5, -1.0
    assert out["vf_loss"].item() == pytest.approx((0.7 * 0.25 + 0.3 * 1.0) / 2)
    assert out["policy_loss"].item() == pytest.approx((np.exp(1.0) * 0.5 + np.exp(-2.0) * 1.0) / 2, rel=1e-6)
    # y = 1 + 0.5 * 4 = 3 (alive), 0 (terminated: no bootstrap); heads' Q(s, a) = (2, 3), (1, 1)
    assert out["qf_loss"].item() == pytest.approx((1 + 9) / 2 + (4 + 1) / 2)
    assert out["total_loss"].item() == pytest.approx(
        out["vf_loss"].item() + out["policy_loss"].item() + out["qf_loss"].item()
    )


def test_iql_advantage_weights_are_clipped_at_100() -> None:
    fwd_out = {
        "q": torch.zeros(1, 1, 2),
        "q_target": torch.tensor([[10.0, 0.0]]),
        "v": torch.tensor([0.0]),
        "v_next": torch.tensor([0.0]),
    }
    batch = {
        "actions": torch.tensor([0]),
        "rewards": torch.tensor([0.0]),
        "terminateds": torch.tensor([True]),
    }
    out = iql_losses(fwd_out, batch, torch.tensor([-1.0]), gamma=0.9, beta=3.0, expectile=0.8)
    assert out["adv_weight_mean"].item() == 100.0 and out["policy_loss"].item() == pytest.approx(100.0)


def test_advantage_weights_divided_by_the_batch_std() -> None:
    """batch_std: A = adv / std over the batch (population std), then min(exp(beta * A), 100):
    the same weights at any reward scale; shrink_std: divided only where the std is above 1
    (never enlarged); none: the paper's exp(beta * adv)."""
    adv = torch.tensor([3.0, -1.0, 1.0, 1.0])  # mean 1, std sqrt((4 + 4 + 0 + 0) / 4) = sqrt(2)
    want = np.exp(0.5 * np.array([3.0, -1.0, 1.0, 1.0]) / np.sqrt(2.0))  # 2.89, 0.70, 1.42, 1.42
    for scale in (1.0, 100.0, 0.01):
        got = advantage_weights(adv * scale, beta=0.5, norm="batch_std")
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
    for scale in (1.0, 100.0):  # std sqrt(2) and 141: above 1, divided as batch_std
        got = advantage_weights(adv * scale, beta=0.5, norm="shrink_std")
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
    small = advantage_weights(adv * 0.01, beta=0.5, norm="shrink_std")  # std 0.014: as it is
    np.testing.assert_allclose(small.numpy(), np.exp([0.015, -0.005, 0.005, 0.005]), rtol=1e-5)
    none = advantage_weights(adv * 100, beta=0.5, norm="none")  # exp(150), exp(-50), exp(50)
    np.testing.assert_allclose(none.numpy(), [100.0, 0.0, 100.0, 100.0], atol=1e-12)
    # beta 3: exp(3 * 3 / sqrt(2)) = 579 is clipped at 100; exp(-3 / sqrt(2)) = 0.120, exp(3 / sqrt(2)) = 8.34
    got = advantage_weights(adv, beta=3.0, norm="batch_std")
    np.testing.assert_allclose(got.numpy(), [100.0, 0.11987, 8.34214, 8.34214], rtol=1e-4)
    # equal advantages (std 0): divided by the 1e-6 floor; one advantage: left as it is
    assert advantage_weights(torch.tensor([0.0, 0.0]), 3.0, "batch_std").tolist() == [1.0, 1.0]
    assert advantage_weights(torch.tensor([0.5]), 2.0, "batch_std").item() == pytest.approx(np.e)
    with pytest.raises(ValueError, match=r"norm must be one of .*found 'softmax'"):
        advantage_weights(adv, 1.0, "softmax")


def test_iql_actor_loss_with_shrunk_advantages() -> None:
    fwd_out = {
        "q": torch.zeros(1, 2, 2),
        "q_target": torch.tensor([[4.0, 0.0], [0.0, 0.0]]),
        "v": torch.tensor([2.0, 2.0]),
        "v_next": torch.tensor([0.0, 0.0]),
    }
    batch = {
        "actions": torch.tensor([0, 0]),
        "rewards": torch.tensor([0.0, 0.0]),
        "terminateds": torch.tensor([True, True]),
    }
    # advantages (2, -2), std 2 (above 1): A = (1, -1); weights e^2, e^-2 at beta 2
    out = iql_losses(fwd_out, batch, torch.tensor([-1.0, -3.0]), 0.9, 2.0, 0.8, "shrink_std")
    assert out["policy_loss"].item() == pytest.approx((np.exp(2) * 1 + np.exp(-2) * 3) / 2, rel=1e-6)
    assert out["adv_weight_mean"].item() == pytest.approx((np.exp(2) + np.exp(-2)) / 2, rel=1e-6)
    assert out["adv_std"].item() == pytest.approx(2.0)


def test_cql_losses_by_hand() -> None:
    fwd_out = {
        "q": torch.tensor([[[1.0, 2.0, LOW], [0.0, 1.0, 3.0]]]),
        # online Q at s' picks choice 0 of the first next graph; the second has no legal choice
        "q_next": torch.tensor([[5.0, 1.0, LOW], [LOW, LOW, LOW]]),
        "q_next_target": torch.tensor([[4.0, 7.0, LOW], [9.0, 9.0, 9.0]]),
    }
    batch = {
        "actions": torch.tensor([1, 2]),
        "rewards": torch.tensor([1.0, 2.0]),
        "terminateds": torch.tensor([False, False]),
    }
    out = cql_losses(fwd_out, batch, gamma=0.5, min_q_weight=5.0)
    # y = 1 + 0.5 * Q_target(s', argmax Q(s')) = 1 + 0.5 * 4 = 3; 2 + 0 (no legal choice) = 2
    assert out["qf_loss"].item() == pytest.approx(((2 - 3) ** 2 + (3 - 2) ** 2) / 2)
    lse0, lse1 = np.log(np.exp(1.0) + np.exp(2.0)), np.log(1 + np.exp(1.0) + np.exp(3.0))
    assert out["cql_loss"].item() == pytest.approx(((lse0 - 2) + (lse1 - 3)) / 2, rel=1e-6)
    assert out["total_loss"].item() == pytest.approx(1.0 + 5.0 * out["cql_loss"].item(), rel=1e-6)


def test_bench_counts_value_run_graphs_per_trained_transition() -> None:
    from offline_graph.bench.case_value import value_runs_bytes

    # FixedRows picks row 3 twice: episode A whole (5 steps + its final graph), then A again cut
    # to 3 steps (+ row 3 as the next graph): 10 graphs for 8 trained transitions
    per_bytes, graphs = value_runs_bytes(with_finals(), FixedRows(), 8, 8)
    assert graphs == 10 / 8
    assert per_bytes > 0
