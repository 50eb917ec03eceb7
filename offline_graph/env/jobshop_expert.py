"""The CP-SAT expert for :class:`~offline_graph.env.jobshop.JobShopEnv` (optional: OR-Tools).

:func:`cpsat_solve` solves an instance with OR-Tools CP-SAT (interval variables, one
no-overlap constraint per machine, minimise the makespan) within a time limit;
:func:`dispatch_order` turns its start times into dispatch decisions (operations by start
time, ties by node index; a job's operations come in job order since durations are >= 1).
:func:`cpsat_expert` is the behaviour policy: on each new episode it solves the env's
instance, replays the order in a fresh env (the permissible left shift only moves
operations earlier, so the replayed makespan is at most the solver's; a larger one raises),
and then dispatches the first operation of the order that is not finished yet, which is
always allowed; after random actions of a noisy wrapper it follows the rest of the order.

OR-Tools is an optional dependency (``pip install -e ".[jobshop]"``); it is imported only
when a solve is asked for, and a clear error says so when it is missing.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np

from offline_graph.data.errors import ConfigError
from offline_graph.data.graphs.graph import GraphDict
from offline_graph.env.jobshop_instances import check_instance
from offline_graph.env.jobshop_rules import Policy, allowed_operations


SOLVER_TOTALS: dict[str, float] = {"solves": 0, "seconds": 0.0, "optimal": 0}
"""What :func:`cpsat_expert` policies of this process solved so far: ``solves``, wall
``seconds`` and proven-``optimal`` count (recording with one worker: the solver time of the
logs; reset it by assigning 0s)."""


class Solution(NamedTuple):
    """A CP-SAT schedule."""

    start_times: np.ndarray
    """Int64 ``[J, M]`` start time of every operation."""
    makespan: int
    optimal: bool
    """Whether CP-SAT proved it optimal within the time limit."""
    seconds: float
    """Wall time of the solve."""


def _cp_model(where: str) -> Any:
    try:
        from ortools.sat.python import cp_model
    except ImportError as err:
        raise ConfigError(
            f"{where}: the ortools package must be installed for the CP-SAT expert (found none: "
            f'{err}). pip install -e ".[jobshop]"'
        ) from None
    return cp_model


def cpsat_solve(durations: Any, machines: Any, time_limit: float = 10.0, workers: int = 1) -> Solution:
    """Solve the instance with CP-SAT in at most ``time_limit`` seconds on ``workers`` threads;
    the best schedule found. Raises if none was found in time."""
    where = "cpsat_solve"
    d, m = check_instance(where, durations, machines)
    if not float(time_limit) > 0 or int(workers) < 1:
        raise ConfigError(
            f"{where}: time_limit must be > 0 and workers >= 1 (found {time_limit!r}, {workers!r}). "
            "They bound the solver's wall time and threads."
        )
    cp_model = _cp_model(where)
    J, M = d.shape
    horizon = int(d.sum())
    model = cp_model.CpModel()
    starts = [[model.NewIntVar(0, horizon, f"s{j}_{k}") for k in range(M)] for j in range(J)]
    per_machine: list[list[Any]] = [[] for _ in range(M)]
    ends = []
    for j in range(J):
        for k in range(M):
            dur = int(d[j, k])
            end = starts[j][k] + dur
            per_machine[int(m[j, k])].append(model.NewIntervalVar(starts[j][k], dur, end, f"i{j}_{k}"))
            if k + 1 < M:
                model.Add(starts[j][k + 1] >= end)
        ends.append(starts[j][M - 1] + int(d[j, M - 1]))
    for intervals in per_machine:
        model.AddNoOverlap(intervals)
    makespan = model.NewIntVar(0, horizon, "makespan")
    model.AddMaxEquality(makespan, ends)
    model.Minimize(makespan)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.num_workers = int(workers)
    t0 = time.perf_counter()
    status = solver.Solve(model)
    seconds = time.perf_counter() - t0
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise ConfigError(
            f"{where}: the solver must find a schedule within time_limit={time_limit} s (found status "
            f"{solver.StatusName(status)}). Raise the time limit."
        )
    s = np.array([[solver.Value(v) for v in row] for row in starts], dtype=np.int64)
    return Solution(s, int(solver.Value(makespan)), status == cp_model.OPTIMAL, seconds)


def dispatch_order(start_times: Any) -> np.ndarray:
    """Int64 ``[J * M]`` node indices (``j * M + k``) by start time, ties by index."""
    s = np.asarray(start_times, dtype=np.int64).reshape(-1)
    return np.lexsort((np.arange(s.size), s)).astype(np.int64)


def replay(env: Any, durations: np.ndarray, machines: np.ndarray, order: np.ndarray) -> int:
    """Makespan of dispatching ``order`` in a fresh env of ``env``'s class on the instance."""
    d, m = durations.tolist(), machines.tolist()
    fresh = type(env)(durations=d, machines=m, max_nodes=int(durations.size))
    fresh.reset()
    info: dict[str, Any] = {}
    for a in order.tolist():
        _, _, done, _, info = fresh.step(a)
        if done:
            break
    if "makespan" not in info:
        raise RuntimeError(f"replay: the order must dispatch all {durations.size} operations legally.")
    return int(info["makespan"])


def cpsat_expert(env: Any, time_limit: float = 10.0, workers: int = 1, check: bool = True) -> Policy:
    """The CP-SAT expert on ``env`` (a :class:`~offline_graph.env.jobshop.JobShopEnv`): solves
    each new episode's instance once (``time_limit`` seconds, ``workers`` threads; solutions
    are cached per instance), and dispatches the first unfinished operation of
    :func:`dispatch_order`. ``check``: replay each solution first and raise if the env's
    makespan exceeds the solver's. ``policy.solutions`` maps instance bytes to
    ``(Solution, order)`` (solver time spent: ``sum(s.seconds for s, _ in ...values())``)."""
    _cp_model("cpsat_expert")
    unwrapped = getattr(env, "unwrapped", env)
    cache: dict[bytes, tuple[Solution, np.ndarray]] = {}
    current: dict[str, Any] = {"episode": None, "order": None}

    def policy(obs: GraphDict, info: dict[str, Any] | None = None) -> int:
        if current["episode"] != unwrapped.episode_index:
            d, m = unwrapped.instance
            key = d.tobytes() + m.tobytes()
            if key not in cache:
                sol = cpsat_solve(d, m, time_limit, workers)
                SOLVER_TOTALS["solves"] += 1
                SOLVER_TOTALS["seconds"] += sol.seconds
                SOLVER_TOTALS["optimal"] += int(sol.optimal)
                order = dispatch_order(sol.start_times)
                if check and (got := replay(unwrapped, d, m, order)) > sol.makespan:
                    raise RuntimeError(
                        f"cpsat_expert: the replayed makespan must be <= the solver's {sol.makespan} "
                        f"(found {got}). The env's left shift should never delay an operation."
                    )
                cache[key] = (sol, order)
            current["episode"], current["order"] = unwrapped.episode_index, cache[key][1]
        allowed = allowed_operations(obs, "cpsat_expert")
        finished = np.asarray(obs["x"])[:, 1] > 0.5
        order = current["order"]
        pending = order[~finished[order]]
        if pending.size == 0 or not np.isin(pending[0], allowed):
            raise ConfigError(
                "cpsat_expert: the observation must be of the env's current episode (found "
                f"{'no pending operation' if pending.size == 0 else f'operation {pending[0]} not allowed'}). "
                "Make the expert with the env it acts in."
            )
        return int(pending[0])

    policy.solutions = cache  # type: ignore[attr-defined]
    return policy
