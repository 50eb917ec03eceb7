"""Job-shop instances (L2D's random generator, the 80 Taillard (1993) benchmark instances) and
the env's settings (:class:`JobShopConfig`, node columns :data:`JOBSHOP_FEATURES`).

An instance is a pair of int64 arrays ``(durations [J, M], machines [J, M])``: job ``j``'s
``k``-th operation runs ``durations[j, k]`` time units on machine ``machines[j, k]``
(``0..M-1``, each machine once per job).

* :func:`generate_instance` is the generator of L2D (Zhang et al., NeurIPS 2020, "Learning to
  Dispatch for Job Shop Scheduling via Deep Reinforcement Learning"): durations uniform
  integers in ``[low, high]`` (the paper: 1..99), every job a uniformly random machine order.
  L2D's code draws ``np.random.randint(1, 99)``, i.e. 1..98; we follow the paper (``high=99``,
  inclusive) by default, ``high=98`` gives the code's range.
* :func:`taillard_instance` rebuilds ``ta01`` ... ``ta80`` from Taillard's published generator
  (E. Taillard, "Benchmarks for basic scheduling problems", EJOR 64(2):278-285, 1993): his
  Lehmer generator ``unif`` (``a=16807, b=127773, c=2836, m=2^31-1``), first all durations
  ``unif(time_seed, 1, 99)`` job by job, then per job, from the identity machine order, the
  swaps ``k <-> unif(machine_seed, k, M-1)`` for ``k = 0..M-1``. The (time seed, machine seed)
  pairs are the published ones (:data:`TAILLARD_SEEDS`; as printed in Taillard's instance files
  and OR-Library's ``jobshop2.txt``, here taken from the table in Julien Bernard's ``sched``
  library, ``JobShopInstanceGenerator.cc``). Nothing is downloaded: all 80
  instances were checked at build time against the instance files of ``tamy0612/JSPLIB``
  (``instances/taNN``) and ``ScheduleOpt/benchmarks`` (``jobshop/instances/text/Taillard1993``);
  the tests keep rows of ta01, ta41 and ta71 from those files.
* :data:`TAILLARD_UPPER_BOUNDS`: the best known upper bound (the optimum where proven) of
  every instance, from the "Taillard 1993" table of ``ScheduleOpt/benchmarks``
  ``jobshop/README.md`` (snapshot commit 79f0edc1; 2025-26 values, e.g. ta41 2005, ta44 1978,
  ta46 2002, ta49 1960). L2D's paper used the bounds of 2020 (some of the open 20x15 to
  30x20 ones were up to ~20 units higher): that moves a group's mean gap by under 1 point.
* :data:`TAILLARD_GROUPS`: the size groups ``"15x15"`` (ta01-ta10) ... ``"100x20"``
  (ta71-ta80), 10 instances each; :func:`gap` the relative gap to the upper bound.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from offline_graph.data.errors import ConfigError

# (time seed, machine seed) of ta01 ... ta80, in order; sizes from TAILLARD_GROUPS.
TAILLARD_SEEDS: tuple[tuple[int, int], ...] = (
    # 15x15: ta01-ta10
    (840612802, 398197754), (1314640371, 386720536), (1227221349, 316176388),
    (342269428, 1806358582), (1603221416, 1501949241), (1357584978, 1734077082),
    (44531661, 1374316395), (302545136, 2092186050), (1153780144, 1393392374),
    (73896786, 1544979948),
    # 20x15: ta11-ta20
    (533484900, 317419073), (1894307698, 1474268163), (874340513, 509669280),
    (1124986343, 1209573668), (1463788335, 529048107), (1056908795, 25321885),
    (195672285, 1717580117), (961965583, 1353003786), (1610169733, 1734469503),
    (532794656, 998486810),
    # 20x20: ta21-ta30
    (1035939303, 773961798), (5997802, 1872541150), (1357503601, 722225039),
    (806159563, 1166962073), (1902815253, 1879990068), (1503184031, 1850351876),
    (1032645967, 99711329), (229894219, 1158117804), (823349822, 108033225),
    (1297900341, 489486403),
    # 30x15: ta31-ta40
    (98640593, 1981283465), (1839268120, 248890888), (573875290, 2081512253),
    (1670898570, 788294565), (1118914567, 1074349202), (178750207, 294279708),
    (1549372605, 596993084), (798174738, 151685779), (553410952, 1329272528),
    (1661531649, 1173386294),
    # 30x20: ta41-ta50
    (1841414609, 1357882888), (2116959593, 1546338557), (796392706, 1230864158),
    (532496463, 254174057), (2020525633, 978943053), (524444252, 185526083),
    (1569394691, 487269855), (1460267840, 1631446539), (198324822, 1937476577),
    (38071822, 1541985579),
    # 50x15: ta51-ta60
    (17271, 718939), (660481279, 449650254), (352229765, 949737911),
    (1197518780, 166840558), (1376020303, 483922052), (2106639239, 955932362),
    (1765352082, 1209982549), (1105092880, 1349003108), (907248070, 919544535),
    (2011630757, 1845447001),
    # 50x20: ta61-ta70
    (8493988, 2738939), (1991925010, 709517751), (342093237, 786960785),
    (1634043183, 973178279), (341706507, 286513148), (320167954, 1411193018),
    (1089696753, 298068750), (433032965, 1589656152), (615974477, 331205412),
    (236150141, 592292984),
    # 100x20: ta71-ta80
    (302034063, 1203569070), (1437643198, 1692025209), (1792475497, 1039908559),
    (1647273132, 1012841433), (696480901, 1689682358), (1785569423, 1092647459),
    (117806902, 739059626), (1639154709, 1319962509), (2007423389, 749368241),
    (682761130, 262763021),
)  # fmt: skip

# Best known upper bound (optimum where proven) of ta01 ... ta80, in order.
_UB = (
    1231, 1244, 1218, 1175, 1224, 1238, 1227, 1217, 1274, 1241,  # 15x15
    1357, 1367, 1342, 1345, 1339, 1360, 1462, 1396, 1332, 1348,  # 20x15
    1642, 1600, 1557, 1644, 1595, 1643, 1680, 1603, 1625, 1584,  # 20x20
    1764, 1783, 1791, 1828, 2007, 1819, 1771, 1673, 1795, 1669,  # 30x15
    2005, 1937, 1846, 1978, 1997, 2002, 1889, 1937, 1960, 1923,  # 30x20
    2760, 2756, 2717, 2839, 2679, 2781, 2943, 2885, 2655, 2723,  # 50x15
    2868, 2869, 2755, 2702, 2725, 2845, 2825, 2784, 3071, 2995,  # 50x20
    5464, 5181, 5568, 5339, 5392, 5342, 5436, 5394, 5358, 5183,  # 100x20
)  # fmt: skip
TAILLARD_UPPER_BOUNDS: dict[str, int] = {f"ta{i + 1:02d}": ub for i, ub in enumerate(_UB)}
"""Best known makespan upper bound per Taillard instance (``"ta01"`` -> 1231)."""

_SIZES = ((15, 15), (20, 15), (20, 20), (30, 15), (30, 20), (50, 15), (50, 20), (100, 20))
TAILLARD_GROUPS: dict[str, tuple[str, ...]] = {
    f"{j}x{m}": tuple(f"ta{10 * g + i + 1:02d}" for i in range(10)) for g, (j, m) in enumerate(_SIZES)
}
"""Instance names per size group, ``"15x15"`` -> ``("ta01", ..., "ta10")``, in size order."""
TAILLARD_NAMES: tuple[str, ...] = tuple(TAILLARD_UPPER_BOUNDS)
"""``"ta01"`` ... ``"ta80"``."""

_A, _B, _C, _M = 16807, 127773, 2836, 2**31 - 1


def _unif(seed: int, low: int, high: int) -> tuple[int, int]:
    """Taillard's ``unif``: (new seed, an integer uniform in ``[low, high]``)."""
    k = seed // _B
    seed = _A * (seed % _B) - k * _C
    if seed < 0:
        seed += _M
    return seed, low + int(seed / _M * (high - low + 1))


def taillard_generate(
    n_jobs: int, n_machines: int, time_seed: int, machine_seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Taillard's 1993 job-shop generator: ``(durations, machines)``, int64 ``[J, M]``."""
    durations = np.zeros((n_jobs, n_machines), dtype=np.int64)
    seed = int(time_seed)
    for j in range(n_jobs):
        for k in range(n_machines):
            seed, durations[j, k] = _unif(seed, 1, 99)
    machines = np.tile(np.arange(n_machines, dtype=np.int64), (n_jobs, 1))
    seed = int(machine_seed)
    for j in range(n_jobs):
        row = machines[j]
        for k in range(n_machines):
            seed, other = _unif(seed, k, n_machines - 1)
            row[k], row[other] = row[other], row[k]
    return durations, machines


def taillard_instance(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Taillard instance ``name`` (``"ta01"`` ... ``"ta80"``) as ``(durations, machines)``."""
    if name not in TAILLARD_UPPER_BOUNDS:
        raise ConfigError(
            f"taillard_instance: name must be one of 'ta01' ... 'ta80' (found {name!r}). "
            "Taillard's 80 job-shop instances, two-digit numbers."
        )
    index = TAILLARD_NAMES.index(name)
    n_jobs, n_machines = _SIZES[index // 10]
    return taillard_generate(n_jobs, n_machines, *TAILLARD_SEEDS[index])


def generate_instance(
    n_jobs: int, n_machines: int, rng: np.random.Generator, low: int = 1, high: int = 99
) -> tuple[np.ndarray, np.ndarray]:
    """L2D's random instance: durations uniform integers in ``[low, high]`` (both included),
    each job's machine order a uniformly random permutation. ``(durations, machines)``."""
    durations = rng.integers(low, high + 1, size=(n_jobs, n_machines), dtype=np.int64)
    machines = np.argsort(rng.random((n_jobs, n_machines)), axis=1).astype(np.int64)
    return durations, machines


def makespan_lower_bound(durations: np.ndarray, machines: np.ndarray) -> int:
    """The longest job or the busiest machine, whichever is larger: no schedule of the instance
    ``(durations, machines)`` ends sooner (the score of held-out generated instances, which
    have no known upper bound)."""
    durations, machines = np.asarray(durations), np.asarray(machines)
    loads = np.bincount(machines.ravel(), weights=durations.ravel())
    return int(max(durations.sum(axis=1).max(), loads.max()))


def check_instance(where: str, durations: Any, machines: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(durations, machines)`` as int64 ``[J, M]`` arrays, checked: same shape, ``J, M >= 1``,
    integer durations ``>= 1``, every row of ``machines`` a permutation of ``0..M-1``."""
    d = np.asarray(durations)
    m = np.asarray(machines)
    hint = "An instance is (durations [J, M], machines [J, M]); row j is job j's operations in order."
    if d.ndim != 2 or d.shape[0] < 1 or d.shape[1] < 1 or m.shape != d.shape:
        raise ConfigError(
            f"{where}: durations and machines must be [J, M] arrays of the same shape with J, M >= 1 "
            f"(found {list(d.shape)} and {list(m.shape)}). {hint}"
        )
    for label, a in (("durations", d), ("machines", m)):
        if a.dtype == bool or not (np.issubdtype(a.dtype, np.integer) or np.all(np.mod(a, 1) == 0)):
            raise ConfigError(f"{where}: {label} must be integers (found dtype {a.dtype}). {hint}")
    d, m = d.astype(np.int64), m.astype(np.int64)
    if np.any(d < 1):
        raise ConfigError(f"{where}: durations must be >= 1 (found min {int(d.min())}). {hint}")
    bad = np.flatnonzero(np.any(np.sort(m, axis=1) != np.arange(d.shape[1]), axis=1))
    if bad.size:
        raise ConfigError(
            f"{where}: every row of machines must be a permutation of 0..{d.shape[1] - 1} (found row "
            f"{int(bad[0])}: {m[bad[0]].tolist()}). Each job visits each machine once."
        )
    return d, m


def gap(makespan: float, name: str) -> float:
    """``(makespan - upper bound) / upper bound`` for Taillard instance ``name``."""
    if name not in TAILLARD_UPPER_BOUNDS:
        raise ConfigError(
            f"gap: name must be one of 'ta01' ... 'ta80' (found {name!r}). "
            "Upper bounds are known for Taillard's instances only."
        )
    ub = TAILLARD_UPPER_BOUNDS[name]
    return (float(makespan) - ub) / ub


# ----------------------------------------------------------------- the env's settings
JOBSHOP_FEATURES = (
    "lower_bound",
    "finished",
    "candidate",
    "duration",
    "work_before",
    "work_remaining",
    "ops_remaining",
)
"""Node columns of :class:`JobShopEnv`: completion-time lower bound / ``time_scale`` (L2D);
finished (L2D); candidate (the action mask); duration / ``time_scale``; the job's work before
this operation and from it on (itself included) / ``time_scale``; the job's operations from this
one on / ``M``. The last four never change in an episode."""

JOBSHOP_EXTRA_FEATURES = ("start", "start_slack")
"""Node columns appended with ``JobShopConfig(extra_features=True)``: the start time / ``time_scale``
(a scheduled operation's; a candidate's by the permissible left shift if dispatched now; any other
operation's job-order bound, lower bound minus duration), and for candidates that start minus the
earliest such start of any candidate / ``time_scale`` (0 for the others): which dispatch the
machines allow first, a quantity that does not grow with the instance size."""


@dataclasses.dataclass(frozen=True)
class JobShopConfig:
    """Settings of :class:`JobShopEnv`. The instance source is ``instance`` (a Taillard name),
    else ``durations`` and ``machines`` (a fixed instance), else the generator."""

    n_jobs: int = 10
    """J of generated instances."""
    n_machines: int = 10
    """M of generated instances."""
    low: int = 1
    """Smallest generated duration."""
    high: int = 99
    """Largest generated duration (included; L2D's code draws 1..98, ``high=98``)."""
    instance: str | None = None
    """A Taillard instance, ``"ta01"`` ... ``"ta80"``, for every episode."""
    durations: Any = None
    """A fixed instance's durations, ``[J, M]`` integers >= 1 (with ``machines``)."""
    machines: Any = None
    """A fixed instance's machines, ``[J, M]``, each row a permutation of ``0..M-1``."""
    max_nodes: int = 2000
    """The action space is ``NodeAction(max_nodes)``; instances may have up to this many
    operations (2000: the largest Taillard instances, 100x20)."""
    time_scale: float = 1000.0
    """Times are divided by it in the node features (L2D: 1000)."""
    reward_scale: float = 1.0
    """Rewards are multiplied by it."""
    illegal_penalty: float = 1.0
    """An illegal action's reward is ``reward_scale * (bound - total work) - illegal_penalty``."""
    raise_on_illegal: bool = False
    """Raise a ConfigError on an illegal action instead of ending the episode."""
    expert_time_limit: float = 10.0
    """Seconds CP-SAT may spend per instance for the ``"expert"`` / ``"mixed"`` policies."""
    extra_features: bool = False
    """Append the node columns :data:`JOBSHOP_EXTRA_FEATURES` (9 columns instead of 7)."""

    def __post_init__(self) -> None:
        def bad(field: str, expected: str, hint: str) -> ConfigError:
            return ConfigError(
                f"JobShopConfig: {field} must be {expected} (found {getattr(self, field)!r}). {hint}"
            )

        for field in ("n_jobs", "n_machines", "low", "max_nodes"):
            if int(getattr(self, field)) < 1:
                raise bad(field, ">= 1", "Counts and durations are positive integers.")
        if int(self.high) < int(self.low):
            raise bad("high", f">= low={self.low}", "Durations are drawn from [low, high].")
        for field in ("time_scale", "reward_scale", "illegal_penalty", "expert_time_limit"):
            if not float(getattr(self, field)) > 0:
                raise bad(field, "> 0", "It is a positive scale, penalty or time limit.")
        if self.instance is not None and self.instance not in TAILLARD_UPPER_BOUNDS:
            raise bad("instance", "None or 'ta01' ... 'ta80'", "Taillard's instances, two-digit numbers.")
        if (self.durations is None) != (self.machines is None):
            raise bad("durations", "given together with machines", "A fixed instance needs both arrays.")
        if self.instance is not None and self.durations is not None:
            raise bad("instance", "None when durations are given", "Give one instance source.")
        if self.durations is not None:
            d, _ = check_instance("JobShopConfig", self.durations, self.machines)
            shape = d.shape
        elif self.instance is not None:
            shape = taillard_instance(self.instance)[0].shape
        else:
            shape = (int(self.n_jobs), int(self.n_machines))
        if shape[0] * shape[1] > int(self.max_nodes):
            raise bad("max_nodes", f">= J * M = {shape[0] * shape[1]}", "Every operation is a node.")
