"""`offline-graph record` / `inspect`: determinism, Ray parity, shipped sample_data, exact stats."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from offline_graph.data.errors import ConfigError
from offline_graph.data.store.format import read_file_metadata
from offline_graph.jobs.recording import RecordJob, record_file
from offline_graph.cli import inspect_data as inspect_cli
from offline_graph.cli import record as record_cli
from tests.helpers import make_episode_item, run_cli, write_episode_file

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data"


def files_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.parquet"))}


def rec(out: Path, *extra: str) -> int:
    return record_cli.main(["--output", str(out), "--no-progress", *extra])


def test_same_seed_same_bytes(tmp_path, capsys):
    args = (
        "--policy",
        "mixed",
        "--epsilon",
        "0.5",
        "--episodes",
        "3",
        "--seed",
        "11",
        "--episodes-per-file",
        "2",
    )
    assert rec(tmp_path / "a", *args) == 0
    summary = capsys.readouterr().out
    assert "episodes     3\n" in summary and "files        2\n" in summary
    assert rec(tmp_path / "b", *args) == 0
    a, b = files_bytes(tmp_path / "a"), files_bytes(tmp_path / "b")
    assert sorted(a) == ["episodes-0000000-0000001.parquet", "episodes-0000002-0000002.parquet"]
    assert a == b
    # another seed gives other bytes (so the comparison above can fail)
    assert rec(tmp_path / "c", *args[:-4], "--seed", "12", "--episodes-per-file", "2") == 0
    assert files_bytes(tmp_path / "c") != a


def test_refuses_non_empty_output_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "o"
    assert rec(out, "--episodes", "1") == 0
    capsys.readouterr()
    assert rec(out, "--episodes", "1") == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"offline-graph record: --output must be a new or empty directory (found 1 entries in {out}"
    )
    assert "--overwrite" in err
    assert rec(out, "--episodes", "2", "--overwrite") == 0
    assert sorted(files_bytes(out)) == ["episodes-0000000-0000001.parquet"]
    with pytest.raises(ConfigError, match="must hold only episodes-"):
        (out / "notes.txt").write_text("x")
        record_cli.prepare_output(str(out), overwrite=True)


def test_bad_args_exit_2():
    for argv in (
        ["--output", "x", "--episodes", "0"],
        ["--output", "x", "--epsilon", "2"],
        ["--output", "x", "--env-config", "[1]"],
        ["--output", "x", "--policy", "bad"],
    ):
        with pytest.raises(SystemExit) as info:
            record_cli.parse_args(argv)
        assert info.value.code == 2


def test_ray_workers_match_single_process(ray_session, tmp_path):
    args = (
        "--policy",
        "mixed",
        "--epsilon",
        "0.5",
        "--episodes",
        "4",
        "--seed",
        "3",
        "--episodes-per-file",
        "2",
    )
    assert rec(tmp_path / "one", *args) == 0
    assert rec(tmp_path / "two", *args, "--workers", "2") == 0  # on the running Ray (ray_session)
    one = files_bytes(tmp_path / "one")
    assert len(one) == 2 and one == files_bytes(tmp_path / "two")


def documented_commands() -> dict[str, record_cli.Config]:
    """The `offline-graph record ...` commands of sample_data/README.md, by output name."""
    text = (SAMPLE / "README.md").read_text()
    cmds = {}
    for line in text.replace("\\\n", " ").splitlines():
        if line.strip().startswith("offline-graph record"):
            cfg = record_cli.parse_args(shlex.split(line)[2:])
            cmds[Path(cfg.output).name] = cfg
    return cmds


def test_sample_data_format_and_documented_commands(tmp_path):
    cmds = documented_commands()
    assert sorted(cmds) == ["expert", "mixed"]
    assert (cmds["expert"].policy, cmds["expert"].seed) == ("expert", 0)
    assert (cmds["mixed"].policy, cmds["mixed"].epsilon, cmds["mixed"].seed) == ("mixed", 0.5, 1)
    for name, cfg in cmds.items():
        shipped = sorted((SAMPLE / name).glob("*.parquet"))
        assert len(shipped) == -(-cfg.episodes // cfg.episodes_per_file)
        for path in shipped:
            meta = read_file_metadata(str(path))
            assert (meta["kind"], meta["version"], meta["seed"]) == ("episodes", 1, cfg.seed)
        # re-record episodes 0..1 with the documented settings: identical rows
        out = str(tmp_path / f"{name}.parquet")
        record_file(RecordJob(cfg.env, cfg.env_config, cfg.policy, cfg.epsilon, cfg.seed, 0, 2, out))
        fresh = pq.read_table(out).column("item").to_pylist()
        first = pq.read_table(shipped[0]).column("item").to_pylist()[:2]
        assert len(fresh) == 2 and fresh == first
    total = sum(p.stat().st_size for p in SAMPLE.rglob("*") if p.is_file())
    assert total <= 9_000_000


def table_rows(text: str) -> dict[str, str]:
    """inspect's table as {label: value} (label and value are separated by 2+ spaces)."""
    return dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in text.splitlines())


def hand_built_file(tmp_path) -> str:
    """Two episodes, F=3, D=2 (a graph costs 12*N + 24*E bytes as stored).

    A: graphs (N, E) = (2,1) (4,3) (1,0), actions [0, 2], rewards [1, 0.5], terminated.
    B: graphs (3,2) (5,6), action [1], reward [-1], truncated.
    """
    a = make_episode_item([(2, 1), (4, 3), (1, 0)], [0, 2], [1.0, 0.5], episode_id="A")
    b = make_episode_item(
        [(3, 2), (5, 6)], [1], [-1.0], seed=1, terminated=False, truncated=True, episode_id="B"
    )
    return write_episode_file(tmp_path / "two.parquet", [a, b])


def test_inspect_exact_numbers(tmp_path, capsys):
    path = hand_built_file(tmp_path)
    assert inspect_cli.main([path, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["files"], s["format_version"], s["episodes"], s["transitions"]) == (1, [1], 2, 3)
    assert s["observations"] == 5 and s["episodes_rejected"] == 0
    assert s["return"] == {"mean": 0.25, "min": -1.0, "max": 1.5}
    assert (s["terminated"], s["truncated"]) == (1, 1)
    assert (s["num_features"], s["edge_dim"], s["num_actions"]) == (3, 2, 3)
    # N over all 5 observations: [1,2,3,4,5]; linear percentiles: p90 = 4 + 0.6, p99 = 4 + 0.96
    assert s["nodes"] == pytest.approx({"p50": 3.0, "p90": 4.6, "p99": 4.96, "max": 5})
    # E: [0,1,2,3,6]; p90 = 3 + 0.6*3, p99 = 3 + 0.96*3
    assert s["edges"] == pytest.approx({"p50": 2.0, "p90": 4.8, "p99": 5.88, "max": 6})
    # transitions carry obs (2,1) (4,3) (3,2): 48 + 120 + 84 = 252 bytes over 3 transitions
    assert s["bytes_per_transition"] == 84.0
    # Box padded to N=5, E=6: 5*3*4 + 2*6*8 + 6*2*4 = 204
    assert s["padded_box"] == pytest.approx(
        {"n_max": 5, "e_max": 6, "bytes_per_transition": 204, "x_fold": 204 / 84}
    )
    # Repeated, n_max = observed 5: 5*3*4 + 25*2*8 + 25*2*4 = 660
    assert s["padded_repeated"] == pytest.approx(
        {"n_max": 5, "bytes_per_transition": 660, "x_fold": 660 / 84}
    )
    # --n-max 10: 120 + 1600 + 800 = 2520 = 30x
    assert inspect_cli.main([path, "--json", "--n-max", "10"]) == 0
    rep = json.loads(capsys.readouterr().out)["padded_repeated"]
    assert rep == {"n_max": 10, "bytes_per_transition": 2520, "x_fold": 30.0}
    assert inspect_cli.main([path]) == 0
    table = table_rows(capsys.readouterr().out)
    assert table["transitions"] == "3"
    assert table["return"] == "mean 0.250  min -1.000  max 1.500"
    assert table["nodes per obs"] == "p50 3  p90 4.6  p99 4.96  max 5"
    assert table["padded Box (N=5, E=6)"] == "204 (204 B)  2.4x real"
    assert table["padded Repeated (N=5, N^2 edges)"] == "660 (660 B)  7.9x real"


def test_inspect_reads_subdirectories_like_rllibs_recorder_writes(tmp_path, capsys):
    """RLlib's recorder writes DIR/<env>/run-<worker>-<call>/*.parquet: inspect DIR finds them."""
    nested = tmp_path / "out" / "Graph-v0" / "run-000001-00001"
    nested.mkdir(parents=True)
    hand_built_file(nested)
    assert inspect_cli.main([str(tmp_path / "out"), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["files"], s["episodes"], s["transitions"]) == (1, 2, 3)


def test_inspect_bad_rows_skip_or_strict(tmp_path, capsys):
    good = make_episode_item([(2, 1), (3, 0)], [1], [2.0], episode_id="ok")
    negative = make_episode_item([(2, 1), (3, 0)], [-1], [2.0], episode_id="neg")
    path = write_episode_file(tmp_path / "mixed.parquet", [good, b"\x00junk", good, negative])
    assert inspect_cli.main([path, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["episodes"], s["transitions"], s["episodes_rejected"]) == (2, 2, 2)
    assert s["rejected_by_reason"] == {"action": 1, "decode": 1}
    assert s["first_error_by_reason"]["action"].startswith(
        f"file {path}, row 3, episode 'neg', step t=0, column 'actions': action must be in 0..0"
    )
    assert inspect_cli.main([path, "--strict"]) == 2
    assert capsys.readouterr().err.startswith(
        f"offline-graph inspect: file {path}, row 1, column 'item': value must"
    )


def test_console_script_record_help_and_inspect_sample():
    res = run_cli("record", "--help")
    assert res.returncode == 0, res.stderr
    assert "--episodes-per-file" in res.stdout and "--workers" in res.stdout
    res = run_cli("inspect", "sample_data/expert")
    assert res.returncode == 0, res.stderr
    table = table_rows(res.stdout)
    assert (table["episodes"], table["transitions"], table["format version"]) == ("120", "3804", "1")
