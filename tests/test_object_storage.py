"""Object storage: record, inspect, convert and train against a real S3 server (moto_server).

The server is ``moto_server`` from ``moto[server]`` (the dev extras), started on 127.0.0.1 by
a fixture; our code sees it only through the standard variables (``AWS_ENDPOINT_URL``, ...).
"""

from __future__ import annotations

import gc
import json
import os

import hypothesis  # noqa: F401  (see below)
import pyarrow.fs as pafs
import pytest

from offline_graph.data.store import storage
from offline_graph.data.errors import FormatVersionError
from offline_graph.data.store.files import list_files, scan_files
from offline_graph.jobs.convert import ConvertEpisodes
from tests.s3_faults import moto_server

# hypothesis is imported up front: its pytest plugin imports it at the end of the session
# otherwise, and on CPython 3.11.7 that late import (after Ray and torch ran in this process)
# failed with "SystemError: AST constructor recursion depth mismatch" (exit status 1).
pytestmark = pytest.mark.own_ray  # its Ray workers must see the s3_env variables

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "sample_data", "expert")


@pytest.fixture(scope="module")
def s3_endpoint():
    """A moto S3 server on a free port (module-wide); its URL."""
    with moto_server() as url:
        if url is None:
            pytest.skip("moto_server not installed (pip install 'moto[server]', in the dev extras)")
        yield url


ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def s3_env(s3_endpoint):
    """The standard variables pointing at the server (set before Ray starts, so its workers
    inherit them), and a fresh bucket; yields the bucket's URI."""
    mp = pytest.MonkeyPatch()
    for key, value in {**ENV, "AWS_ENDPOINT_URL": s3_endpoint}.items():
        mp.setenv(key, value)
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, allow_bucket_creation=True)
    fs.create_dir("og-test")
    yield "s3://og-test"
    mp.undo()


@pytest.fixture(scope="module")
def s3_ray(s3_env):
    """A 2-CPU Ray started after ``s3_env`` set the variables (its workers inherit them),
    shared by this module's Ray tests."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    gc.collect()  # finalize the learners' Ray Data iterators while Ray still runs
    ray.shutdown()


def upload(local_dir: str, uri: str) -> list[str]:
    fs, path = storage.resolve(uri)
    pafs.copy_files(local_dir, path, destination_filesystem=fs)
    return storage.list_dir(uri, ".parquet", recursive=True)


def test_storage_helper_lists_reads_and_writes_uris(s3_env):
    base = f"{s3_env}/helper"
    storage.write_bytes(storage.join(base, "a", "x.json"), b"{}")
    storage.write_bytes(storage.join(base, "b.parquet"), b"no")
    assert storage.exists(base) and storage.is_dir(base)
    assert storage.read_bytes(f"{base}/a/x.json") == b"{}"
    assert storage.list_dir(base, ".json", recursive=True) == [f"{base}/a/x.json"]
    assert storage.entries(base) == ["a", "b.parquet"]
    storage.remove_tree(base)
    assert not storage.exists(f"{base}/a/x.json")


def test_schemes_pyarrow_lacks_go_through_fsspec():
    from offline_graph.data.store.format import write_episode_file

    storage.write_bytes("memory://og/x/a.json", b"{}")
    write_episode_file("memory://og/eps/e.parquet", [b"x"])
    assert storage.list_dir("memory://og", recursive=True) == [
        "memory://og/eps/e.parquet",
        "memory://og/x/a.json",
    ]
    assert scan_files("memory://og/eps").files == ["memory://og/eps/e.parquet"]


def test_bad_file_in_bucket_raise_names_uri_and_skip_counts(s3_env):
    base = f"{s3_env}/bad"
    files = upload(SAMPLE, base)
    storage.write_bytes(f"{base}/broken.parquet", storage.read_bytes(files[0])[:5000])
    assert len(list_files(base)) == 3
    with pytest.raises(FormatVersionError) as err:
        scan_files(base, "raise")
    assert f"{base}/broken.parquet" in str(err.value)
    scan = scan_files(base, "skip")
    assert scan.files == files and dict(scan.rejected) == {"unreadable_file": 1}


def test_inspect_reads_a_bucket(s3_env):
    from offline_graph.data.analysis.stats import collect

    base = f"{s3_env}/inspect"
    upload(SAMPLE, base)
    remote, local = collect(base), collect(SAMPLE)
    assert len(remote.files) == 2 and remote.files[0].startswith(f"{base}/")
    assert remote.lengths == local.lengths and len(remote.lengths) == 120


def test_inspect_cli_reads_a_bucket(s3_env, capsys):
    from offline_graph.cli.inspect_data import main

    base = f"{s3_env}/inspect-cli"
    upload(SAMPLE, base)
    assert main([base]) == 0
    assert "120" in capsys.readouterr().out


def test_migrate_bucket_to_bucket(s3_env, tmp_path):
    from tests.migrate_data import assert_lossless, make_recording, run, write_json_rows, write_parquet

    eps, rows = make_recording(seed=2, episodes=5)
    (tmp_path / "old").mkdir()
    write_parquet(rows[:7], tmp_path / "old" / "a.parquet")
    write_json_rows(rows[7:], tmp_path / "old" / "b.jsonl")
    old, new = f"{s3_env}/migrate/old", f"{s3_env}/migrate/new"
    upload(str(tmp_path / "old"), old)
    report = run(old, new, batch_rows=3)
    assert (report["files_in"], report["episodes"], report["transitions"]) == (2, 5, len(rows))
    assert json.loads(storage.read_bytes(f"{new}/_migration_report.json"))["episodes"] == 5
    local = tmp_path / "new"
    local.mkdir()
    for f in list_files(new):
        (local / f.rsplit("/", 1)[1]).write_bytes(storage.read_bytes(f))
    assert_lossless(eps, local)


@pytest.mark.slow
def test_record_convert_bucket_to_bucket_then_train(s3_env, s3_ray, tmp_path):
    """record -> s3, convert s3 -> s3 with a worker killed on its first batch (the same rows
    as a local conversion, report present; a bad file skipped and counted), train 1 iteration
    from the converted rows in s3 with the CLI (checkpoint, curve and summary into the bucket),
    evaluate from there. The CLI on the episode files in a bucket (the bad one skipped and
    counted): tests/test_flaky_storage.py::test_train_through_faults_reads_every_episode, the
    same command through a fault-injecting proxy. Up to 20 s on the busy 2-CPU machine: the
    first conversion starts Ray's workers, the CLI's algorithm its prelearner actor."""

    from offline_graph.cli import evaluate as evaluate_cli
    from offline_graph.cli import train as train_cli
    from offline_graph.jobs.conversion import REPORT_NAME
    from offline_graph.jobs.convert import ConvertConfig, convert
    from offline_graph.jobs.recording import plan_jobs, record
    from offline_graph.env.data_spaces import resolve_spaces
    from offline_graph.data.episodes.reader import spec_from_spaces

    eps = f"{s3_env}/run/episodes"
    jobs = plan_jobs(
        env="offline_graph/Graph-v0",
        env_config=None,
        policy="expert",
        epsilon=0.0,
        seed=0,
        episodes=20,
        episodes_per_file=10,
        output=eps,
    )
    transitions = sum(s["transitions"] for s in record(jobs, show_progress=False))
    files = list_files(eps)
    assert len(files) == 2 and all(f.startswith(f"{eps}/episodes-") for f in files)
    storage.write_bytes(f"{eps}/zz-broken.parquet", storage.read_bytes(files[0])[:3000])
    local = str(tmp_path / "episodes")
    os.makedirs(local)
    for f in files:
        with open(os.path.join(local, f.rsplit("/", 1)[1]), "wb") as fh:
            fh.write(storage.read_bytes(f))

    spaces = resolve_spaces(eps, scan=scan_files(eps, "skip"), who="test")
    spec = spec_from_spaces(spaces.observation_space, spaces.action_space)
    with pytest.raises(FormatVersionError, match=f"{eps}/zz-broken.parquet"):
        convert(ConvertConfig(input=eps, output=f"{s3_env}/run/rows-raise", spec=spec))
    # the local reference first (its job starts the Ray workers), then one conversion for both
    # cases: a bucket and a killed worker (its task retried, Ray's workers started) change nothing
    local_report = convert(ConvertConfig(input=local, output=str(tmp_path / "rows"), spec=spec))
    rows = f"{s3_env}/run/rows"
    report = convert(
        ConvertConfig(input=eps, output=rows, spec=spec, on_error="skip", episodes_per_batch=5),
        map_class=DieOnce,
    )
    assert storage.exists(f"{s3_env}/run/died")  # the worker really died once
    assert report["transitions_out"] == local_report["transitions_out"] == transitions
    assert report["files_rejected_by_reason"] == {"unreadable_file": 1}
    assert report["input"] == eps and report["output"] == rows
    assert json.loads(storage.read_bytes(f"{rows}/{REPORT_NAME}"))["transitions_out"] == transitions
    assert not storage.exists(f"{rows}/_block_stats")
    remote_bytes = sorted(storage.read_bytes(f) for f in list_files(rows))
    local_bytes = sorted(storage.read_bytes(f) for f in list_files(str(tmp_path / "rows")))
    assert remote_bytes == local_bytes  # the same rows, byte for byte

    # the CLI on the converted rows in the bucket (the env named: rows made from spaces carry
    # none): checkpoint, curve and summary into the bucket; evaluate from there
    ckpt = f"{s3_env}/run/ckpt"
    argv = ["--algo", "bc", "--data", rows, "--env", "offline_graph/Graph-v0", "--checkpoint", ckpt]
    argv += ["--iterations", "1", "--eval-episodes", "0", "--batch-size", "32", "--hidden", "16"]
    assert train_cli.main(argv + ["--updates-per-iteration", "2"]) == 0
    summary = json.loads(storage.read_bytes(f"{ckpt}/summary.json"))
    assert summary["history"][0]["env_steps_trained"] == 2 * 32
    assert summary["data"]["files_rejected_before_training"] == {}
    assert summary["data"]["env"] == "offline_graph/Graph-v0"
    assert storage.read_bytes(f"{ckpt}/learning_curve.png")[:4] == b"\x89PNG"
    assert storage.exists(f"{ckpt}/rllib_checkpoint.json")
    evaluated = f"{ckpt}/eval.json"
    assert evaluate_cli.main(["--checkpoint", ckpt, "--episodes", "2", "--output", evaluated]) == 0
    assert len(json.loads(storage.read_bytes(evaluated))["module"]["returns"]) == 2


class DieOnce(ConvertEpisodes):
    """Kills its own worker process on its first batch, once per job (a marker object next
    to the episode directory in the bucket)."""

    def __call__(self, batch):
        marker = batch.column("path")[0].as_py().rsplit("/", 2)[0] + "/died"
        if not storage.exists(marker):
            storage.write_bytes(marker, b"")
            os._exit(1)
        return super().__call__(batch)


def test_ray_data_paths_map_back_to_the_given_uris():
    """Ray Data's include_paths names s3://b/k as b/k: the prelearner names the URI again."""
    inputs = ["s3://bucket/eps/a.parquet", "gs://other/b.parquet", "/local/c.parquet"]
    assert storage.uri_names(inputs) == {
        "bucket/eps/a.parquet": "s3://bucket/eps/a.parquet",
        "other/b.parquet": "gs://other/b.parquet",
    }
    assert storage.uri_names("s3://bucket/eps") == {"bucket/eps": "s3://bucket/eps"}
    assert storage.uri_names("/local/dir") == {}


def test_multi_agent_episodes_written_to_a_bucket_inspect_and_train(s3_env, s3_ray):
    """write_episodes -> s3 (RLlib-built multi-agent episodes), inspect the bucket, train one
    iteration from it with RLlib's multi-agent config (modules' spaces only, no env)."""
    import gymnasium as gym
    import numpy as np
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    import offline_graph
    from offline_graph.data.graphs.space_text import graph_space
    from offline_graph.data.analysis.stats import inspect_path

    def graph(n: int, f: int) -> dict:
        return {"x": np.ones((n, f), np.float32), "edge_index": np.array([[0], [n - 1]], np.int64)}

    episodes = []
    for i in range(4):
        ep = MultiAgentEpisode(id_=f"m{i}")
        ep.add_env_reset(observations={"a": graph(3, 2), 5: graph(2, 3)})
        ep.add_env_step(
            observations={"a": graph(4, 2), 5: graph(3, 3)},
            actions={"a": np.int64(1), 5: 0},
            rewards={"a": 1.0, 5: 2.0},
            terminateds={"__all__": True},
        )
        episodes.append(ep)
    uri = f"{s3_env}/multi_agent"
    files = offline_graph.write_episodes(uri, episodes, episodes_per_file=2)
    assert files == [f"{uri}/episodes-0000000-0000001.parquet", f"{uri}/episodes-0000002-0000003.parquet"]
    assert list_files(uri) == files and scan_files(uri).metadata.get("multi_agent") is True
    report = inspect_path(uri)
    assert report["agent_steps"] == 8  # 4 episodes x 2 agents x 1 step
    specs = {
        "p2": RLModuleSpec(
            module_class=offline_graph.GNNModule,
            observation_space=graph_space(2),
            action_space=gym.spaces.Discrete(2),
        ),
        "p3": RLModuleSpec(
            module_class=offline_graph.GNNModule,
            observation_space=graph_space(3),
            action_space=gym.spaces.Discrete(2),
        ),
    }
    config = (
        BCConfig()
        .multi_agent(
            policies={"p2", "p3"}, policy_mapping_fn=lambda aid, ep, **kw: "p2" if aid == "a" else "p3"
        )
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        .offline_data(
            input_=[uri], input_read_episodes=True, prelearner_class=offline_graph.GraphOfflinePreLearner
        )
        .training(train_batch_size_per_learner=4)
    )
    config = offline_graph.configure(config)
    algo = config.build_algo()
    try:
        result = algo.train()
        assert all(np.isfinite(float(result["learners"][m]["policy_loss"])) for m in ("p2", "p3"))
        assert offline_graph.data_report(config)["transitions_by_module"]["p3"] % 4 == 0
    finally:
        algo.stop()


def test_estimate_value_reads_a_bucket(s3_env):
    """estimate_value on s3:// URIs (a file list, the directory, one file, RLlib's raw output
    format): the episodes read give the WIS value computed by hand."""
    import msgpack
    import msgpack_numpy
    import pyarrow as pa
    import pyarrow.parquet as pq

    import offline_graph
    from tests import ope_outside_data as D

    logs = D.bandit_logs(n_episodes=120)
    episodes = D.bandit_episodes(logs)
    uri = f"{s3_env}/ope"
    files = offline_graph.write_episodes(
        uri, episodes, observation_space=D.OBS, action_space=D.ACT, episodes_per_file=50
    )
    assert len(files) == 3
    raw = [
        msgpack.packb(ep.get_state(), default=msgpack_numpy.encode)
        for ep in D.bandit_episodes(logs, spaces=False)
    ]
    fs, path = storage.resolve(f"{s3_env}/ope_raw/part-0.parquet")
    pq.write_table(pa.table({"item": pa.array(raw, pa.binary())}), path, filesystem=fs)
    target = D.policy(D.PI1)
    expected = D.wis_by_hand(logs, D.PI1)
    for data in (files, uri, [f"{s3_env}/ope_raw"]):
        res = offline_graph.estimate_value(target, data, method="wis", gamma=1.0, explore=True)
        assert (res["episodes"], res["behaviour"]) == (120, "logged")
        assert res["value"] == pytest.approx(expected, rel=1e-6)
    first = offline_graph.estimate_value(target, files[0], method="wis", gamma=1.0, explore=True)
    assert first["episodes"] == 50 and first["value"] == pytest.approx(
        D.wis_by_hand(logs[:50], D.PI1), rel=1e-6
    )
