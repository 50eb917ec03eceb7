"""FQE with a horizon (a time limit the observations do not show).

Data: 3-step episodes truncated by a time limit of 3, a fresh random graph every step (the
time left is not in the observation), Discrete(2) actions drawn uniformly (logged
``action_logp`` = log 1/2), reward = the action. The greedy target "always 1" gets 1 per
step, 3 from the start. After 3 iterations from ``Q = 0`` the model is ``Q_3``: the graphs
all look alike, so ``Q_3(s, 1) = 3`` and ``Q_3(s, 0) = 2`` at every step (also for the steps
truncated at the limit: the truncation does not end the backup), ``V_3 = 3``.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from offline_graph import estimate_value
from offline_graph.data.columns import GraphColumns
from offline_graph.data.logged import load_logged
from offline_graph.data.reader import spec_from_spaces
from offline_graph.rllib.episodes import encode_episode
from offline_graph.rllib.fqe import FQESettings, fit_fqe
from offline_graph.rllib.ope_policy import target_choices
from tests.helpers import make_graph, write_episode_file
from tests.test_ope import SPACE, fixed

LIMIT = 3


@pytest.fixture(scope="module")
def limited(tmp_path_factory) -> str:
    rng = np.random.default_rng(3)
    items = []
    for i in range(64):
        obs = [
            make_graph(int(rng.integers(2, 5)), 2, F=2, D=None, seed=7000 + 4 * i + j)
            for j in range(LIMIT + 1)
        ]
        acts = rng.integers(0, 2, size=LIMIT)
        items.append(
            encode_episode(
                obs,
                acts.tolist(),
                acts.astype(float).tolist(),
                terminated=False,
                truncated=True,
                episode_id=f"t{i}",
                action_logp=[math.log(0.5)] * LIMIT,
            )  # fmt: skip
        )
    return write_episode_file(tmp_path_factory.mktemp("fqe_h") / "limited.parquet", items)


def test_three_iterations_give_the_three_step_value_at_every_step(limited) -> None:
    module = fixed([0.0, 1.0])
    logged = load_logged(limited, spec_from_spaces(SPACE, gym.spaces.Discrete(2)))
    trans, ptr = logged.trans, logged.ptr
    graphs = GraphColumns.concat([trans.obs, trans.final_obs])
    pi = target_choices(module, graphs, explore=False)
    settings = FQESettings(
        horizon=LIMIT, batch_size=32, lr=1e-2, model={"hidden": 16, "layers": 1}, boot_heads=2, steps=150
    )
    fitted = fit_fqe(
        graphs,
        ptr,
        trans.actions,
        trans.rewards,
        trans.terminateds,
        pi,
        1.0,
        SPACE,
        gym.spaces.Discrete(2),
        settings,
    )
    assert len(fitted.estimates) == LIMIT and len(fitted.losses) == LIMIT
    expected_q = LIMIT - (trans.actions == 0)  # Q_3(s, 1) = 3, Q_3(s, 0) = 2
    assert np.abs(fitted.q - expected_q).max() < 0.2
    assert np.abs(fitted.v - LIMIT).max() < 0.2  # every graph, final observations too
    assert fitted.heads_q.shape == (2, len(trans)) and fitted.heads_v.shape == (2, len(graphs))
    assert np.abs(fitted.heads_q - expected_q).max() < 0.3


def test_estimates_with_the_time_limit_from_the_data(limited) -> None:
    kw = dict(
        gamma=1.0, n_boot=20, batch_size=32, lr=1e-2, q_model={"hidden": 16, "layers": 1}, fqe_steps=150
    )
    fqe = estimate_value(fixed([0.0, 1.0]), [limited], method="fqe", **kw)
    assert fqe["fqe_horizon"] == LIMIT and fqe["fqe_iterations"] == LIMIT
    assert fqe["value"] == pytest.approx(3.0, abs=0.15)
    dr = estimate_value(fixed([0.0, 1.0]), [limited], method="dr", **kw)
    assert dr["value"] == pytest.approx(3.0, abs=0.1)
    # the data interval widened by the bootstrap heads' DR values: it still holds the value
    assert dr["ci_low"] <= dr["value"] <= dr["ci_high"]


def test_fqe_steps_must_be_positive(limited) -> None:
    from offline_graph.data.errors import ConfigError

    with pytest.raises(ConfigError, match=r"fqe_steps must be an int >= 1 or None \(found 0\)"):
        estimate_value(fixed([0.0, 1.0]), [limited], method="fqe", gamma=1.0, fqe_steps=0)
