"""Flaky object storage: record, convert and train through a proxy that fails 10% of the
requests to a real S3 server (moto) give the same bytes and the same accounting as runs
without faults; an endpoint that is down for good ends in one line naming the URI.

The proxy (tests/s3_faults.py) answers 503 SlowDown, resets the connection or delays the
response; our file systems retry (offline_graph.data.store.storage: OFFLINE_GRAPH_S3_MAX_ATTEMPTS,
OFFLINE_GRAPH_S3_RETRY_MODE, here 10 attempts with the fast backoff). The variables are set
before Ray starts, so its workers (record tasks, convert tasks, RLlib's data readers) get them.
"""

from __future__ import annotations

import gc
import json
import pickle
import time

import hypothesis  # noqa: F401  (imported early: see tests/test_object_storage.py)
import pyarrow.fs as pafs
import pytest

from offline_graph.data.store import storage
from offline_graph.data.errors import ConfigError, StorageError
from offline_graph.data.store.files import list_files
from tests.helpers import run_cli
from tests.s3_faults import FaultProxy, free_port, moto_server

pytestmark = pytest.mark.own_ray  # its Ray workers must see the variables below

RATE, SEED, ATTEMPTS = 0.10, 7, 10
BUCKET = "s3://og-flaky"
ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    storage.MODE_ENV: "fast",
    storage.ATTEMPTS_ENV: str(ATTEMPTS),
}
EPISODES, PER_FILE = 20, 10


@pytest.fixture(scope="module")
def moto_url():
    """A moto S3 server with an empty bucket (module-wide); its URL."""
    with moto_server() as url:
        if url is None:
            pytest.skip("moto_server not installed (pip install 'moto[server]', in the dev extras)")
        pafs.S3FileSystem(endpoint_override=url, allow_bucket_creation=True).create_dir(BUCKET[5:])
        yield url


@pytest.fixture(scope="module")
def flaky(moto_url):
    """The proxy at 10% faults in front of the server; the standard variables point at the
    proxy; Ray (2 CPUs) started after they are set."""
    import ray

    proxy = FaultProxy(moto_url, rate=RATE, seed=SEED)
    mp = pytest.MonkeyPatch()
    for key, value in {**ENV, "AWS_ENDPOINT_URL": proxy.url}.items():
        mp.setenv(key, value)
    if ray.is_initialized():  # its workers would not have the variables
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield proxy
    finally:
        gc.collect()  # finalize the learners' Ray Data iterators while Ray still runs
        ray.shutdown()
        proxy.close()
        mp.undo()


def files_bytes(location: str) -> dict[str, bytes]:
    """File name -> bytes of every Parquet file under ``location``."""
    return {f.rsplit("/", 1)[1]: storage.read_bytes(f) for f in list_files(location)}


@pytest.fixture(scope="module")
def recorded(flaky, tmp_path_factory):
    """20 episodes (2 files, 2 Ray tasks) recorded into the bucket through the proxy and,
    without any storage, into a local directory; (bucket URI, local dir, transitions)."""
    from offline_graph.jobs.recording import plan_jobs, record

    local = str(tmp_path_factory.mktemp("flaky") / "episodes")
    found = []
    for output in (f"{BUCKET}/episodes", local):
        jobs = plan_jobs(
            env="offline_graph/Graph-v0",
            env_config=None,
            policy="expert",
            epsilon=0.0,
            seed=3,
            episodes=EPISODES,
            episodes_per_file=PER_FILE,
            output=output,
        )
        workers = 2 if storage.is_uri(output) else 1  # the reference: in this process
        found.append(sum(s["transitions"] for s in record(jobs, workers=workers, show_progress=False)))
    assert found[0] == found[1]
    return f"{BUCKET}/episodes", local, found[0]


@pytest.mark.slow
def test_record_through_faults_writes_the_same_bytes(flaky, recorded):
    uri, local, _ = recorded
    remote = files_bytes(uri)
    assert sorted(remote) == ["episodes-0000000-0000009.parquet", "episodes-0000010-0000019.parquet"]
    assert remote == files_bytes(local)


@pytest.fixture(scope="module")
def converted(flaky, recorded):
    """The episodes converted bucket -> bucket through the proxy (a truncated file next to
    them, skipped and counted) and local -> local; (reports, output URI, output dir)."""
    from offline_graph.data.episodes.reader import spec_from_spaces
    from offline_graph.env.data_spaces import resolve_spaces
    from offline_graph.jobs.convert import ConvertConfig, convert

    uri, local, _ = recorded
    first = list_files(uri)[0]
    storage.write_bytes(f"{uri}/zz-truncated.parquet", storage.read_bytes(first)[:3000])
    spaces = resolve_spaces(local, who="test")
    spec = spec_from_spaces(spaces.observation_space, spaces.action_space)
    out_uri, out_local = f"{BUCKET}/rows", f"{local}-rows"
    small = {"spec": spec, "episodes_per_batch": 5}
    remote = convert(ConvertConfig(input=uri, output=out_uri, on_error="skip", **small))
    here = convert(ConvertConfig(input=local, output=out_local, **small))
    return remote, here, out_uri, out_local


@pytest.mark.slow
def test_convert_through_faults_same_rows_and_exact_accounting(flaky, recorded, converted):
    _, _, transitions = recorded
    remote, here, out_uri, out_local = converted
    assert files_bytes(out_uri) == files_bytes(out_local)  # the same rows, byte for byte
    assert remote["files_in"] == 3 and remote["files_rejected_by_reason"] == {"unreadable_file": 1}
    assert remote["episodes_in"] == remote["episodes_used"] + remote["episodes_rejected"]
    kept = (remote["episodes_used"], remote["episodes_rejected"], remote["episodes_out"])
    assert kept == (EPISODES, 0, EPISODES)
    assert remote["transitions_out"] == here["transitions_out"] == transitions
    saved = json.loads(storage.read_bytes(f"{out_uri}/_conversion_report.json"))
    assert saved["transitions_out"] == transitions and saved["episodes_in"] == EPISODES


@pytest.mark.slow
def test_train_through_faults_reads_every_episode(flaky, recorded, converted):
    """`offline-graph train` (1 iteration of BC) from the episode files in the bucket (the
    truncated one skipped and counted), checkpoint and summary into the bucket (RLlib's
    save_to_path with our file system); every episode read is used, none lost to a fault."""
    from offline_graph.cli import train as train_cli

    uri, _, _ = recorded
    ckpt = f"{BUCKET}/ckpt"
    argv = ["--algo", "bc", "--data", uri, "--on-error", "skip", "--checkpoint", ckpt, "--iterations", "1"]
    argv += ["--eval-episodes", "0", "--batch-size", "32", "--hidden", "16", "--updates-per-iteration", "2"]
    assert train_cli.main(argv) == 0
    summary = json.loads(storage.read_bytes(f"{ckpt}/summary.json"))
    assert summary["checkpoint"] == ckpt and storage.exists(f"{ckpt}/rllib_checkpoint.json")
    assert summary["history"][0]["env_steps_trained"] == 2 * 32
    assert summary["data"]["files_rejected_before_training"] == {"unreadable_file": 1}
    report = summary["data"]["report"]
    assert report["episodes_read"] == report["episodes_used"] == EPISODES
    assert report["episodes_rejected"] == 0
    assert flaky.injected > 0
    print(f"proxy: {flaky.requests} requests, faults injected {dict(flaky.counts)}")


def test_retrying_file_system_keeps_its_policy_when_pickled(monkeypatch):
    """pyarrow's S3FileSystem pickles without its retry strategy: ours rebuilds with it."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    fs = storage.s3_filesystem("s3://b", ("fast", 4))
    again = pickle.loads(pickle.dumps(fs))
    assert type(again) is storage.RetryingS3FileSystem and again.retry == ("fast", 4)
    assert again.__reduce__()[1][1]["endpoint_override"] == "http://127.0.0.1:9"
    monkeypatch.setenv(storage.ATTEMPTS_ENV, "0")
    with pytest.raises(ConfigError, match="OFFLINE_GRAPH_S3_MAX_ATTEMPTS an integer >= 1"):
        storage.retry_policy()


def test_every_attempt_reaches_the_proxy_also_after_pickling(moto_url, monkeypatch):
    """A proxy that answers every request 503 SlowDown sees exactly the configured attempts
    per request: from our file system, from its pickled copy (what a Ray worker gets), and 3
    (pyarrow's default) from a pickled pyarrow S3FileSystem made with 4."""
    proxy = FaultProxy(moto_url, rate=1.0, kinds=("slowdown",))
    try:
        for key, value in {**ENV, "AWS_ENDPOINT_URL": proxy.url, storage.ATTEMPTS_ENV: "4"}.items():
            monkeypatch.setenv(key, value)
        uri = f"{BUCKET}/probe/a.json"
        with pytest.raises(StorageError, match=f"a request on {uri} must succeed within 4 attempts"):
            storage.read_bytes(uri)
        assert proxy.requests == proxy.counts["slowdown"] == 4
        copy = pickle.loads(pickle.dumps(storage.filesystem(uri)))
        with pytest.raises(OSError, match="HTTP status 503"):
            copy.get_file_info(uri[5:])
        assert proxy.requests == 8
        fast4 = pafs.AwsDefaultS3RetryStrategy(4)
        theirs = pafs.S3FileSystem(endpoint_override=proxy.url, retry_strategy=fast4)
        with pytest.raises(OSError, match="HTTP status 503"):
            pickle.loads(pickle.dumps(theirs)).get_file_info(uri[5:])
        assert proxy.requests == 8 + 3
    finally:
        proxy.close()


def test_damaged_footer_in_the_bucket_is_a_rejected_file_not_a_storage_error(moto_url, monkeypatch):
    """pyarrow raises a plain OSError for a garbled footer too ("Couldn't deserialize
    thrift"): only failed S3 requests ("AWS Error") become StorageError."""
    from offline_graph.data.store.files import scan_files
    from tests.helpers import ROOT

    for key, value in {**ENV, "AWS_ENDPOINT_URL": moto_url}.items():
        monkeypatch.setenv(key, value)
    sample = ROOT / "sample_data" / "expert"
    data = bytearray(sorted(sample.glob("*.parquet"))[0].read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    data[-8 - footer : -8] = b"\xff" * footer
    uri = f"{BUCKET}/damaged"
    storage.write_bytes(f"{uri}/a.parquet", bytes(data))
    scan = scan_files(uri, "skip")
    assert scan.files == [] and dict(scan.rejected) == {"unreadable_file": 1}
    assert "OSError: Couldn't deserialize thrift" in scan.examples["unreadable_file"]


def test_endpoint_down_is_one_storage_error_naming_the_uri(monkeypatch):
    for key, value in {**ENV, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(storage.ATTEMPTS_ENV, "3")
    start = time.monotonic()
    with pytest.raises(StorageError, match=f"a request on {BUCKET}/x/a.json must succeed within 3 attempts"):
        storage.write_bytes(f"{BUCKET}/x/a.json", b"{}")
    assert time.monotonic() - start < 10


@pytest.mark.slow
def test_cli_with_the_endpoint_down_prints_one_line_and_exits_2(monkeypatch):
    """Nothing listens at AWS_ENDPOINT_URL: `convert` from the bucket ends in one line."""
    for key, value in {**ENV, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(storage.ATTEMPTS_ENV, "3")
    start = time.monotonic()
    argv = ["convert", "--input", f"{BUCKET}/episodes", "--output", f"{BUCKET}/rows", "--on-error", "skip"]
    proc = run_cli(*argv, timeout=60)
    seconds = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    # the first request: the output must be empty or absent (checked before the input is read)
    assert lines[0].startswith(f"offline-graph convert: storage: a request on {BUCKET}/rows must succeed")
    assert "NETWORK_CONNECTION" in lines[0] and seconds < 60
    print(f"endpoint down: exit 2 after {seconds:.1f} s")
