"""The house: no import cycle among offline_graph's modules, and layers that only look down.

Layer order (docs/architecture.md), lowest first, as the data flows:
``data`` (pure core) < ``env`` (envs, making and acting in them) < ``rllib`` (RLlib/Ray
adapters) < ``jobs`` (record / convert / migrate jobs) < ``bench`` < ``cli``. Inside ``rllib``
the sub-packages, named after RLlib's own: ``core`` (the RLModule and its parts) < ``env``
(EnvRunners, connectors) < ``offline`` (the prelearner, reading, episode files) < ``ope`` <
``algorithms`` (configure, the algorithm classes, learners) < ``evaluation``. Every import
counts: module level, inside functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import offline_graph

LAYERS = ("data", "env", "rllib", "jobs", "bench", "cli")
RLLIB = ("core", "env", "offline", "ope", "algorithms", "evaluation")
MAX_MODULES = 20
"""A folder holds at most this many modules (``__init__`` not counted)."""
CROWDED: dict[str, int] = {}
"""Folders allowed over MAX_MODULES, at their count then: a ratchet (they may shrink, not grow).
None left since issue 39 split ``data`` and ``cli``."""
ROOT = pathlib.Path(offline_graph.__file__).parent


def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    parts = (root.name, *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The ``known`` modules that ``source`` (module ``name``) imports, at any depth."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {m for m in found if m in known and m != name}


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    known = set(files)
    return {n: imports_of(p.read_text(), n, p.name == "__init__.py", known) for n, p in sorted(files.items())}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def rllib_floor(module: str) -> int | None:
    """The sub-package of ``offline_graph.rllib`` that ``module`` is in (its index in RLLIB)."""
    parts = module.split(".")
    return RLLIB.index(parts[2]) if len(parts) > 2 and parts[1] == "rllib" and parts[2] in RLLIB else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    up = []
    for a, targets in graph.items():
        for b in sorted(targets):
            for rank in (layer, rllib_floor):
                ra, rb = rank(a), rank(b)
                if ra is not None and rb is not None and rb > ra:
                    up.append(f"{a} -> {b}")
    return up


def test_offline_graph_has_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_layers_only_import_downward() -> None:
    assert upward_imports(import_graph()) == []


def test_every_subpackage_is_a_named_layer() -> None:
    subpackages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert subpackages == set(LAYERS)
    rllib = ROOT / "rllib"
    assert {p.name for p in rllib.iterdir() if (p / "__init__.py").exists()} == set(RLLIB)
    assert sorted(p.name for p in rllib.glob("*.py")) == ["__init__.py"]  # every module in a room


def test_no_folder_has_more_than_20_modules_but_the_known_ones() -> None:
    crowded = {
        str(d.relative_to(ROOT)): n
        for d in [ROOT, *(p for p in ROOT.rglob("*") if (p / "__init__.py").exists())]
        if (n := len([f for f in d.glob("*.py") if f.name != "__init__.py"])) > MAX_MODULES
    }
    assert all(n <= CROWDED.get(d, MAX_MODULES) for d, n in crowded.items()), crowded
    assert set(crowded) <= set(CROWDED), crowded


@pytest.fixture()
def tiny_package(tmp_path: pathlib.Path) -> pathlib.Path:
    """offline_graph-shaped sources with one cycle (data.a <-> data.b, one of them lazy and
    one TYPE_CHECKING-only) and one upward import (env.e -> cli.c, relative)."""
    pkg = tmp_path / "offline_graph"
    for sub in ("", "data", "env", "cli"):
        (pkg / sub).mkdir(exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "data" / "a.py").write_text("def f():\n    from offline_graph.data import b\n")
    (pkg / "data" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from offline_graph.data.a import f\n"
    )
    (pkg / "env" / "e.py").write_text("from ..cli.c import main\nimport offline_graph.data.a\n")
    (pkg / "cli" / "c.py").write_text("from offline_graph.env import e\n")
    return pkg


def test_the_checks_find_lazy_type_only_and_relative_imports(tiny_package: pathlib.Path) -> None:
    graph = import_graph(tiny_package)
    assert graph["offline_graph.data.a"] == {"offline_graph.data.b"}
    assert graph["offline_graph.data.b"] == {"offline_graph.data.a"}
    assert graph["offline_graph.env.e"] == {"offline_graph.cli.c", "offline_graph.data.a"}
    assert sorted(cycles(graph)) == [
        ["offline_graph.cli.c", "offline_graph.env.e"],
        ["offline_graph.data.a", "offline_graph.data.b"],
    ]
    assert upward_imports(graph) == ["offline_graph.env.e -> offline_graph.cli.c"]
