"""Padded recordings the way an RLlib user had them (shared by tests/test_migrate.py).

Random graphs of varying N and E, padded by RLlib's own ``get_preprocessor(space)(space)
.transform`` into row-per-transition rows with RLlib's old column names, written as Parquet,
as JSON lines (one transition per line) or as RLlib's ``JsonWriter`` SampleBatch lines; and
the hand-computed expectations (exact arrays, payload bytes, the error each damage causes).
"""

from __future__ import annotations

import json
import os

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from gymnasium.spaces import Box
from ray.rllib.models.preprocessors import get_preprocessor
from ray.rllib.utils.spaces.repeated import Repeated

from offline_graph.data.episodes.codec import decode_state
from offline_graph.jobs.migrate import MigrateConfig, migrate

F, D, N_MAX, E_MAX, K = 3, 2, 6, 9, 4
OBS_SPACE = gym.spaces.Dict(
    {
        "x": Repeated(Box(-np.inf, np.inf, (F,), np.float32), max_len=N_MAX),
        "edge_index": Repeated(Box(0, N_MAX - 1, (2,), np.int64), max_len=E_MAX),
        "edge_attr": Repeated(Box(-np.inf, np.inf, (D,), np.float32), max_len=E_MAX),
    }
)
NO_ATTR_SPACE = gym.spaces.Dict({k: v for k, v in OBS_SPACE.spaces.items() if k != "edge_attr"})
SIZE = (1 + E_MAX * D) + (1 + E_MAX * 2) + (1 + N_MAX * F)  # 19 + 19 + 19 = 57 floats
# Flat offsets (Dict keys sorted: edge_attr, edge_index, x); each starts with its length slot.
OFF_ATTR, OFF_EI, OFF_X = 0, 1 + E_MAX * D, 2 + E_MAX * D + E_MAX * 2


def random_graph(rng, edge_attr=True):
    n, e = int(rng.integers(1, N_MAX + 1)), int(rng.integers(0, E_MAX + 1))
    g = {"x": rng.standard_normal((n, F)).astype(np.float32), "edge_index": rng.integers(0, n, (2, e))}
    if edge_attr:
        g["edge_attr"] = rng.standard_normal((e, D)).astype(np.float32)
    return g


def pad(prep, g):
    """What the user's env handed RLlib: Repeated lists (edge_index as E (source, target) pairs)."""
    return prep.transform({k: (v.T if k == "edge_index" else v) for k, v in g.items()})


def make_recording(seed=0, episodes=6, space=OBS_SPACE, shuffle=True):
    """(episodes [(eps_id, graphs, actions, rewards, terminated, truncated)], rows): with
    ``shuffle`` the rows of all episodes interleave; even episodes terminate, odd ones truncate."""
    rng = np.random.default_rng(seed)
    prep = get_preprocessor(space)(space)
    eps, rows = [], []
    for k in range(episodes):
        steps = int(rng.integers(1, 6))
        graphs = [random_graph(rng, "edge_attr" in space.spaces) for _ in range(steps + 1)]
        acts = [int(a) for a in rng.integers(0, K, steps)]
        rews = [float(np.float32(r)) for r in rng.standard_normal(steps)]
        eps_id = int(rng.integers(0, 2**62))
        term, trunc = k % 2 == 0, k % 2 == 1
        eps.append((str(eps_id), graphs, acts, rews, term, trunc))
        for t in range(steps):
            last = t == steps - 1
            rows.append(
                {
                    "eps_id": eps_id,
                    "t": t,
                    "obs": pad(prep, graphs[t]),
                    "new_obs": pad(prep, graphs[t + 1]),
                    "actions": acts[t],
                    "rewards": rews[t],
                    "terminateds": term and last,
                    "truncateds": trunc and last,
                }
            )
    if shuffle:
        rows = [rows[i] for i in rng.permutation(len(rows))]
    return eps, rows


def sorted_recording(seed, episodes=4):
    """An unshuffled recording whose first episode has at least 2 rows."""
    eps, rows = make_recording(seed=seed, episodes=episodes, shuffle=False)
    while len([r for r in rows if r["eps_id"] == rows[0]["eps_id"]]) < 2:
        seed += 100
        eps, rows = make_recording(seed=seed, episodes=episodes, shuffle=False)
    return eps, rows


def write_parquet(rows, path, drop=()):
    cols = {c: [r[c] for r in rows] for c in rows[0] if c not in drop}
    vector = pa.list_(pa.float32()) if isinstance(rows[0]["obs"], np.ndarray) else pa.string()
    types = {"obs": vector, "new_obs": vector, "eps_id": pa.int64()}
    pq.write_table(pa.table({c: pa.array(v, types.get(c)) for c, v in cols.items()}), str(path))
    return str(path)


def write_json_rows(rows, path):
    with open(path, "w") as fh:
        for r in rows:
            fh.write(json.dumps({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in r.items()}))
            fh.write("\n")
    return str(path)


def write_json_batches(rows, path, per_line=4, compress=()):
    """RLlib's own JsonWriter encoding: one SampleBatch per line (``_to_json``)."""
    from ray.rllib.offline.json_writer import _to_json
    from ray.rllib.policy.sample_batch import SampleBatch

    with open(path, "w") as fh:
        for i in range(0, len(rows), per_line):
            part = rows[i : i + per_line]
            batch = SampleBatch({c: np.array([r[c] for r in part]) for c in part[0]})
            fh.write(_to_json(batch, list(compress)) + "\n")
    return str(path)


def run(inp, out, on_error="raise", space=OBS_SPACE, **kw):
    return migrate(
        MigrateConfig(input=str(inp), output=str(out), observation_space=space, on_error=on_error, **kw)
    )


def read_output(out):
    files = sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".parquet"))
    items = [item for f in files for item in pq.read_table(f).column("item").to_pylist()]
    return {raw.id: raw for raw in map(decode_state, items)}


def assert_lossless(eps, out):
    """Every episode back with exactly its arrays (and dtypes), actions, rewards and flags."""
    got = read_output(out)
    assert sorted(got) == sorted(e[0] for e in eps)
    for eps_id, graphs, acts, rews, term, trunc in eps:
        raw = got[eps_id]
        assert len(raw.observations) == len(graphs) == len(acts) + 1
        for want, obs in zip(graphs, raw.observations):
            assert sorted(obs) == sorted(want)
            assert obs["x"].dtype == np.float32 and obs["edge_index"].dtype == np.int64
            assert obs["edge_index"].shape == (2, want["edge_index"].shape[1])
            for key in want:
                np.testing.assert_array_equal(obs[key], want[key], err_msg=key)
                assert obs[key].dtype == want[key].dtype
        assert [int(a) for a in raw.actions] == acts and [float(r) for r in raw.rewards] == rews
        assert (raw.terminated, raw.truncated) == (term, trunc)


def payload(eps, size=SIZE, d=D):
    """(padded, unpadded) observation payload bytes by hand: every observation once, padded as
    float32 ``size`` vectors / unpadded as x float32, edge_index int64, edge_attr float32."""
    obs = [g for e in eps for g in e[1]]
    unpadded = sum(g["x"].shape[0] * F * 4 + g["edge_index"].shape[1] * (2 * 8 + d * 4) for g in obs)
    return len(obs) * size * 4, unpadded


BAD = [
    "vector_length",
    "length_field",
    "length_not_integer",
    "edge_index_range",
    "edge_index_value",
    "padding",
    "t_gap",
    "unfinished",
    "t_duplicate",
    "done_before_end",
    "new_obs_mismatch",
]


def corrupt(rows, kind):
    """Damage the first episode of ``rows`` (sorted by eps_id, t); returns the (row index,
    column, reason, message text after the location) its error must have."""
    mine = [i for i, r in enumerate(rows) if r["eps_id"] == rows[0]["eps_id"]]
    i = mine[-1] if kind == "unfinished" else mine[0]
    obs = rows[i]["obs"] = rows[i]["obs"].copy()
    size_text = f"the --observation-space layout's (found {SIZE - 1} values)"
    if kind == "vector_length":
        rows[i]["obs"] = obs[:-1]
        return i, "obs", kind, f"vector length must be {SIZE}, {size_text}"
    if kind in ("length_field", "length_not_integer"):
        key, off, max_len, value = (
            ("x", OFF_X, N_MAX, N_MAX + 1.0) if kind == "length_field" else ("edge_index", OFF_EI, E_MAX, 1.5)
        )
        obs[off] = value
        where = f"(flat index {off}) must be an integer in 0..{max_len} (found {value})"
        return i, "obs", "length_field", f"Repeated '{key}' length {where}"
    if kind in ("edge_index_range", "edge_index_value"):
        n = int(obs[OFF_X])
        obs[OFF_EI] = obs[OFF_ATTR] = max(obs[OFF_EI], 1)
        obs[OFF_EI + 1] = bad = float(n) if kind == "edge_index_range" else 0.5
        expected = f"node indices in 0..{n - 1}" if kind == "edge_index_range" else "integers"
        found = f"[{bad}, {float(obs[OFF_EI + 2])}] with {n} nodes"
        return i, "obs", kind, f"Repeated 'edge_index' element 0 must be {expected} (found {found})"
    if kind == "padding":  # a nonzero value in the last x element, past the length
        if obs[OFF_X] == N_MAX:
            obs[OFF_X] = N_MAX - 1
        else:
            obs[OFF_X + N_MAX * F] = 3.0
        text = f"must be zero padding (found a nonzero value in element {N_MAX - 1})"
        return i, "obs", kind, f"Repeated 'x' elements past its length {int(obs[OFF_X])} {text}"
    if kind == "t_gap":
        for j in mine[1:]:
            rows[j]["t"] += 1
        return mine[1], "t", kind, "steps must be contiguous (found t=0 then t=2: t=1 missing)"
    if kind == "unfinished":
        rows[i]["terminateds"] = rows[i]["truncateds"] = False
        text = f"(found neither; the input ends after t={rows[i]['t']})"
        return i, "terminateds", kind, f"the episode's last row must be terminated or truncated {text}"
    if kind == "t_duplicate":
        rows[mine[1]]["t"] = 0
        return mine[1], "t", kind, "t must be unique within an episode (found t=0 also in file "
    if kind == "done_before_end":  # the first episode terminates: its first row says so too
        rows[i]["terminateds"] = True
        text = f"(found step t={rows[mine[-1]]['t']} after it)"
        return i, "terminateds", kind, f"a terminated/truncated row must be the episode's last {text}"
    if kind == "new_obs_mismatch":
        rows[i]["new_obs"] = rows[i]["new_obs"].copy()
        rows[i]["new_obs"][OFF_X + 1] += 1.0
        return i, "new_obs", kind, "new_obs must equal the next row's obs (found it differs from t=1's obs"
    raise AssertionError(kind)
