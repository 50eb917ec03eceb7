"""The DOPE check's exact values and its vectorized expert (offline_graph.bench.case_ope)."""

from __future__ import annotations

import numpy as np
import pytest

from offline_graph.bench.case_ope import correct_actions, spearman, true_value
from offline_graph.env.graph_env import correct_action
from offline_graph.rllib.ope_policy import torch_obs
from offline_graph.data.columns import GraphColumns
from tests.helpers import make_graph


def test_true_value_by_hand() -> None:
    p = 1 - 0.5 + 0.5 / 4  # right with probability 0.625
    # two steps, the first miss ends the episode, no hazard: p + p * p
    assert true_value(0.5, 4, 2, 1, 0.0) == pytest.approx(p + p * p)
    # three steps, two misses allowed, hazard h: p + (1-h) p + (1-h)^2 p (1 - q^2)
    h, q = 0.1, 1 - p
    assert true_value(0.5, 4, 3, 2, h) == pytest.approx(p + (1 - h) * p + (1 - h) ** 2 * p * (1 - q * q))
    assert true_value(0.0, 4, 50, 3, 0.02) == pytest.approx((1 - 0.98**50) / 0.02)  # the expert


def test_vectorized_correct_actions_match_the_env() -> None:
    graphs = [make_graph(n, 3 * n, F=6, D=2, seed=s) for s, n in enumerate([1, 4, 7, 12, 30, 5])]
    graphs.append({**make_graph(3, 0, F=6, D=2, seed=9)})  # no edges: color 0
    cols = GraphColumns.from_graphs(graphs, 2)
    got = correct_actions(torch_obs(cols), 4).numpy()
    assert got.tolist() == [correct_action(g, 4) for g in graphs]


def test_spearman() -> None:
    assert spearman([1, 2, 3], [10, 20, 30]) == 1.0
    assert spearman([3, 2, 1], [10, 20, 30]) == -1.0
    assert spearman([1, 3, 2], [1, 2, 3]) == pytest.approx(0.5)
    assert np.isfinite(spearman([1, 1, 1], [1, 2, 3]))
