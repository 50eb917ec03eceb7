"""The docs cannot rot: every ``python`` block of the README and of ``docs/**/*.md`` runs as
printed, every page is in the site's nav, and the API reference covers every public name.

A page's ``python`` blocks are concatenated in order and run as one script, in a fresh
namespace, in a temporary directory that links the repository's top-level entries
(``sample_data``, ``pipelines``, ...), with ``PYTHONPATH`` = the repository root: relative paths
of the repository resolve, and whatever a page writes (``data/...``, ``runs/...``) stays in the
temporary directory. The pages run in two lanes at once (``LANES``, ``page_runs``); a lane
runs its pages one after another in one interpreter and one Ray (tests/doc_lane.py), as a
reader who follows the guides in one directory would, which is why every page's ``ray.init``
passes ``ignore_reinit_error=True``. Pages whose blocks read data a command records first get it
from ``SETUP`` (keyed by page). Each page's test checks its own run. There are no shown-only
code blocks: a fence whose language starts with ``py`` must be ``python`` (run), so no example
can rot unrun.

The examples run at the size a reader would copy: one ``algo.train()`` of 2 updates where a page
shows plumbing (its prose gives the settings of the numbers it quotes), a few evaluation
episodes, 10-20 recorded episodes in ``SETUP``.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import gymnasium as gym
import numpy as np
import pytest

import offline_graph
from tests.doc_checks import CHECKS, PageRun
from tests.doc_lane import PAGE_THREADS

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOT_LINKED = {".git", ".venv", "data", "runs", "site", "tmp"}  # what a page may create, or must not see


def pages() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def blocks(text: str, lang: str) -> list[str]:
    """The fenced blocks of one language, unindented ones only (as Markdown renders them)."""
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, re.S | re.M)


def page_id(page: pathlib.Path) -> str:
    return str(page.relative_to(ROOT))


RUN_PAGES = [p for p in pages() if blocks(p.read_text(), "python")]


def record(env: str, episodes: int, output: str) -> Callable[[pathlib.Path], int]:
    """A set-up step: record ``episodes`` expert episodes of ``env`` into ``cwd/output``;
    returns the number of recorded agent steps."""

    def run(cwd: pathlib.Path) -> int:
        from offline_graph.jobs.recording import plan_jobs, record as record_jobs

        jobs = plan_jobs(
            env=env,
            env_config=None,
            policy="expert",
            epsilon=0.0,
            seed=0,
            episodes=episodes,
            episodes_per_file=episodes,
            output=str(cwd / output),
        )
        return sum(s["transitions"] for s in record_jobs(jobs, show_progress=False))

    return run


def record_both(first: Callable[[pathlib.Path], int], second: Callable[[pathlib.Path], int]):
    """Two set-up steps; returns the first one's agent steps."""

    def run(cwd: pathlib.Path) -> int:
        steps = first(cwd)
        second(cwd)
        return steps

    return run


SETUP = {
    "docs/guides/node-edge-actions.md": record("offline_graph/NextHop-v0", 20, "data/nexthop_expert"),
    "docs/guides/multi-agent.md": record("offline_graph/Team-v0", 10, "data/team_expert"),
    "docs/guides/multi-agent-cli.md": record_both(
        record("offline_graph/Team-v0", 10, "data/team-expert"),
        record("offline_graph/Recall-v0", 10, "data/recall_expert"),
    ),
}


def run_key(page: pathlib.Path) -> str:
    """One run per distinct code (the README repeats Getting started's block), per set-up."""
    code = "\n".join(blocks(page.read_text(), "python"))
    return f"{page_id(page) if SETUP.get(page_id(page)) else ''}\n{code}"


LANES = [
    ["README.md", "docs/guides/data-format.md", "docs/guides/multi-agent.md",
     "docs/guides/graph-level-features.md", "docs/guides/typed-graphs.md", "docs/guides/value-based.md"],
    ["docs/guides/node-edge-actions.md", "docs/guides/ope.md", "docs/guides/multi-agent-cli.md",
     "docs/guides/training.md", "docs/guides/tune.md"],
]  # fmt: skip
"""Two lanes at once, each lane's pages one after another in one interpreter and one Ray
(tests/doc_lane.py); a page not listed joins the last lane; the pages that end with
``ray.shutdown()`` come last. Measured (2-core machine, the docs module alone): 234-244 CPU s
with an interpreter and a Ray per page (3 at a time), 148 in three lanes. The suite is
CPU-bound, so fewer Ray starts beat more lanes. A page alone (load 20-45): tune 139 s,
value-based 128, training 109, README 96, multi-agent-cli 78, multi-agent 49, others < 25."""


def lanes_of(selected: list[str]) -> list[list[str]]:
    """:data:`LANES` restricted to the ``selected`` page ids, the unlisted ones in the last."""
    listed = {name for lane in LANES for name in lane}
    lanes = [[name for name in lane if name in selected] for lane in LANES]
    lanes[-1] += [name for name in selected if name not in listed]
    return [lane for lane in lanes if lane]


def run_lane(names: list[str], cwd: pathlib.Path, io: pathlib.Path) -> dict[str, PageRun | str]:
    """Runs the pages ``names`` in ``cwd`` (their set-ups first) in one ``tests.doc_lane``
    process; each page's :class:`PageRun`, or what it printed to stderr when it failed."""
    for entry in ROOT.iterdir():
        if entry.name not in NOT_LINKED and not entry.name.startswith("."):
            (cwd / entry.name).symlink_to(entry)
    steps = {name: SETUP[name](cwd) for name in names if name in SETUP}
    code = {name: "\n".join(blocks((ROOT / name).read_text(), "python")) for name in names}
    spec = io / "lane.json"
    pages = [{"name": name, "code": code[name]} for name in names]
    spec.write_text(json.dumps({"cwd": str(cwd), "io": str(io), "pages": pages}))
    env = {"OMP_NUM_THREADS": str(PAGE_THREADS), **os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.doc_lane", str(spec)],
        cwd=cwd, capture_output=True, text=True, timeout=LANE_TIMEOUT_S, env=env,
    )  # fmt: skip
    runs: dict[str, PageRun | str] = {}
    for i, name in enumerate(names):
        if not (io / f"{i}.rc").exists():
            ended = f"its lane ended (exit {proc.returncode}) before the page did"
            runs[name] = f"{name}: {ended}:\n{proc.stderr[-3000:]}"
        elif (io / f"{i}.rc").read_text() != "0":
            runs[name] = f"{name}:\n{(io / f'{i}.err').read_text()[-3000:]}"
        else:
            runs[name] = PageRun(cwd, (io / f"{i}.out").read_text(), steps.get(name))
    return runs


LANE_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def page_runs(request, tmp_path_factory) -> Iterator[dict[str, tuple[Future, str]]]:
    """Every selected page's run, in :data:`LANES` started together when the first page test
    asks; one run per distinct code: run key -> (its lane's future, the page that runs it)."""
    selected = [
        item.callspec.params["page"]
        for item in request.session.items
        if getattr(item, "originalname", None) == test_python_blocks_run_as_printed.__name__
    ]
    first: dict[str, str] = {}
    for page in selected:
        first.setdefault(run_key(page), page_id(page))
    lanes = lanes_of(list(first.values()))
    with ThreadPoolExecutor(len(lanes)) as pool:
        futures = {}
        for i, lane in enumerate(lanes):
            cwd, io = tmp_path_factory.mktemp(f"lane{i}"), tmp_path_factory.mktemp(f"io{i}")
            future = pool.submit(run_lane, lane, cwd, io)
            futures.update({name: future for name in lane})
        yield {key: (futures[name], name) for key, name in first.items()}
        for future in futures.values():
            future.cancel()


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES, ids=page_id)
def test_python_blocks_run_as_printed(page: pathlib.Path, page_runs: dict[str, tuple[Future, str]]) -> None:
    """The page's run (``page_runs``) exits 0 and its ``CHECKS`` entry holds. Over 20 s: each
    run runs its algorithms as printed (the prelearner actors, Tune's trials: ``LANES`` has the
    times), and the first page test also waits for the lanes started before its own."""
    lane, name = page_runs[run_key(page)]
    run = lane.result()[name]
    assert isinstance(run, PageRun), run
    check = CHECKS.get(page_id(page))
    if check is not None:
        check(run)


def test_known_pages_have_the_blocks_their_checks_read() -> None:
    assert {page_id(p) for p in RUN_PAGES} >= set(CHECKS) | set(SETUP)
    readme = "\n".join(blocks((ROOT / "README.md").read_text(), "python"))
    first = "\n".join(blocks((DOCS / "getting-started.md").read_text(), "python"))
    assert readme == first  # one block, shown on both pages (run once)
    assert "offline_graph.configure(config)" in first and "prelearner_class=GraphOfflinePreLearner" in first
    node = "\n".join(blocks((DOCS / "guides" / "node-edge-actions.md").read_text(), "python"))
    assert "action_space=NodeAction(64)" in node and "to_deterministic()" in node


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_python_block_runs(page: pathlib.Path) -> None:
    """No shown-only code: every ``py...`` fence is ``python`` (run above), none indented."""
    fences = re.findall(r"^([ \t]*)```(\S*)", page.read_text(), re.M)
    assert not [lang for _, lang in fences if lang.startswith("py") and lang != "python"], page_id(page)
    assert not [lang for indent, lang in fences if indent and lang.startswith("py")], page_id(page)


class _NetworkxEnv:
    """A third-party style env: the graph is a networkx graph in info["graph"], the mask a
    0/1 list in info["mask"]; the action is a node."""

    def __new__(cls):
        import networkx as nx
        import numpy as np

        class Env(gym.Env):
            observation_space = gym.spaces.Box(0, 1, (1,))
            action_space = gym.spaces.Discrete(8)

            def _info(self):
                g = nx.path_graph(self.n)
                for v in g.nodes:
                    g.nodes[v]["feat"] = [float(v), 1.0]
                return {"graph": g, "mask": [int(v != self.t % self.n) for v in g.nodes]}

            def reset(self, seed=None, options=None):
                super().reset(seed=seed)
                self.n, self.t = int(self.np_random.integers(3, 6)), 0
                return np.zeros(1, np.float32), self._info()

            def step(self, action):
                self.t += 1
                return np.zeros(1, np.float32), float(action), self.t >= 3, False, self._info()

        return Env()


def test_wrapper_block_wraps_a_networkx_env() -> None:
    """Node and edge actions, "Wrapping a third-party env": the wrapper on a networkx env."""

    from offline_graph.data.graphs.graph import space_sizes
    from offline_graph.env.making import observe

    text = (DOCS / "guides" / "node-edge-actions.md").read_text()
    (code,) = [b for b in blocks(text, "python") if "class GraphWrapper" in b]
    scope: dict = {}
    exec(code, scope)
    env = scope["GraphWrapper"](_NetworkxEnv(), max_nodes=8, num_features=2)
    obs, info = env.reset(seed=0)
    d = observe(obs, info, space_sizes(env.observation_space)[1], "action_mask")
    n = d["x"].shape[0]
    assert 3 <= n <= 5 and d["x"][:, 0].tolist() == list(range(n))
    # a path graph stored in both directions: 2 * (n - 1) edges, PyG order [2, E]
    assert d["edge_index"].shape == (2, 2 * (n - 1))
    assert d["action_mask"].dtype == np.bool_ and d["action_mask"].tolist() == [False] + [True] * (n - 1)
    # (gymnasium's Graph.contains rejects any edge when edge_space=None; the nodes are checked)
    assert all(env.observation_space.node_space.contains(row) for row in obs.nodes)


def nav_pages(node: object) -> set[str]:
    if isinstance(node, str):
        return {node}
    if isinstance(node, list):
        return set().union(*(nav_pages(n) for n in node))
    if isinstance(node, dict):
        return set().union(*(nav_pages(n) for n in node.values()))
    return set()


def test_every_page_is_in_the_nav() -> None:
    """Every page on disk is in mkdocs.yml's nav, and every nav entry exists."""
    import yaml

    text = (ROOT / "mkdocs.yml").read_text()
    nav = nav_pages(yaml.safe_load(text)["nav"])
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert on_disk <= nav, on_disk - nav
    assert nav <= on_disk, nav - on_disk


def test_the_api_reference_covers_every_public_name() -> None:
    """Each name of ``offline_graph._EXPORTS`` is rendered by a ``:::`` directive (the object
    itself, or its module with the name among ``members``)."""
    rendered: set[str] = set()
    for page in (DOCS / "reference").glob("*.md"):
        for target, options in re.findall(r"^::: (\S+)\n((?:    .*\n)*)", page.read_text(), re.M):
            members = re.search(r"members: \[(.*)\]", options)
            if members is None:
                rendered.add(target)
            else:
                rendered |= {f"{target}.{m.strip()}" for m in members.group(1).split(",")}
    missing = {n for n, module in offline_graph._EXPORTS.items() if f"{module}.{n}" not in rendered}
    assert not missing, missing


def test_ci_runs_the_test_command_the_readme_shows() -> None:
    """`.ci/run`'s command is the README's test command, and Getting started shows the same."""
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert "mkdocs build --strict" in ci and ci.endswith("python -m pytest -q")
    for page in (ROOT / "README.md", DOCS / "getting-started.md"):
        assert ci in [b.strip() for b in blocks(page.read_text(), "bash")], page_id(page)
