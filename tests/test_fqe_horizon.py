"""FQE with a horizon (a time limit the observations do not show).

Data: 3-step episodes truncated by a time limit of 3, a fresh random graph every step (the
time left is not in the observation), Discrete(2) actions drawn uniformly (logged
``action_logp`` = log 1/2), reward = the action. The greedy target "always 1" gets 1 per
step, 3 from the start. After 3 iterations from ``Q = 0`` the model is ``Q_3``: the graphs
all look alike, so ``Q_3(s, 1) = 3`` and ``Q_3(s, 0) = 2`` at every step (also for the steps
truncated at the limit: the truncation does not end the backup), ``V_3 = 3``.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest

from offline_graph import estimate_value
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.data.errors import ConfigError
from offline_graph.data.episodes.logged import load_logged
from offline_graph.data.episodes.reader import spec_from_spaces
from offline_graph.rllib.offline.episodes import encode_episode
from offline_graph.rllib.ope import fqe_model
from offline_graph.rllib.ope.fqe import FQESettings, FQEValues, fit_fqe
from tests.helpers import make_graph, write_episode_file
from tests.test_ope import SPACE, fixed

LIMIT = 3


def uniform_episode(obs: list, acts: np.ndarray, name: str, *, terminated: bool) -> bytes:
    """A logged episode of uniform actions ``acts`` (reward = the action, ``action_logp`` =
    log 1/2) ending at the limit: terminated, else truncated."""
    return encode_episode(
        obs, acts.tolist(), acts.astype(float).tolist(), terminated=terminated, truncated=not terminated,
        episode_id=name, action_logp=[math.log(0.5)] * LIMIT,
    )  # fmt: skip


@contextlib.contextmanager
def fits() -> Iterator[list[tuple[dict, FQEValues]]]:
    """The ``fit_fqe`` calls ``estimate_value`` makes meanwhile, ``(arguments by name, fit)`` in
    order: its own fits read as a direct ``fit_fqe`` call with those arguments gives them (bit
    for bit: same graphs, target, seed), without fitting them once more."""
    made: list[tuple[dict, FQEValues]] = []

    def spy(*args, **kwargs) -> FQEValues:
        fitted = fit_fqe(*args, **kwargs)
        made.append((inspect.signature(fit_fqe).bind(*args, **kwargs).arguments, fitted))
        return fitted

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fqe_model, "fit_fqe", spy)
        yield made


@pytest.fixture(scope="module")
def limited(tmp_path_factory) -> str:
    rng = np.random.default_rng(3)
    items = []
    for i in range(64):
        obs = [
            make_graph(int(rng.integers(2, 5)), 2, F=2, D=None, seed=7000 + 4 * i + j)
            for j in range(LIMIT + 1)
        ]
        items.append(uniform_episode(obs, rng.integers(0, 2, size=LIMIT), f"t{i}", terminated=False))
    return write_episode_file(tmp_path_factory.mktemp("fqe_h") / "limited.parquet", items)


@pytest.fixture(scope="module")
def limited_dr(limited) -> tuple[dict, FQEValues]:
    """``estimate_value(method="dr")`` on the limited episodes, and the one FQE fit it made:
    ``horizon=3`` found from the data, 150 steps an iteration, 2 bootstrap heads. The two tests
    below read both (one fit instead of a direct ``fit_fqe`` call with the same settings too)."""
    kw = dict(
        gamma=1.0, n_boot=20, batch_size=32, lr=1e-2, q_model={"hidden": 16, "layers": 1}, fqe_steps=150,
        fqe_heads=2,
    )  # fmt: skip
    with fits() as made:
        dr = estimate_value(fixed([0.0, 1.0]), [limited], method="dr", **kw)
    ((call, fitted),) = made
    assert call["settings"] == FQESettings(
        horizon=LIMIT, batch_size=32, lr=1e-2, model={"hidden": 16, "layers": 1}, boot_heads=2, steps=150
    )
    trans = load_logged(limited, spec_from_spaces(SPACE, gym.spaces.Discrete(2))).trans
    # ends: the terminations only (none here); the truncation at the limit ends no backup
    assert call["gamma"] == 1.0 and not trans.terminateds.any()
    assert np.array_equal(call["ends"], trans.terminateds)
    return dr, fitted


def test_three_iterations_give_the_three_step_value_at_every_step(limited, limited_dr) -> None:
    _, fitted = limited_dr  # fit_fqe(horizon=3, 2 heads, 150 steps) on these steps (the fixture checks)
    trans = load_logged(limited, spec_from_spaces(SPACE, gym.spaces.Discrete(2))).trans
    graphs = GraphColumns.concat([trans.obs, trans.final_obs])
    assert len(fitted.estimates) == LIMIT and len(fitted.losses) == LIMIT
    expected_q = LIMIT - (trans.actions == 0)  # Q_3(s, 1) = 3, Q_3(s, 0) = 2
    assert np.abs(fitted.q - expected_q).max() < 0.2
    assert np.abs(fitted.v - LIMIT).max() < 0.2  # every graph, final observations too
    assert fitted.heads_q.shape == (2, len(trans)) and fitted.heads_v.shape == (2, len(graphs))
    assert np.abs(fitted.heads_q - expected_q).max() < 0.3


def test_estimates_with_the_time_limit_from_the_data(limited_dr) -> None:
    # method="dr" reports under "fqe" the very fit (and value) method="fqe" makes and returns:
    # the horizon is found from the data before either is fitted
    dr, _ = limited_dr
    assert dr["fqe_horizon"] == LIMIT and dr["fqe_iterations"] == LIMIT
    assert dr["fqe"]["value"] == pytest.approx(3.0, abs=0.15)
    assert dr["value"] == pytest.approx(3.0, abs=0.1)
    # the data interval widened by the bootstrap heads' DR values: it still holds the value
    assert dr["ci_low"] <= dr["value"] <= dr["ci_high"]


def test_fqe_steps_must_be_positive(limited) -> None:
    with pytest.raises(ConfigError, match=r"fqe_steps must be an int >= 1 or None \(found 0\)"):
        estimate_value(fixed([0.0, 1.0]), [limited], method="fqe", gamma=1.0, fqe_steps=0)


@pytest.fixture(scope="module")
def ended_at_limit(tmp_path_factory) -> str:
    """3-step episodes of uniform Discrete(2) actions, reward = the action, each ending
    *terminated* at the limit, as RLlib's MultiAgentEpisode records an agent still acting
    when the env episode ends ("Case 2"). Every observation is the same graph: nothing tells
    the steps apart, so a model of the state alone can only average them (the test's values)."""
    rng = np.random.default_rng(5)
    graph = make_graph(3, 2, F=2, D=None, seed=11)
    items = []
    for i in range(64):
        items.append(
            uniform_episode([graph] * (LIMIT + 1), rng.integers(0, 2, size=LIMIT), f"e{i}", terminated=True)
        )
    return write_episode_file(tmp_path_factory.mktemp("fqe_end") / "ended.parquet", items)


def test_by_step_fits_each_steps_value_where_one_model_averages_them(ended_at_limit) -> None:
    """ "Always 1" from the start: 3. One model (``horizon=3``): a share ``p`` of the logged
    action-1 steps go on (all but the last step's), so ``Q_k(s, 1) = 1 + p Q_{k-1}(s, 1)`` and
    ``Q_3 = 1 + p (1 + p)`` (``p`` = 2/3 in expectation). ``fqe_by_step``: ``Q_t(s, 1) = 3 - t``,
    ``Q_t(s, 0) = 2 - t``, exactly the 3-step value from the start. Its time (10-20 s on the
    busy 2-core machine): the per-step fit iterates at least 20 times (MIN_ITERATIONS) at the
    150 steps an iteration the one model needs to come within 0.1 (one estimate_value call
    fits both with one fqe_steps); its per-step values are read from that very fit."""
    trans = load_logged(ended_at_limit, spec_from_spaces(SPACE, gym.spaces.Discrete(2))).trans
    step = np.arange(len(trans)) % LIMIT  # every episode has LIMIT steps
    ones = trans.actions == 1
    p = (ones & (step < LIMIT - 1)).sum() / ones.sum()
    kw = dict(
        gamma=1.0, n_boot=20, batch_size=32, lr=1e-2, q_model={"hidden": 16, "layers": 1}, fqe_steps=150,
        fqe_heads=0, horizon=LIMIT,
    )  # fmt: skip
    # method="dr" reports its FQE model's estimate under "fqe": the fit method="fqe" makes
    dr = estimate_value(fixed([0.0, 1.0]), [ended_at_limit], method="dr", **kw)
    assert dr["fqe_iterations"] == LIMIT
    assert dr["fqe"]["value"] == pytest.approx(1 + p * (1 + p), abs=0.1)
    assert dr["value"] == pytest.approx(3.0, abs=0.05)  # its IS corrections undo the one model's bias
    with fits() as made:
        by_step = estimate_value(fixed([0.0, 1.0]), [ended_at_limit], method="dr", fqe_by_step=True, **kw)
    assert by_step["fqe"]["value"] == pytest.approx(3.0, abs=0.05)  # FQE's own value: the per-step model
    assert by_step["fqe_iterations"] >= 20  # until settled, not LIMIT
    assert not any("had not settled" in w for w in by_step["warnings"])
    # DR (and the DR interval FQE's is widened to hold) is built on the one model, also with by_step
    assert by_step["value"] == dr["value"] and by_step["ci_low"] == dr["ci_low"]
    assert by_step["fqe"]["ci_low"] <= dr["ci_low"] and by_step["fqe"]["ci_high"] >= dr["ci_high"]

    # The per-step model that run fitted (150 steps an iteration) settles on the exact values
    # (measured: error 0 to 2e-5 over seeds 0-3; with 50 steps 4e-8; 20 iterations either way,
    # MIN_ITERATIONS); then the one model for DR
    assert [call["settings"].by_step for call, _ in made] == [True, False]
    fitted = made[0][1]
    assert fitted.converged
    assert np.abs(fitted.q - (LIMIT - step - (trans.actions == 0))).max() < 0.1
    assert np.abs(fitted.v[: len(trans)] - (LIMIT - step)).max() < 0.1
    assert (fitted.v[len(trans) :] == 0).all()  # the final observations: no step left


def test_by_step_needs_a_horizon_and_says_when_it_outruns_the_logs(ended_at_limit) -> None:
    kw = dict(gamma=1.0, n_boot=0, batch_size=32, lr=1e-2, q_model={"hidden": 16, "layers": 1}, fqe_heads=0)
    res = estimate_value(
        fixed([0.0, 1.0]), [ended_at_limit], method="fqe", horizon=5, fqe_by_step=True, fqe_steps=30, **kw
    )
    assert res["value"] == pytest.approx(3.0, abs=0.05)  # the logs end at step 3: steps 3, 4 count 0
    assert any("the longest logged episode has 3 steps, fewer than horizon=5" in w for w in res["warnings"])
    with pytest.raises(ConfigError, match=r"horizon must be given with fqe_by_step=True \(found no horizon"):
        estimate_value(fixed([0.0, 1.0]), [ended_at_limit], method="fqe", gamma=1.0, fqe_by_step=True)
    with pytest.raises(ConfigError, match=r"fqe_by_step must be True or False \(found 'yes'\)"):
        estimate_value(fixed([0.0, 1.0]), [ended_at_limit], method="fqe", gamma=1.0, fqe_by_step="yes")
