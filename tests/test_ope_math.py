"""The pure OPE estimators (offline_graph.data.analysis.ope) on tiny episodes computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from offline_graph.data.analysis import ope
from offline_graph.data.errors import ConfigError

# Two episodes, gamma 0.5: episode 0 rewards [1, 2] ratios [2, 0.5]; episode 1 reward [3] ratio [0.5].
REWARDS = np.array([1.0, 2.0, 3.0])
RATIOS = np.array([2.0, 0.5, 0.5])
PTR = np.array([0, 2, 3])
GAMMA = 0.5


def test_wis_by_hand() -> None:
    # W = [2 * 0.5, 0.5] = [1, 0.5]; G = [1 + 0.5 * 2, 3] = [2, 3]; (1*2 + 0.5*3) / 1.5
    assert ope.wis(REWARDS, RATIOS, PTR, GAMMA) == pytest.approx(3.5 / 1.5)


def test_pdis_by_hand_with_absorbing_ended_episode() -> None:
    # w: ep0 [2, 1], ep1 [0.5]; S_0 = 2.5, S_1 = 1 + 0.5 (episode 1 ended, keeps its weight)
    expected = (2 / 2.5) * 1 + GAMMA * (1 / 1.5) * 2 + (0.5 / 2.5) * 3
    assert ope.pdis(REWARDS, RATIOS, PTR, GAMMA) == pytest.approx(expected)


def test_ratios_one_give_the_mean_discounted_return_exactly() -> None:
    ones = np.ones(3)
    assert ope.wis(REWARDS, ones, PTR, GAMMA) == 2.5  # (2 + 3) / 2
    assert ope.pdis(REWARDS, ones, PTR, GAMMA) == 2.5
    assert ope.wis(REWARDS, ones, PTR, 1.0) == 3.0  # (3 + 3) / 2


def test_dr_by_hand_with_truncated_tail() -> None:
    q = np.array([1.5, 2.0, 3.0])
    v = np.array([1.0, 2.0, 2.0])
    v_end = np.array([0.0, 4.0])  # episode 1 truncated: bootstraps V(final obs) = 4
    # wn: ep0 [0.8, 2/3], ep1 [0.2]; previous weights: ep0 [1/2, 0.8], ep1 [1/2]
    expected = (0.8 * (1 - 1.5) + 0.5 * 1.0) + GAMMA * (2 / 3 * 0 + 0.8 * 2.0) + (0.2 * 0 + 0.5 * 2.0)
    expected += GAMMA * 0.2 * 4.0
    assert ope.dr(REWARDS, RATIOS, PTR, GAMMA, q, v, v_end) == pytest.approx(expected)
    assert expected == pytest.approx(2.3)


def test_ess_clip_and_zero_ratios() -> None:
    assert ope.ess(ope.episode_weights(RATIOS, PTR)) == pytest.approx(1.5**2 / 1.25)
    ratios, share = ope.step_ratios(np.array([1.0, 0.5]), np.array([0.25, 0.5]), clip=2.0)
    np.testing.assert_allclose(ratios, [2.0, 1.0])
    assert share == 0.5
    np.testing.assert_allclose(ope.cumulative_weights(np.array([2.0, 0.0, 3.0]), np.array([0, 3])), [2, 0, 0])
    with pytest.raises(ConfigError, match="behaviour probability"):
        ope.step_ratios(np.array([1.0]), np.array([0.0]))


def test_bootstrap_interval_and_estimate_dict() -> None:
    out = ope.is_estimate("wis", REWARDS, np.ones(3), PTR, GAMMA, n_boot=50, seed=1)
    # resamples of the episode returns {2, 3}: every mean lies in [2, 3]
    assert out["value"] == 2.5 and 2.0 <= out["ci_low"] <= 2.5 <= out["ci_high"] <= 3.0
    assert out["ess"] == 2.0
    model = (np.zeros(3), np.zeros(3), np.zeros(2))
    dr_out = ope.is_estimate("dr", REWARDS, np.ones(3), PTR, GAMMA, n_boot=20, model=model)
    assert dr_out["value"] == pytest.approx(2.5)  # a zero model: DR is PDIS
    flat = ope.mean_estimate(np.array([1.0, 1.0, 1.0]), n_boot=10)
    assert flat == {"value": 1.0, "ci_low": 1.0, "ci_high": 1.0}
    assert ope.ess_warnings(1.0, 20) and not ope.ess_warnings(5.0, 20)


def test_wis_without_a_weighted_episode_is_undefined_not_zero() -> None:
    """Every episode weight 0 (the target never takes some logged action of each): WIS is NaN
    and says why; resamples without a weighted episode do not count in the interval."""
    zero = np.array([2.0, 0.0, 0.0])  # W = [0, 0]
    out = ope.is_estimate("wis", REWARDS, zero, PTR, GAMMA, n_boot=20)
    assert np.isnan(out["value"]) and np.isnan(out["ci_low"]) and out["ess"] == 0.0
    (warning,) = ope.ess_warnings(out["ess"], 2)
    assert "every logged episode has importance weight 0" in warning and "explore=True" in warning
    # only episode 1 weighted (W = [0, 0.5]): every defined resample is G_1 = 3
    one = ope.is_estimate("wis", REWARDS, np.array([2.0, 0.0, 0.5]), PTR, GAMMA, n_boot=50, seed=0)
    assert (one["value"], one["ci_low"], one["ci_high"]) == (3.0, 3.0, 3.0)
    # PDIS stays defined: step 0 of episode 0 keeps weight 2 (S_0 = 2): 1 * 1 + 0 + 0
    assert ope.pdis(REWARDS, zero, PTR, GAMMA) == pytest.approx(1.0)


def test_replicate_interval_by_hand() -> None:
    # replicates 1 and 3: sd (ddof 1) = sqrt(2); z(97.5%) = 1.959964
    low, high = ope.replicate_interval(10.0, np.array([1.0, 3.0]))
    assert low == pytest.approx(10.0 - 1.959964 * 2**0.5, abs=1e-5)
    assert high == pytest.approx(10.0 + 1.959964 * 2**0.5, abs=1e-5)
    assert all(np.isnan(ope.replicate_interval(1.0, np.array([2.0]))))


def test_widen_interval_adds_the_model_spread_by_hand() -> None:
    # data interval [8, 13] around 10; model estimates 1 and 3: (z * sd)^2 = 1.959964^2 * 2 = 7.682918
    low, high = ope.widen_interval(10.0, 8.0, 13.0, np.array([1.0, 3.0]))
    assert low == pytest.approx(10.0 - (4.0 + 7.682918) ** 0.5, abs=1e-5)  # 6.58197
    assert high == pytest.approx(10.0 + (9.0 + 7.682918) ** 0.5, abs=1e-5)  # 14.08447
    assert ope.widen_interval(10.0, 8.0, 13.0, np.array([5.0])) == (8.0, 13.0)
    assert ope.widen_interval(10.0, 8.0, 13.0, np.array([2.0, 2.0])) == (8.0, 13.0)


def test_fqe_settles_when_the_estimate_stops_moving() -> None:
    from offline_graph.rllib.ope.fqe import MIN_ITERATIONS, PLATEAU_WINDOW, settled

    growing = [float(k) for k in range(40)]  # +1 per iteration: never settled
    assert not settled(growing)
    flat = growing[:25] + [25.0 + 0.02 * k for k in range(PLATEAU_WINDOW + 1)]  # +0.2 over 10 at 25.2
    assert settled(flat)  # 0.2 <= 1% of 25.2
    assert not settled(flat[:-1] + [25.0 + 0.3 + 0.02 * PLATEAU_WINDOW])  # 0.5 > 1% of 25.5
    assert not settled([5.0] * (MIN_ITERATIONS - 1))  # too early to tell
