"""estimate_value checked from the outside: behaviour data written the ways the docs show
(RLlib's own SingleAgentEpisode API, ``write_episodes``, raw RLlib-style Parquet rows,
``offline-graph record``), target policies that are plain TorchRLModules written here (not
GNNModule), and tasks whose values are computed by hand, through
``estimate_value(module, [path], method=..., gamma=1.0)["value"]``."""

from __future__ import annotations

import math
import os

import gymnasium as gym
import msgpack
import msgpack_numpy
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.models.torch.torch_distributions import TorchCategorical

import offline_graph
from offline_graph.data.errors import ConfigError, OfflineGraphError

F = 3
OBS = offline_graph.graph_space(F)
ACT = gym.spaces.Discrete(2)


def graph(n: int) -> dict:
    """A ring of ``n`` nodes; the node count is the context (or the time step); node
    features: n, the node's index, whether it is the last node."""
    ring = np.arange(n, dtype=np.int64)
    x = np.stack([np.full(n, float(n)), ring, ring == n - 1], axis=1).astype(np.float32)  # n, index, last
    return {"x": x, "edge_index": np.stack([ring, (ring + 1) % n])}


class CategoricalModule(TorchRLModule):
    """An outside module whose every action distribution is RLlib's TorchCategorical."""

    def get_inference_action_dist_cls(self):
        return TorchCategorical

    def get_exploration_action_dist_cls(self):
        return TorchCategorical

    def get_train_action_dist_cls(self):
        return TorchCategorical


class NodeCountPolicy(CategoricalModule):
    """An outside module: ``pi(a=1 | graph) = model_config["p1"][n]``, ``n`` the graph's node
    count read from the learner batch's ``ptr``; a categorical over ``Discrete(2)``."""

    def setup(self):
        self.p1 = {int(k): float(v) for k, v in self.model_config["p1"].items()}
        self.unused = torch.nn.Linear(1, 1)  # a module with parameters, like any real one

    def _forward(self, batch, **kwargs):
        obs = batch[Columns.OBS]
        assert set(obs) >= {"x", "edge_index", "batch", "ptr"}, sorted(obs)
        n = (obs["ptr"][1:] - obs["ptr"][:-1]).tolist()
        p = torch.tensor([self.p1[k] for k in n], dtype=torch.float64)
        logits = torch.stack([torch.log1p(-p), torch.log(p)], dim=1).float()
        return {Columns.ACTION_DIST_INPUTS: logits}


def policy(p1: dict) -> NodeCountPolicy:
    return NodeCountPolicy(observation_space=OBS, action_space=ACT, model_config={"p1": p1})


# --- episodes --------------------------------------------------------------------------------


def rllib_episode(
    i, ns, actions, rewards, logps, *, terminated, truncated, action_kind="int", numpy=False, spaces=True
):
    """One episode built with RLlib's own API as an EnvRunner does: ``action_logp`` in
    ``extra_model_outputs`` as an np.float32 scalar; ``ns`` the node counts of the len+1
    observations. ``spaces``: set the episode's spaces, as an EnvRunner does (RLlib's own
    ``get_state()`` cannot serialize a Graph space; ``write_episodes`` handles it)."""
    kw = {"observation_space": OBS, "action_space": ACT} if spaces else {}
    ep = SingleAgentEpisode(id_=f"ep-{i:04d}", **kw)
    ep.add_env_reset(observation=graph(ns[0]))
    for t, (a, r) in enumerate(zip(actions, rewards)):
        act = {"int": int(a), "np": np.int64(a), "0d": np.array(a, np.int64)}[action_kind]
        extra = {"action_logp": np.float32(logps[t])} if logps is not None else None
        last = t == len(actions) - 1
        ep.add_env_step(
            observation=graph(ns[t + 1]),
            action=act,
            reward=float(r),
            terminated=terminated and last,
            truncated=truncated and last,
            extra_model_outputs=extra,
        )
    return ep.to_numpy() if numpy else ep


def write_raw(path, episodes):
    """Parquet as RLlib's ``output_write_episodes=True`` writes it: msgpack'd get_state() rows
    in an ``item`` column, no metadata."""
    os.makedirs(path, exist_ok=True)
    rows = [msgpack.packb(ep.get_state(), default=msgpack_numpy.encode) for ep in episodes]
    pq.write_table(pa.table({"item": pa.array(rows, pa.binary())}), f"{path}/part-0.parquet")
    return path


# --- task 1: a contextual bandit on graphs (one-step episodes) --------------------------------

REWARD = {2: (1.0, 0.0), 3: (0.0, 2.0), 4: (0.5, 1.5)}  # r(n, a)
MU1 = {2: 0.5, 3: 0.3, 4: 0.6}  # behaviour pi_b(a=1 | n), depends on the graph
PI1 = {2: 0.2, 3: 0.9, 4: 0.5}  # a stochastic target


def bandit_logs(n_episodes=300, seed=0):
    rng = np.random.default_rng(seed)
    logs = []
    for i in range(n_episodes):
        n = int(rng.integers(2, 5))
        a = int(rng.random() < MU1[n])
        p = MU1[n] if a == 1 else 1.0 - MU1[n]
        logs.append((i, [n, n], [a], [REWARD[n][a]], [math.log(p)]))
    return logs


def bandit_episodes(logs, **kw):
    return [
        rllib_episode(i, ns, a, r, lp, terminated=True, truncated=False, **kw) for i, ns, a, r, lp in logs
    ]


def wis_by_hand(logs, pi1, mu=None, gamma=1.0):
    """sum_i W_i G_i / sum_i W_i with W_i the product of pi/mu over the episode."""
    num = den = 0.0
    for _, ns, acts, rews, lps in logs:
        w = 1.0
        for t, a in enumerate(acts):
            p = pi1[ns[t]] if a == 1 else 1.0 - pi1[ns[t]]
            w *= p / math.exp(lps[t])
        num += w * sum(gamma**t * r for t, r in enumerate(rews))
        den += w
    return num / den


def bandit_true(logs, pi1):
    """E_{a ~ pi}[r(n, a)] averaged over the logged contexts (what FQE estimates)."""
    return float(
        np.mean([pi1[ns[0]] * REWARD[ns[0]][1] + (1 - pi1[ns[0]]) * REWARD[ns[0]][0] for _, ns, *_ in logs])
    )


@pytest.fixture(scope="module")
def bandit_dir(tmp_path_factory):
    logs = bandit_logs()
    path = str(tmp_path_factory.mktemp("bandit") / "logs")
    offline_graph.write_episodes(path, bandit_episodes(logs), observation_space=OBS, action_space=ACT)
    return logs, path


@pytest.mark.parametrize("action_kind", ["int", "np", "0d"])
@pytest.mark.parametrize("numpy_episode", [False, True])
def test_rllib_episodes_every_action_encoding_give_the_hand_computed_wis(
    tmp_path, action_kind, numpy_episode
):
    logs = bandit_logs(60, seed=1)
    path = str(tmp_path / "logs")
    eps = bandit_episodes(logs, action_kind=action_kind, numpy=numpy_episode)
    offline_graph.write_episodes(path, eps, observation_space=OBS, action_space=ACT)
    res = offline_graph.estimate_value(policy(PI1), [path], method="wis", gamma=1.0, explore=True)
    assert res["behaviour"] == "logged" and res["episodes"] == 60 and res["transitions"] == 60
    assert res["value"] == pytest.approx(wis_by_hand(logs, PI1), rel=1e-6)


def test_raw_rllib_parquet_rows_as_a_list_and_as_a_directory(tmp_path):
    logs = bandit_logs(80, seed=2)
    path = write_raw(str(tmp_path / "raw"), bandit_episodes(logs, action_kind="np", spaces=False))
    want = wis_by_hand(logs, PI1)
    for data in ([path], path, [f"{path}/part-0.parquet"]):
        res = offline_graph.estimate_value(policy(PI1), data, method="pdis", gamma=1.0, explore=True)
        assert res["value"] == pytest.approx(want, rel=1e-6), data


def test_target_equal_to_behaviour_gives_the_mean_logged_return(bandit_dir):
    logs, path = bandit_dir
    mean_return = float(np.mean([sum(r) for *_, r, _ in logs]))
    for method in ("wis", "pdis"):
        res = offline_graph.estimate_value(policy(MU1), [path], method=method, gamma=1.0, explore=True)
        assert res["value"] == pytest.approx(mean_return, rel=1e-6), method
        assert res["ess"] == pytest.approx(len(logs), rel=1e-6)


def test_deterministic_target_counts_only_the_matching_episodes(bandit_dir):
    logs, path = bandit_dir
    # greedy action of PI1: n=2 -> 0, n=3 -> 1, n=4 -> tie broken by argmax (0); use 0.7 for n=4
    target = {2: 0.2, 3: 0.9, 4: 0.7}
    greedy = {n: int(p > 0.5) for n, p in target.items()}
    det = {n: float(g) for n, g in greedy.items()}
    res = offline_graph.estimate_value(policy(target), [path], method="wis", gamma=1.0)
    assert res["value"] == pytest.approx(wis_by_hand(logs, det), rel=1e-6)
    # every greedy action is the best one here: the value is the mean best reward
    assert wis_by_hand(logs, det) == pytest.approx(
        sum(
            (1 / (MU1[ns[0]] if a[0] else 1 - MU1[ns[0]])) * r[0]
            for _, ns, a, r, _ in logs
            if a[0] == greedy[ns[0]]
        )
        / sum(
            1 / (MU1[ns[0]] if a[0] else 1 - MU1[ns[0]]) for _, ns, a, _, _ in logs if a[0] == greedy[ns[0]]
        )
    )


def test_fqe_epochs_on_small_logs_warns_that_it_under_fits(bandit_dir):
    """300 one-step episodes at batch 128: 3 gradient steps per pass. Measured before the
    warning: epochs=8 gave 0.94 (epochs=30: 0.83) for the true 1.21, silently (the 3-step
    chain below: epochs=8 at batch 16, 184 steps, 2.20 for 1.65)."""
    logs, path = bandit_dir
    res = offline_graph.estimate_value(
        policy(PI1),
        [path],
        method="fqe",
        gamma=1.0,
        explore=True,
        epochs=2,
        q_model={"hidden": 8, "layers": 1},
        fqe_heads=0,
    )
    assert res["fqe_iterations"] == 2
    assert [
        w
        for w in res["warnings"]
        if "epochs=2 made 6 gradient steps in all (3 per pass over 300 transitions" in w
    ]


# --- task 2: a 3-step chain: "go" (1) earns 1 and goes on, "stop" (0) earns 0.5 and ends ------
# (terminated); after 3 steps the time limit truncates. Step t observes a ring of t + 2 nodes.

MU2 = {2: 0.5, 3: 0.6, 4: 0.4, 5: 0.5}
PI2 = {2: 0.8, 3: 0.3, 4: 0.9, 5: 0.5}


def chain_value(p1: dict) -> float:
    v = 0.0
    for n in (4, 3, 2):  # backwards from the last step; the time limit ends the return
        v = p1[n] * (1.0 + v) + (1.0 - p1[n]) * 0.5
    return v


def chain_logs(n_episodes=200, seed=3):
    rng = np.random.default_rng(seed)
    logs = []
    for i in range(n_episodes):
        ns, acts, rews, lps = [2], [], [], []
        while True:
            n = ns[-1]
            a = int(rng.random() < MU2[n])
            acts.append(a)
            rews.append(1.0 if a else 0.5)
            lps.append(math.log(MU2[n] if a else 1 - MU2[n]))
            ns.append(n + 1)
            if a == 0 or len(acts) == 3:
                break
        logs.append((i, ns, acts, rews, lps))
    return logs


def chain_episodes(logs, **kw):
    return [
        rllib_episode(i, ns, a, r, lp, terminated=a[-1] == 0, truncated=a[-1] == 1, **kw)
        for i, ns, a, r, lp in logs
    ]


def pdis_by_hand(logs, pi1):
    """sum_t sum_i w[i, t] r[i, t] / S_t, S_t = sum_j w[j, min(t, T_j - 1)] (the guide's
    normalizer: an episode that has ended keeps its last weight)."""
    ws = []
    for _, ns, acts, _, lps in logs:
        w, run = [], 1.0
        for t, a in enumerate(acts):
            run *= (pi1[ns[t]] if a else 1 - pi1[ns[t]]) / math.exp(lps[t])
            w.append(run)
        ws.append(w)
    horizon = max(len(w) for w in ws)
    total = 0.0
    for t in range(horizon):
        s_t = sum(w[min(t, len(w) - 1)] for w in ws)
        total += sum(w[t] * log[3][t] for w, log in zip(ws, logs) if t < len(w)) / s_t
    return total


@pytest.fixture(scope="module")
def chain_dir(tmp_path_factory):
    logs = chain_logs()
    path = str(tmp_path_factory.mktemp("chain") / "logs")
    offline_graph.write_episodes(
        path, chain_episodes(logs, action_kind="0d"), observation_space=OBS, action_space=ACT
    )
    return logs, path


def test_chain_varying_lengths_wis_pdis_exact(chain_dir):
    logs, path = chain_dir
    assert {len(a) for _, _, a, _, _ in logs} == {1, 2, 3}
    for method, want in (("wis", wis_by_hand(logs, PI2)), ("pdis", pdis_by_hand(logs, PI2))):
        res = offline_graph.estimate_value(policy(PI2), [path], method=method, gamma=1.0, explore=True)
        assert res["value"] == pytest.approx(want, rel=1e-6), method
    # target = behaviour: the mean logged return, both methods
    mean_return = float(np.mean([sum(r) for *_, r, _ in logs]))
    for method in ("wis", "pdis"):
        res = offline_graph.estimate_value(policy(MU2), path, method=method, gamma=1.0, explore=True)
        assert res["value"] == pytest.approx(mean_return, rel=1e-6), method


def test_chain_deterministic_target_go_go_stop_is_exactly_2_5(chain_dir):
    logs, path = chain_dir
    greedy = {2: 0.9, 3: 0.8, 4: 0.1, 5: 0.5}  # go, go, stop: 1 + 1 + 0.5
    assert any(a == [1, 1, 0] for _, _, a, _, _ in logs)
    for method in ("wis", "pdis"):
        res = offline_graph.estimate_value(policy(greedy), [path], method=method, gamma=1.0)
        assert res["value"] == pytest.approx(2.5, rel=1e-9), method


def test_chain_fqe_and_dr_within_5_percent_of_the_range(chain_dir):
    logs, path = chain_dir
    true = chain_value(PI2)  # 0.8 * (1 + 0.3 * (1 + 0.9 + 0.05) + 0.35) + 0.1
    assert true == pytest.approx(0.8 * (1 + 0.3 * (1 + 0.95) + 0.7 * 0.5) + 0.2 * 0.5)
    value_range = 3.0 - 0.5
    res = offline_graph.estimate_value(
        policy(PI2), [path], method="dr", gamma=1.0, explore=True,
        batch_size=16, q_model={"hidden": 16, "layers": 1}, fqe_heads=0,
    )  # fmt: skip
    assert res["fqe_horizon"] == 3  # the time limit, from the truncated episodes
    assert abs(res["value"] - true) <= 0.05 * value_range, (res["value"], true)
    assert abs(res["fqe"]["value"] - true) <= 0.05 * value_range, (res["fqe"]["value"], true)


# --- task 3: node actions (pick a node): reward 1 for the last node of the ring ---------------

NODE_ACT = offline_graph.NodeAction(8)


class LastNodePolicy(CategoricalModule):
    """An outside node-action module: probability ``q`` on the graph's last node, the rest
    uniform; logits laid out ``[B, M]`` (M = most nodes of a graph in the batch), filler -inf,
    as the node-action guide describes, for RLlib's categorical."""

    def setup(self):
        self.q = float(self.model_config["q"])
        self.unused = torch.nn.Linear(1, 1)

    def _forward(self, batch, **kwargs):
        ptr = batch[Columns.OBS]["ptr"]
        sizes = (ptr[1:] - ptr[:-1]).tolist()
        logits = torch.full((len(sizes), max(sizes)), float("-inf"))
        for b, n in enumerate(sizes):
            p = torch.full((n,), (1 - self.q) / (n - 1))
            p[n - 1] = self.q
            logits[b, :n] = torch.log(p)
        return {Columns.ACTION_DIST_INPUTS: logits}


def test_node_actions_outside_module_wis_exact(tmp_path):
    rng = np.random.default_rng(5)
    eps, num, den = [], 0.0, 0.0
    q = 0.7
    for i in range(150):
        n = int(rng.integers(2, 6))
        a = int(rng.integers(0, n))  # uniform behaviour over the nodes
        r = 1.0 if a == n - 1 else 0.0
        ep = SingleAgentEpisode(id_=f"node-{i}")
        ep.add_env_reset(observation=graph(n))
        ep.add_env_step(
            observation=graph(n), action=np.int64(a), reward=r, terminated=True,
            extra_model_outputs={"action_logp": np.float32(-math.log(n))},
        )  # fmt: skip
        eps.append(ep)
        w = (q if a == n - 1 else (1 - q) / (n - 1)) * n
        num, den = num + w * r, den + w
    path = str(tmp_path / "nodes")
    offline_graph.write_episodes(path, eps, observation_space=OBS, action_space=NODE_ACT)
    module = LastNodePolicy(observation_space=OBS, action_space=NODE_ACT, model_config={"q": q})
    res = offline_graph.estimate_value(module, [path], method="wis", gamma=1.0, explore=True)
    assert res["value"] == pytest.approx(num / den, rel=1e-5)
    greedy = offline_graph.estimate_value(module, [path], method="wis", gamma=1.0)
    assert greedy["value"] == pytest.approx(1.0)  # greedy: the last node, reward 1 always
    # FQE / DR with a node Q head: the true value is q on every graph
    dr = offline_graph.estimate_value(
        module, path, method="dr", gamma=1.0, explore=True,
        batch_size=16, q_model={"hidden": 16, "layers": 1}, fqe_heads=0,
    )  # fmt: skip
    assert abs(dr["fqe"]["value"] - q) <= 0.05 and abs(dr["value"] - q) <= 0.05, (
        dr["fqe"]["value"],
        dr["value"],
    )


# --- behaviour data from `offline-graph record` (no action_logp: the behaviour is cloned) ------


class BanditEnv(gym.Env):
    """Task 1 as a gymnasium env: a ring of 2-4 nodes, one step, reward ``REWARD[n][a]``."""

    observation_space = OBS
    action_space = ACT

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = int(self.np_random.integers(2, 5))
        return self._obs(), {}

    def _obs(self):
        g = graph(self.n)
        return gym.spaces.GraphInstance(nodes=g["x"], edges=None, edge_links=g["edge_index"].T.copy())

    def step(self, action):
        return self._obs(), REWARD[self.n][int(action)], True, False, {}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from offline_graph.cli import main

    out = str(tmp_path_factory.mktemp("rec") / "logs")
    argv = ["record", "--env", f"{__name__}:BanditEnv", "--policy", "random", "--episodes", "300"]
    assert main([*argv, "--seed", "0", "--output", out, "--no-progress"]) == 0
    rows = pq.read_table(out).column("item").to_pylist()
    logs = []
    for i, row in enumerate(rows):  # read back with RLlib's own API, as a user would
        ep = SingleAgentEpisode.from_state(msgpack.unpackb(row, object_hook=msgpack_numpy.decode))
        n = (
            len(offline_graph.graph_to_dict(ep.get_observations(0))["x"])
            if not isinstance(ep.get_observations(0), dict)
            else len(ep.get_observations(0)["x"])
        )
        logs.append((i, [n, n], [int(ep.get_actions(0))], [float(ep.get_rewards(0))], [math.log(0.5)]))
    return logs, out


def test_recorded_logs_without_action_logp_clone_the_behaviour(recorded):
    logs, path = recorded
    res = offline_graph.estimate_value(policy(PI1), [path], method="wis", gamma=1.0, explore=True)
    assert res["behaviour"] == "bc" and any("action_logp" in w for w in res["warnings"])
    exact_mu = wis_by_hand(logs, PI1)  # with the true uniform behaviour
    assert abs(res["value"] - exact_mu) <= 0.05 * 2.0, (res["value"], exact_mu)
    with pytest.raises(ConfigError, match="action_logp"):
        offline_graph.estimate_value(policy(PI1), [path], method="wis", gamma=1.0, behaviour="logged")


def test_recorded_logs_fqe_with_every_default(recorded):
    logs, path = recorded
    res = offline_graph.estimate_value(policy(PI1), [path], method="fqe", gamma=1.0, explore=True)
    true = bandit_true(logs, PI1)
    assert abs(res["value"] - true) <= 0.05 * 2.0, (res["value"], true)
    assert res["ci_low"] <= res["value"] <= res["ci_high"] and res["warnings"] == []


# --- multi-agent episode files: one module at a time (module_id=) -----------------------------


def test_multi_agent_files_one_module_with_an_outside_module(tmp_path):
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    rng = np.random.default_rng(7)
    eps, mine = [], []
    for i in range(40):
        n, m = int(rng.integers(2, 5)), int(rng.integers(2, 5))
        a, b = int(rng.random() < MU1[n]), int(rng.integers(0, 2))
        lp = math.log(MU1[n] if a else 1 - MU1[n])
        ep = MultiAgentEpisode(id_=f"ma-{i}")
        ep.add_env_reset(
            observations={"solo_0": graph(n), "crowd_0": graph(m)}, infos={"solo_0": {}, "crowd_0": {}}
        )
        ep.add_env_step(
            observations={"solo_0": graph(n), "crowd_0": graph(m)},
            actions={"solo_0": np.int64(a), "crowd_0": b},
            rewards={"solo_0": REWARD[n][a], "crowd_0": 5.0},
            terminateds={"__all__": True},
            extra_model_outputs={
                "solo_0": {"action_logp": np.float32(lp)},
                "crowd_0": {"action_logp": np.float32(math.log(0.5))},
            },
        )
        eps.append(ep)
        mine.append((i, [n, n], [a], [REWARD[n][a]], [lp]))
    path = str(tmp_path / "ma")
    spaces = (
        gym.spaces.Dict({"solo_0": OBS, "crowd_0": OBS}),
        gym.spaces.Dict({"solo_0": ACT, "crowd_0": ACT}),
    )
    offline_graph.write_episodes(path, eps, observation_space=spaces[0], action_space=spaces[1])

    def mapping(agent_id, episode, **kwargs):
        return agent_id.split("_")[0]

    res = offline_graph.estimate_value(
        policy(PI1),
        [path],
        method="wis",
        gamma=1.0,
        explore=True,
        module_id="solo",
        policy_mapping_fn=mapping,
    )
    assert res["episodes"] == 40 and res["behaviour"] == "logged"
    assert res["value"] == pytest.approx(wis_by_hand(mine, PI1), rel=1e-6)
    with pytest.raises(ConfigError, match="module_id"):
        offline_graph.estimate_value(policy(PI1), [path], method="wis", gamma=1.0)


# --- bad input: `<where>: <what> must be <expected> (found <actual>). <hint>` ------------------


def test_error_messages_on_bad_input(tmp_path, bandit_dir):
    logs, path = bandit_dir
    ev = offline_graph.estimate_value

    def error(fn, *parts):
        with pytest.raises(OfflineGraphError) as info:
            fn()
        text = str(info.value)
        assert " must " in text and "(found " in text, text
        for part in parts:
            assert part in text, (part, text)
        return text

    error(
        lambda: ev(NodeCountPolicy, [path], method="wis"),
        "module must be an RLModule instance",
        "class NodeCountPolicy",
        ".build()",
    )
    error(
        lambda: ev(torch.nn.Linear(2, 2), [path], method="wis"),
        "module must be an RLModule",
        "Linear without forward_inference",
    )
    error(lambda: ev(policy(PI1), [path], method="wiss"), "method must be one of", "'wiss'")
    wide = NodeCountPolicy(
        observation_space=OBS, action_space=gym.spaces.Discrete(3), model_config={"p1": PI1}
    )
    error(
        lambda: ev(wide, [path], method="wis"),
        "ACTION_DIST_INPUTS must be a tensor [",
        "Discrete(3)",
        "(found Tensor [300, 2])",
    )
    f4 = NodeCountPolicy(
        observation_space=offline_graph.graph_space(4), action_space=ACT, model_config={"p1": PI1}
    )
    error(
        lambda: ev(f4, [path], method="wis"),
        "observation space must be the data's",
        "graph:F=4 in the module, graph:F=3",
    )

    class NoDistInputs(NodeCountPolicy):
        def _forward(self, batch, **kwargs):
            return {"logits": torch.zeros(len(batch[Columns.OBS]["ptr"]) - 1, 2)}

    bad = NoDistInputs(observation_space=OBS, action_space=ACT, model_config={"p1": PI1})
    error(lambda: ev(bad, [path], method="wis"), "must hold ACTION_DIST_INPUTS", "['logits']")

    # action_logp that is no log-probability, named by file, episode and step
    for value in (0.7, float("nan")):
        broken = [list(x) for x in logs[:10]]
        broken[4][4] = [value]
        out = str(tmp_path / f"lp{value}")
        offline_graph.write_episodes(out, bandit_episodes(broken), observation_space=OBS, action_space=ACT)
        error(
            lambda out=out: ev(policy(PI1), [out], method="wis"),
            "episode 'ep-0004', step t=0",
            "action_logp must be a finite log-probability",
        )
    error(
        lambda: offline_graph.encode_episode(
            [graph(2), graph(2)],
            [0],
            [1.0],
            terminated=True,
            truncated=False,
            episode_id="e",
            action_logp=[-0.1, -0.2],
        ),
        "episode 'e' action_logp must hold one log-probability per action (found 2 for 1 actions)",
    )
    # some episodes without action_logp: cloned, and the warning says how many
    out = str(tmp_path / "some")
    eps = bandit_episodes(logs[:10]) + bandit_episodes(
        [(i + 10, ns, a, r, None) for i, ns, a, r, _ in logs[:3]]
    )
    offline_graph.write_episodes(out, eps, observation_space=OBS, action_space=ACT)
    res = ev(policy(PI1), [out], method="wis", bc_epochs=1, q_model={"hidden": 8, "layers": 1})
    assert res["behaviour"] == "bc" and "action_logp missing in 3 of 13 logged episodes" in res["warnings"][0]
    error(
        lambda: ev(policy(PI1), [out], method="wis", behaviour="logged"), "found 3 of 13 episodes without it"
    )
    # converted rows without the final observation (converted before final_*): no FQE
    from offline_graph.cli import main

    assert main(["convert", "--input", path, "--output", str(tmp_path / "rows")]) == 0
    rows = pq.read_table(str(tmp_path / "rows"))
    old = rows.drop_columns([c for c in rows.column_names if c.startswith("final_")])
    assert (
        ev(policy(MU1), old, method="wis", bc_epochs=1, q_model={"hidden": 8, "layers": 1})["behaviour"]
        == "bc"
    )
    error(
        lambda: ev(policy(PI1), old, method="fqe"),
        "data for method 'fqe' must hold each episode's final observation",
    )
