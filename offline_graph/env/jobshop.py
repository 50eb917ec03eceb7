"""JobShop (``"offline_graph/JobShop-v0"``, :class:`~offline_graph.data.graphs.spaces.NodeAction`): L2D's MDP.

Job-shop scheduling as in L2D (Zhang et al., NeurIPS 2020, "Learning to Dispatch for Job Shop
Scheduling via Deep Reinforcement Learning"): ``J`` jobs, each a chain of ``M`` operations,
one per machine; at each step the agent dispatches one operation, after ``J * M`` steps every
operation is scheduled and the episode terminates with the makespan in ``info["makespan"]``.

* **Instances** (:class:`~offline_graph.env.jobshop_instances.JobShopConfig`, one per episode): a
  Taillard instance (``instance="ta01"`` ... ``"ta80"``), a fixed one (``durations`` and
  ``machines``, ``[J, M]``), or by default a new random one per episode from L2D's generator
  (``n_jobs x n_machines``, durations uniform in ``[low, high]``; drawn from the env's RNG,
  so ``reset(seed=s)`` fixes it). ``reset(options={"instance": "ta41"})`` or ``reset(options={"durations": d,
  "machines": m})`` loads that instance instead. See
  :mod:`~offline_graph.env.jobshop_instances` (generator, Taillard, best known bounds).
* **Observation**: ``GraphInstance`` on all ``N = J * M`` operations (node ``j * M + k`` is job
  ``j``'s ``k``-th operation), node columns :data:`JOBSHOP_FEATURES`; the first two are L2D's
  (completion-time lower bound / ``time_scale``, finished flag). Directed edges, edge feature
  ``[E, 1]``: 0.0 for the job order (``j*M+k -> j*M+k+1``, all ``J * (M-1)`` of them, first),
  1.0 for the machine order of what is scheduled so far (each scheduled operation to the next
  one on its machine, by start time; sorted by source).
* **Action**: a node index; ``info["action_mask"]`` (bool ``[N]``) allows each unfinished job's
  next operation. An illegal action (out of range or masked out) ends the episode with a reward
  below that of any legal way to finish it and ``info["illegal_action"] = True`` (the selection
  envs' rule; ``raise_on_illegal=True`` raises a ``ConfigError`` instead).
* **Transition**: L2D's permissible left shift. The operation's job is ready at the end of its
  previous operation (0 for the first); the operation starts at the earliest time from then on
  at which its machine is idle for its whole duration: in the first long enough idle gap before
  an operation scheduled to start after the ready time, else after the machine's last
  operation. Scheduled operations never move.
* **Reward**: the decrease of the largest completion-time lower bound, times ``reward_scale``.
  An operation's lower bound is its end if scheduled, else its job predecessor's bound plus its
  duration; the largest one starts at the longest job and ends at the makespan, so the
  undiscounted return is ``reward_scale * (initial bound - makespan)``.

State is kept incrementally (per machine sorted start times; a step updates the lower bounds
of the dispatched job only) and observations are copies of preallocated arrays: the 2,000
steps of a 100x20 episode took 0.07-0.5 s of env time on 2 shared CPU cores.
``env.make_policy(name, epsilon, rng)``: the dispatching rules of
:mod:`~offline_graph.env.jobshop_rules` and the CP-SAT expert
(:mod:`~offline_graph.env.jobshop_expert`, ``pip install -e ".[jobshop]"``).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import GraphInstance

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.spaces import NodeAction
from offline_graph.env.jobshop_instances import (
    JOBSHOP_FEATURES,
    TAILLARD_UPPER_BOUNDS,
    JobShopConfig,
    check_instance,
    generate_instance,
    taillard_instance,
)
from offline_graph.env.selection import Policy, SelectionEnv


class JobShopEnv(SelectionEnv):
    """L2D's job-shop dispatching MDP on a graph of the operations (see the module docstring).

    Observation ``GraphInstance(nodes [N, 7], edges [E, 1], edge_links [E, 2])``, node columns
    :data:`JOBSHOP_FEATURES`; ``info``: ``action_mask``, ``illegal_action``, ``is_success``,
    ``num_nodes``, ``num_edges``, and on the last step ``makespan``. After an episode,
    :attr:`start_times` holds the schedule.
    """

    config_cls = JobShopConfig

    def __init__(
        self,
        config: JobShopConfig | Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, render_mode, **overrides)
        inf = np.inf
        self._extra = bool(self.config.extra_features)
        high = [inf, 1, 1, inf, inf, inf, 1] + ([inf, inf] if self._extra else [])
        self.observation_space = gym.spaces.Graph(
            node_space=gym.spaces.Box(
                np.zeros(len(high), np.float32), np.array(high, np.float32), dtype=np.float32
            ),
            edge_space=gym.spaces.Box(0.0, 1.0, (1,), np.float32),
        )
        self.action_space = NodeAction(int(self.config.max_nodes))
        self._episode = 0
        self._links = np.zeros((0, 2), np.int64)
        cfg = self.config
        if cfg.instance is not None:
            self._fixed: tuple[np.ndarray, np.ndarray] | None = taillard_instance(cfg.instance)
        elif cfg.durations is not None:
            self._fixed = check_instance("JobShopEnv", cfg.durations, cfg.machines)
        else:
            self._fixed = None
        self.instance_name = cfg.instance or ("fixed" if self._fixed is not None else "generated")
        """``"ta01"`` ..., ``"fixed"``, ``"generated"`` or ``"options"``: where this episode's
        instance came from."""

    # ------------------------------------------------------------- instances
    def _random_episode(self, rng: np.random.Generator) -> None:
        if self._fixed is not None:
            self._load(*self._fixed)
            return
        cfg = self.config
        self._load(*generate_instance(cfg.n_jobs, cfg.n_machines, rng, cfg.low, cfg.high))

    def _from_options(self, options: Mapping[str, Any]) -> None:
        where = "JobShopEnv.reset"
        unknown = sorted(set(options) - {"instance", "durations", "machines"})
        if unknown or ("instance" in options) == ("durations" in options or "machines" in options):
            raise ConfigError(
                f"{where}: options must be {{'instance': 'taNN'}} or {{'durations': [J, M], "
                f"'machines': [J, M]}} (found keys {sorted(options)}). Give one instance."
            )
        if "instance" in options:
            name = options["instance"]
            if name not in TAILLARD_UPPER_BOUNDS:
                raise ConfigError(
                    f"{where}: options['instance'] must be 'ta01' ... 'ta80' (found {name!r}). "
                    "Pass durations and machines for another instance."
                )
            self._load(*taillard_instance(name))
            self.instance_name = name
            return
        d, m = check_instance(where, options.get("durations"), options.get("machines"))
        if d.size > int(self.config.max_nodes):
            raise ConfigError(
                f"{where}: the instance must have at most max_nodes={self.config.max_nodes} operations "
                f"(found {d.shape[0]} x {d.shape[1]} = {d.size}). Raise JobShopConfig.max_nodes."
            )
        self._load(d, m)
        self.instance_name = "options"

    def _load(self, durations: np.ndarray, machines: np.ndarray) -> None:
        J, M = durations.shape
        self._J, self._M, self._n = J, M, J * M
        self._dur = durations.astype(np.int64)
        self._mach = machines.astype(np.int64)
        self._dur_l = self._dur.reshape(-1).tolist()
        self._mach_l = self._mach.reshape(-1).tolist()
        self._cum = np.cumsum(self._dur, axis=1)
        self._lb = self._cum.copy()
        self._max_lb = int(self._lb[:, -1].max())
        self.initial_bound = self._max_lb
        """The largest completion-time lower bound at reset (the longest job)."""
        self._total = int(self._dur.sum())
        self._start = np.full(J * M, -1, np.int64)
        self._end_l = [0] * (J * M)
        self._next = [0] * J
        self._mstarts: list[list[int]] = [[] for _ in range(M)]
        self._mends: list[list[int]] = [[] for _ in range(M)]
        self._mops: list[list[int]] = [[] for _ in range(M)]
        self._msucc = np.full(J * M, -1, np.int64)
        self._cand = np.zeros(J * M, bool)
        self._cand[::M] = True
        s = np.float32(1.0 / float(self.config.time_scale))
        x = np.zeros((J * M, len(JOBSHOP_FEATURES) + 2 * self._extra), np.float32)
        x[:, 0] = self._lb.reshape(-1) * s
        x[::M, 2] = 1.0
        x[:, 3] = self._dur.reshape(-1) * s
        x[:, 4] = (self._cum - self._dur).reshape(-1) * s
        x[:, 5] = (self._cum[:, -1:] - self._cum + self._dur).reshape(-1) * s
        x[:, 6] = np.tile((M - np.arange(M)) / M, J)
        self._x = x
        if self._extra:
            self._est = (self._cum - self._dur).reshape(-1).astype(np.int64)  # job-order bounds
            self._update_starts(range(0, J * M, M))
        ops = np.arange(J * M, dtype=np.int64).reshape(J, M)
        self._job_links = np.stack([ops[:, :-1].reshape(-1), ops[:, 1:].reshape(-1)], axis=1)
        self._links = self._job_links
        self._episode += 1

    # ------------------------------------------------------------- observation
    @property
    def episode_index(self) -> int:
        """How many instances were loaded so far (changes at every reset)."""
        return self._episode

    @property
    def instance(self) -> tuple[np.ndarray, np.ndarray]:
        """This episode's ``(durations, machines)``, int64 ``[J, M]`` (copies)."""
        return self._dur.copy(), self._mach.copy()

    @property
    def start_times(self) -> np.ndarray:
        """Int64 ``[J, M]`` start time of every operation, -1 while not scheduled."""
        return self._start.reshape(self._J, self._M).copy()

    @property
    def makespan(self) -> int:
        """The largest end time of the operations scheduled so far."""
        return max((ends[-1] for ends in self._mends if ends), default=0)

    def _mask(self) -> np.ndarray:
        return self._cand.copy()

    def _obs(self) -> GraphInstance:
        src = np.flatnonzero(self._msucc >= 0)
        links = np.concatenate([self._job_links, np.stack([src, self._msucc[src]], axis=1)])
        edges = np.zeros((links.shape[0], 1), np.float32)
        edges[self._job_links.shape[0] :] = 1.0
        self._links = links
        return GraphInstance(nodes=self._x.copy(), edges=edges, edge_links=links)

    def _info(self, mask: np.ndarray, illegal: bool, success: bool = False) -> dict[str, Any]:
        info = super()._info(mask, illegal, success)
        if success:
            info["makespan"] = self.makespan
        return info

    # ------------------------------------------------------------- dynamics
    def _illegal(self, a: int) -> str | None:
        """Why ``a`` is not allowed now (None if it is)."""
        if 0 <= a < self._n and self._cand[a]:
            return None
        allowed = np.flatnonzero(self._cand).tolist()
        if not 0 <= a < self._n:
            what = f"out of range: the instance has {self._n} operations"
        else:
            j, k = divmod(a, self._M)
            state = "already scheduled" if self._start[a] >= 0 else f"waits for operation {self._next[j]}"
            what = f"job {j}'s operation {k}, {state}"
        return (
            f"JobShopEnv.step: action must be the next operation of an unfinished job, one of "
            f"{allowed} (found {a}: {what}). Dispatch only nodes allowed by info['action_mask']."
        )

    def _earliest(self, op: int) -> tuple[int, int]:
        """(start, position on its machine) ``op`` would get by the permissible left shift."""
        d, m = self._dur_l[op], self._mach_l[op]
        ready = self._end_l[op - 1] if op % self._M else 0
        starts, ends = self._mstarts[m], self._mends[m]
        pos = bisect.bisect_right(starts, ready)  # first operation starting after the job is ready
        earliest = max(ready, ends[pos - 1]) if pos else ready
        while pos < len(starts) and earliest + d > starts[pos]:  # gap before starts[pos] too short
            earliest = ends[pos]
            pos += 1
        return earliest, pos

    def _update_starts(self, changed: Any) -> None:
        """Extra features: left-shift starts of the ``changed`` candidates, then the slack
        column of every candidate (against the earliest candidate start)."""
        for op in changed:
            self._est[op] = self._earliest(op)[0]
        s = np.float32(1.0 / float(self.config.time_scale))
        cand = np.flatnonzero(self._cand)
        self._x[:, 7] = self._est * s
        self._x[:, 8] = 0.0
        if cand.size:
            est = self._est[cand]
            self._x[cand, 8] = (est - est.min()) * s

    def _place(self, op: int) -> int:
        """Schedule ``op`` by the permissible left shift; its start time."""
        m = self._mach_l[op]
        starts, ends, ops = self._mstarts[m], self._mends[m], self._mops[m]
        earliest, pos = self._earliest(op)
        d = self._dur_l[op]
        starts.insert(pos, earliest)
        ends.insert(pos, earliest + d)
        ops.insert(pos, op)
        if pos:
            self._msucc[ops[pos - 1]] = op
        self._msucc[op] = ops[pos + 1] if pos + 1 < len(ops) else -1
        return earliest

    def step(self, action: Any) -> tuple[GraphInstance, float, bool, bool, dict[str, Any]]:
        self._require_reset()
        a = self._action(action)
        self._t += 1
        reason = self._illegal(a)
        scale = float(self.config.reward_scale)
        if reason is not None:
            if self.config.raise_on_illegal:
                raise ConfigError(reason)
            self._active = False
            reward = scale * (self._max_lb - self._total) - float(self.config.illegal_penalty)
            info = self._info(self._mask(), True)
            info["illegal_reason"] = reason
            return self._obs(), reward, True, False, info
        j, k = divmod(a, self._M)
        start = self._place(a)
        end = start + self._dur_l[a]
        self._start[a] = start
        self._end_l[a] = end
        row = self._lb[j]
        row[k:] = end + self._cum[j, k:] - self._cum[j, k]
        self._x[a : (j + 1) * self._M, 0] = row[k:] * np.float32(1.0 / float(self.config.time_scale))
        self._x[a, 1] = 1.0
        self._x[a, 2] = 0.0
        self._cand[a] = False
        self._next[j] = k + 1
        if k + 1 < self._M:
            self._cand[a + 1] = True
            self._x[a + 1, 2] = 1.0
        if self._extra:
            self._est[a] = start
            self._est[a + 1 : (j + 1) * self._M] = row[k + 1 :] - self._cum[j, k + 1 :] + self._cum[j, k:-1]
            m = self._mach_l[a]
            cand = np.flatnonzero(self._cand).tolist()
            self._update_starts([c for c in cand if self._mach_l[c] == m or c == a + 1])
        old = self._max_lb
        self._max_lb = max(old, int(row[-1]))
        done = self._t >= self._n
        self._active = not done
        return self._obs(), scale * (old - self._max_lb), done, False, self._info(self._mask(), False, done)

    # ------------------------------------------------------------- policies
    def make_policy(self, name: str, epsilon: float, rng: np.random.Generator) -> Policy:
        """Behaviour policy by name (:data:`~offline_graph.env.jobshop_rules.JOBSHOP_POLICY_NAMES`):
        a rule (``"spt"``, ``"mwkr"``, ``"fdd_mwkr"``, ``"mopnr"``), ``"random"``, ``"expert"``
        (CP-SAT, needs ortools), ``"mixed"`` (the expert, else with probability ``epsilon`` a
        random allowed operation) or ``"noisy_<rule>"`` (the same around a rule)."""
        from offline_graph.env.jobshop_rules import make_jobshop_policy

        expert = None
        if name in ("expert", "mixed"):
            from offline_graph.env.jobshop_expert import cpsat_expert

            expert = cpsat_expert(self, time_limit=float(self.config.expert_time_limit))
        return make_jobshop_policy(name, epsilon, rng, expert)
