"""Bench case ``league``: peak RSS of a prelearner actor and of a learner, 2 vs 32 modules.

A league of frozen policies: modules ``color`` and ``pick`` are trained
(``policies_to_train``); the others (``color_old_2``, ``pick_old_3``, ...) alternate the two
kinds' spaces, are mapped to no agent and get no data. Every module is a
:class:`~offline_graph.GNNModule` with ``{"hidden": 256, "layers": 3}``. Data: TeamEnv
(``offline_graph/Team-v0``) expert episodes, recorded with
:func:`offline_graph.jobs.ma_recording.record_ma_file`.

Each measurement runs in its own subprocess (:func:`league_worker`, two at a time on 2 CPUs);
the value is that process's peak RSS (``VmHWM``) from just before the measured part (imports
and data preparation are done and the peak reset first), so it includes the interpreter,
torch and Ray imports (the same in every row); the note gives the growth over that baseline.

Rows (``ours`` vs ``stock``, each for 2 and for 32 modules):

* **prelearner, ours**: ``GraphOfflinePreLearner(config=configured, spaces=(Dict, Dict),
  module_spec=..., module_state=NO_MODULE_STATE)`` (what ``GraphOfflineData`` passes: no
  weights) called on ``calls`` batches of episode rows (``item``, ``path``) read with pyarrow,
  as Ray Data's ``map_batches`` would. Builds no RLModule.
* **prelearner, stock**: what each of RLlib's ``OfflinePreLearner`` map actors holds:
  ``OfflinePreLearner.__init__`` (``rl_module_spec.build()`` of the full MultiRLModule) and
  ``set_state`` of the whole module state, which ``OfflineData.sample`` ships to every actor
  (pickled once by the calling process; the actor reads and unpickles it, as with Ray).
  Construction only: the stock ``__call__`` decodes ``SingleAgentEpisode`` s and cannot read
  multi-agent episodes, so it is not called.
* **learner, ours / stock**: ``config.learner_class(config=config, module_spec=...)`` then
  ``build()`` (every module plus an optimizer per trained module), then one ``update`` on a
  real batch (our prelearner's joint rows, :class:`GraphCollateFn`, ``MultiAgentBatch``; the
  batch is made before the peak is reset). Ours is ``offline_graph.configure(config)``; stock
  is the unconfigured BCConfig (same learner class: configure does not change the learner).

Not measured: Ray's own per-actor overhead, the object store copy of the shipped state, the
driver, EnvRunners, GPU memory, and stock decoding of multi-agent data (it has none).
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import subprocess
from typing import Any

from offline_graph.bench.case_memory import _proc_status_mb
from offline_graph.bench.harness import BenchContext, Row, spawn_worker, worker_result

MODEL_CONFIG = {"hidden": 256, "layers": 3}
TRAINED = ("color", "pick")
ROLES = ("prelearner", "learner")
WHO = ("ours", "stock")


def module_names(n_modules: int) -> list[str]:
    """``color``, ``pick``, then frozen ``color_old_2``, ``pick_old_3``, ... (n in all)."""
    return [TRAINED[i] if i < 2 else f"{TRAINED[i % 2]}_old_{i}" for i in range(n_modules)]


def record_league_data(out_dir: str, episodes: int, seed: int = 0) -> dict[str, Any]:
    """TeamEnv expert episodes in one file under ``out_dir`` (reused when present)."""
    from offline_graph.jobs.recording import RecordJob
    from offline_graph.jobs.ma_recording import record_ma_file

    path = os.path.join(out_dir, "episodes-000.parquet")
    if os.path.exists(path):
        return {"file": path}
    os.makedirs(out_dir, exist_ok=True)
    job = RecordJob("offline_graph/Team-v0", {}, "expert", 0.0, seed, 0, episodes, path)
    return record_ma_file(job)


def league_config(n_modules: int, data_dir: str, batch_size: int, ours: bool) -> Any:
    """BC config of a league of ``n_modules`` GNN modules (2 trained); ours = configured."""
    from ray.rllib.algorithms.bc import BCConfig

    import offline_graph
    from offline_graph.rllib.algorithms.team_config import team_offline_config

    kinds = {name: TRAINED[i % 2] for i, name in enumerate(module_names(n_modules))}
    config = team_offline_config(BCConfig(), data_dir, kinds, MODEL_CONFIG, TRAINED).training(
        train_batch_size_per_learner=batch_size, lr=1e-3
    )
    return offline_graph.configure(config) if ours else config


def _row_batches(data_dir: str, per_call: int) -> list[dict[str, Any]]:
    """Episode rows as Ray Data hands them to ``map_batches``: ``item`` and ``path``."""
    import numpy as np
    import pyarrow.parquet as pq

    out = []
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name)
        for rb in pq.ParquetFile(path).iter_batches(batch_size=per_call, columns=["item"]):
            items = rb.column(0).to_pylist()
            out.append(
                {"item": np.array(items, dtype=object), "path": np.array([path] * len(items), dtype=object)}
            )
    return out


def _ours_prelearner(config: Any) -> Any:
    from offline_graph.rllib.offline.offline_data import NO_MODULE_STATE
    from offline_graph.rllib.offline.prelearner import GraphOfflinePreLearner

    return GraphOfflinePreLearner(
        config=config,
        spaces=(config.observation_space, config.action_space),
        module_spec=config.get_multi_rl_module_spec(),
        module_state=NO_MODULE_STATE,
    )


def league_worker(args_json: str) -> None:
    """Subprocess body of :func:`case_league`: print the measurement as JSON on the last line."""
    import torch
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    torch.set_num_threads(1)
    a = json.loads(args_json)
    role, who, n = a["role"], a["who"], int(a["n_modules"])
    config = league_config(n, a["data_dir"], a["batch_size"], ours=who == "ours")
    spec = config.get_multi_rl_module_spec()
    batches = _row_batches(a["data_dir"], a["per_call"])[: a["calls"]]
    train_batch = None
    if role == "learner":
        from ray.rllib.utils import unflatten_dict

        from offline_graph.rllib.offline.collate_fn import GraphCollateFn

        maker = _ours_prelearner(league_config(n, a["data_dir"], a["batch_size"], ours=True))
        table = None
        for b in batches:
            table = maker(b)
            if table.num_rows >= a["batch_size"]:
                break
        assert table is not None and table.num_rows >= a["batch_size"]  # noqa: S101
        flat = GraphCollateFn()(table.slice(0, a["batch_size"]))
        nested = unflatten_dict(flat)
        train_batch = MultiAgentBatch(
            {mid: SampleBatch(d) for mid, d in nested.items()}, env_steps=a["batch_size"]
        )
        del maker, table
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset VmHWM to the current RSS
    baseline = _proc_status_mb("VmRSS")
    out: dict[str, Any] = {"calls": 0, "rows": 0}
    if role == "prelearner" and who == "ours":
        pre = _ours_prelearner(config)
        for b in batches:
            out["rows"] += pre(b).num_rows
            out["calls"] += 1
        out["modules_built"] = 0 if pre._module is None else len(pre._module)
    elif role == "prelearner":
        from ray.rllib.offline.offline_prelearner import OfflinePreLearner

        with open(_state_path(a["data_dir"], n), "rb") as fh:
            state_bytes = fh.read()  # the serialized constructor kwarg the actor receives
        state = pickle.loads(state_bytes)
        del state_bytes
        pre = OfflinePreLearner(
            config=config,
            spaces=(config.observation_space, config.action_space),
            module_spec=spec,
            module_state=state,
        )
        out["modules_built"] = len(pre._module)
    else:
        learner = config.learner_class(config=config, module_spec=spec)
        learner.build()
        out["modules_built"] = len(learner.module)
        assert train_batch is not None  # noqa: S101
        try:
            res = learner.update(batch=train_batch)
            out["updated"] = sorted(str(k) for k in (res or {}) if str(k) in TRAINED)
        except Exception as e:  # noqa: BLE001  (reported in the row's note)
            out["update_error"] = f"{type(e).__name__}: {e}"[:200]
    out["baseline_mb"] = baseline
    out["peak_mb"] = _proc_status_mb("VmHWM")
    print(json.dumps(out))


def write_module_state(data_dir: str, n: int, batch_size: int) -> dict[str, Any]:
    """The learner's module state that OfflineData.sample ships (stock spec, ``n`` modules),
    written once per size by the calling process, never by a measured one (building it there
    would leave allocator residue); returns its parameter counts and weight bytes."""
    module = league_config(n, data_dir, batch_size, ours=False).get_multi_rl_module_spec().build()
    with open(_state_path(data_dir, n), "wb") as fh:
        pickle.dump(module.get_state(), fh, protocol=5)
    params = {m: sum(p.numel() for p in module[m].parameters()) for m in module.keys()}
    nbytes = sum(p.numel() * p.element_size() for m in module.keys() for p in module[m].parameters())
    return {"params": params, "weight_bytes": nbytes}


def _state_path(data_dir: str, n_modules: int) -> str:
    return os.path.join(os.path.dirname(data_dir.rstrip("/")), f"league-state-{n_modules}.pkl")


def _spawn(args: dict[str, Any]) -> subprocess.Popen:
    return spawn_worker("offline_graph.bench.case_league", "league_worker", args)


def _result(key: Any, proc: subprocess.Popen) -> dict[str, Any]:
    return worker_result("league", key, proc)


def run_league(
    data_dir: str,
    sizes: tuple[int, int],
    batch_size: int,
    calls: int,
    per_call: int,
    parallel: int = 2,
    roles: tuple[str, ...] = ROLES,
) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Every (role, who, n_modules) measurement, each in its own subprocess."""
    keys = [(r, w, n) for r in roles for w in WHO for n in sizes]
    common = {"data_dir": data_dir, "batch_size": batch_size, "calls": calls, "per_call": per_call}
    info = {n: write_module_state(data_dir, n, batch_size) for n in sizes}
    res: dict[tuple[str, str, int], dict[str, Any]] = {}
    for i in range(0, len(keys), parallel):
        procs = {
            (role, who, n): _spawn({**common, "role": role, "who": who, "n_modules": n})
            for role, who, n in keys[i : i + parallel]
        }
        for key, proc in procs.items():
            res[key] = {**info[key[2]], **_result(key, proc)}
    return res


def league_table(
    res: dict[tuple[str, str, int], dict[str, Any]], sizes: tuple[int, int]
) -> list[dict[str, Any]]:
    """One entry per role x who: peak RSS at both sizes and their ratio (large / small)."""
    lo, hi = sizes
    rows = []
    for role in [r for r in ROLES if (r, "ours", lo) in res]:
        for who in WHO:
            a, b = res[(role, who, lo)], res[(role, who, hi)]
            rows.append(
                {
                    "role": role,
                    "who": who,
                    "rss_lo": a["peak_mb"],
                    "rss_hi": b["peak_mb"],
                    "ratio": b["peak_mb"] / a["peak_mb"],
                    "growth_lo": a["peak_mb"] - a["baseline_mb"],
                    "growth_hi": b["peak_mb"] - b["baseline_mb"],
                    "modules_lo": a["modules_built"],
                    "modules_hi": b["modules_built"],
                    "weight_bytes_hi": b["weight_bytes"],
                    "note": _note(role, who, b),
                }
            )
    return rows


def _note(role: str, who: str, r: dict[str, Any]) -> str:
    if role == "prelearner":
        if who == "ours":
            return f"{r['calls']} calls, {r['rows']} joint rows out; no RLModule"
        return "construction + set_state of the shipped state only (cannot decode MA episodes)"
    if "update_error" in r:
        return f"build only; update failed: {r['update_error']}"
    return f"build + 1 update (updated {','.join(r.get('updated', [])) or '-'})"


def format_league(table: list[dict[str, Any]], sizes: tuple[int, int], params: dict[str, int]) -> str:
    lo, hi = sizes
    head = f"{'row':<18} | {f'RSS {lo} mod MB':>13} | {f'RSS {hi} mod MB':>13} | {f'{hi}/{lo}':>6} | "
    head += f"{'growth MB':>15} | {'modules':>7} | note"
    lines = [head, "-" * len(head)]
    for t in table:
        lines.append(
            f"{t['role'] + ' ' + t['who']:<18} | {t['rss_lo']:>13.0f} | {t['rss_hi']:>13.0f} | "
            f"{t['ratio']:>5.3f}x | {t['growth_lo']:>6.0f} -> {t['growth_hi']:>5.0f} | "
            f"{t['modules_lo']:>3}/{t['modules_hi']:<3} | {t['note']}"
        )
    per = ", ".join(f"{m} {p:,}" for m, p in params.items() if m in TRAINED)
    wb = table[0]["weight_bytes_hi"]
    lines.append(f"params per module: {per}; {hi} modules' weights: {wb:,} bytes ({wb / 2**20:.1f} MiB)")
    return "\n".join(lines)


def case_league(ctx: BenchContext) -> list[Row]:
    """Peak RSS of a prelearner actor and a learner, 2 vs 32 league modules, ours vs stock."""
    sizes = (2, 4) if ctx.quick and os.environ.get("OFFLINE_GRAPH_LEAGUE_FULL") is None else (2, 32)
    data_dir = os.path.join(ctx.data.root, "league")
    record_league_data(data_dir, 40 if ctx.quick else 100)
    res = run_league(data_dir, sizes, ctx.batch_size, calls=4 if ctx.quick else 12, per_call=8)
    table = league_table(res, sizes)
    ctx.log(format_league(table, sizes, res[("learner", "ours", sizes[1])]["params"]))
    by = {(t["role"], t["who"]): t for t in table}
    rows = []
    lo, hi = sizes
    for role in ROLES:
        o, s = by[(role, "ours")], by[(role, "stock")]
        for n, key in ((lo, "rss_lo"), (hi, "rss_hi")):
            rows.append(
                Row(
                    "league",
                    f"{role} peak RSS, {n} modules",
                    "MB",
                    [o[key]],
                    [s[key]],
                    f"stock {role}",
                    True,
                    f"ours: {o['note']}; stock: {s['note']}",
                )
            )
        rows.append(
            Row(
                "league",
                f"{role} RSS growth {lo} -> {hi} modules",
                "x",
                [o["ratio"]],
                [s["ratio"]],
                "stock",
                True,
                "peak RSS ratio; 1.0 = flat in league size",
            )
        )
    return rows
