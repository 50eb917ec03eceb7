"""estimate_value on episodes that RLlib's recorder writes in chunks: an episode still running
when ``sample()`` returns is written unfinished and continued, with the same id, in a later
chunk (``SingleAgentEpisode.cut()``). The chunks are joined by id; an episode whose end or
first step is not in the data is left out and said; steps logged twice are used once.

Task: 3-step episodes on ring graphs of 2-4 nodes, Discrete(2) actions drawn with the bandit's
behaviour ``MU1[n]`` (logged ``action_logp``), reward ``REWARD[n][a]``; the target ``PI1``.
Values by hand: ``wis_by_hand`` over the whole episodes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import offline_graph
from offline_graph.data.errors import ConfigError
from tests.ope_outside_data import MU1, PI1, REWARD, graph, policy, rllib_episode, wis_by_hand, write_raw


def logs(n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ns = [int(k) for k in rng.integers(2, 5, size=4)]
        acts = [int(rng.random() < MU1[k]) for k in ns[:3]]
        lps = [math.log(MU1[k] if a else 1 - MU1[k]) for k, a in zip(ns, acts)]
        out.append((i, ns, acts, [REWARD[k][a] for k, a in zip(ns, acts)], lps))
    return out


def chunks(log) -> tuple:
    """The episode as RLlib's recorder writes it across two sample() calls: steps 0-1
    unfinished, then steps 2 on from ``cut()`` (the same id, t_started 2)."""
    i, ns, acts, rews, lps = log
    first = rllib_episode(
        i, ns[:3], acts[:2], rews[:2], lps[:2], terminated=False, truncated=False, spaces=False
    )
    rest = first.cut()
    rest.add_env_step(
        observation=graph(ns[3]), action=acts[2], reward=float(rews[2]), terminated=True,
        extra_model_outputs={"action_logp": np.float32(lps[2])},
    )  # fmt: skip
    return first, rest


def wis(paths, **kw) -> dict:
    return offline_graph.estimate_value(policy(PI1), paths, method="wis", gamma=1.0, explore=True, **kw)


def test_chunks_in_other_files_or_one_file_are_joined(tmp_path):
    data = logs(40, seed=1)
    split = [chunks(log) for log in data[:15]]
    whole = [rllib_episode(*log, terminated=True, truncated=False, spaces=False) for log in data[15:]]
    a = write_raw(str(tmp_path / "a"), [c[0] for c in split] + whole)
    b = write_raw(str(tmp_path / "b"), [c[1] for c in split])
    want = wis_by_hand(data, PI1)
    res = wis([a, b])
    assert (res["episodes"], res["transitions"], res["episodes_left_out"]) == (40, 120, 0)
    assert res["value"] == pytest.approx(want, rel=1e-6) and res["behaviour"] == "logged"
    one = write_raw(str(tmp_path / "one"), [c for pair in split for c in pair] + whole)
    assert wis([one])["value"] == pytest.approx(want, rel=1e-6)  # both chunks in one file


def test_a_chunk_without_its_end_or_start_is_left_out_and_said(tmp_path):
    data = logs(30, seed=2)
    split = [chunks(log) for log in data[:4]]
    whole = [rllib_episode(*log, terminated=True, truncated=False, spaces=False) for log in data[4:]]
    # episodes 0, 1: only their first chunk (the recording stopped); 2, 3: only their second
    path = write_raw(str(tmp_path / "cut"), [split[0][0], split[1][0], split[2][1], split[3][1]] + whole)
    res = wis([path])
    assert (res["episodes"], res["transitions"], res["episodes_left_out"]) == (26, 78, 4)
    assert res["value"] == pytest.approx(wis_by_hand(data[4:], PI1), rel=1e-6)
    (said,) = [w for w in res["warnings"] if "left out, not whole" in w]
    assert "4 logged episodes were left out, not whole: 2 without their end" in said
    assert "2 without their first step" in said and "'ep-0000'" in said


def test_steps_logged_twice_are_used_once_and_different_ones_refused(tmp_path):
    data = logs(20, seed=3)
    eps = [rllib_episode(*log, terminated=True, truncated=False, spaces=False) for log in data]
    first = write_raw(str(tmp_path / "first"), eps[:10])
    again = write_raw(str(tmp_path / "again"), eps)  # RLlib 2.60 writes the earlier calls' again
    res = wis([first, again])
    assert (res["episodes"], res["transitions"]) == (20, 60)
    assert res["value"] == pytest.approx(wis_by_hand(data, PI1), rel=1e-6)
    assert any("10 logged episodes hold steps logged more than once" in w for w in res["warnings"])
    i, ns, acts, rews, lps = data[0]
    other = rllib_episode(
        i, ns, acts, [r + 1.0 for r in rews], lps, terminated=True, truncated=False, spaces=False
    )
    clash = write_raw(str(tmp_path / "clash"), [other])
    with pytest.raises(ConfigError, match=r"found episode 'ep-0000' with missing or repeated steps"):
        wis([first, clash])


def test_no_whole_episode_is_an_error_that_says_how_to_record(tmp_path):
    path = write_raw(str(tmp_path / "open"), [chunks(log)[0] for log in logs(3, seed=4)])
    with pytest.raises(
        ConfigError, match=r"data must hold at least one whole episode.*\(found 3 episodes without"
    ):
        wis([path])
