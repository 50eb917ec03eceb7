"""MARWIL value targets: discounted returns-to-go over whole episodes, by hand."""

import numpy as np

from offline_graph.data.learning.returns import discounted_returns


def test_three_step_episode_by_hand():
    # G2 = 3; G1 = 2 + 0.9*3 = 4.7; G0 = 1 + 0.9*4.7 = 5.23
    out = discounted_returns(np.array([1.0, 2.0, 3.0]), np.array([0, 3]), 0.9)
    np.testing.assert_allclose(out, [5.23, 4.7, 3.0], rtol=1e-6)


def test_returns_do_not_leak_across_episodes():
    out = discounted_returns(np.array([1.0, 1.0, 5.0, 0.0, 2.0]), np.array([0, 2, 3, 5]), 0.5)
    np.testing.assert_allclose(out, [1.5, 1.0, 5.0, 1.0, 2.0])


def test_gamma_one_is_plain_suffix_sum():
    r = np.arange(1, 6, dtype=np.float64)
    np.testing.assert_allclose(discounted_returns(r, np.array([0, 5]), 1.0), [15, 14, 12, 9, 5])


def test_few_and_many_episodes_give_the_same_bits():
    """Up to FEW_EPISODES episodes are summed step by step, more in vectorized passes: the
    same float64 operations in the same order (the sign of a zero reward included)."""
    from offline_graph.data.learning.returns import FEW_EPISODES

    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 30, size=3 * FEW_EPISODES)
    ptr = np.concatenate([[0], np.cumsum(lengths)])
    rewards = rng.normal(size=int(ptr[-1])) * 10.0 ** rng.integers(-20, 20, size=int(ptr[-1]))
    rewards[rng.random(len(rewards)) < 0.2] = -0.0
    many = discounted_returns(rewards, ptr, 0.97)  # vectorized
    few = [discounted_returns(rewards[a:b], np.array([0, b - a]), 0.97) for a, b in zip(ptr[:-1], ptr[1:])]
    assert many.dtype == np.float32 and many.tobytes() == np.concatenate(few).tobytes()
