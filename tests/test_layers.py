"""The layers of the tree: the pure core imports no Ray / torch, old module paths still work."""

from __future__ import annotations

import pickle
import pkgutil
import subprocess
import sys
import warnings

import pytest

import offline_graph.data

CORE_MODULES = sorted(
    m.name for m in pkgutil.walk_packages(offline_graph.data.__path__, "offline_graph.data.")
)


def test_core_lists_every_data_module() -> None:
    names = {n.rsplit(".", 1)[1] for n in CORE_MODULES}
    assert {"codec", "collate", "columns", "validation", "transitions", "buffer", "reader"} <= names


def test_core_imports_no_ray_or_torch_in_a_fresh_interpreter() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {CORE_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "heavy = sorted(m for m in ('ray', 'torch', 'torch_geometric') if m in sys.modules)\n"
        "print(','.join(heavy) or 'none')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "none", out.stderr


def test_old_module_paths_forward_to_the_new_homes() -> None:
    from offline_graph.data.graphs.collate import collate
    from offline_graph.data.graphs.spaces import NodeAction

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from offline_graph.collate import collate as old_collate  # type: ignore[attr-defined]
        import offline_graph.spaces as old_spaces  # type: ignore[import-not-found]

        old_node_action = old_spaces.NodeAction
    assert old_collate is collate
    assert old_node_action is NodeAction
    assert [w.category for w in caught] == [DeprecationWarning, DeprecationWarning]
    assert "offline_graph.data.graphs.collate.collate" in str(caught[0].message)


def test_a_pickle_naming_an_old_path_loads() -> None:
    from offline_graph.data.graphs.spaces import NodeAction

    blob = pickle.dumps(NodeAction(7), protocol=0).replace(
        b"offline_graph.data.graphs.spaces", b"offline_graph.spaces"
    )
    assert b"offline_graph.spaces" in blob
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        space = pickle.loads(blob)
    assert type(space) is NodeAction and space == NodeAction(7) and int(space.n) == 7


def test_unknown_name_on_an_old_path_says_where_it_moved() -> None:
    import offline_graph.graph as old_graph  # type: ignore[import-not-found]

    try:
        old_graph.no_such_name  # noqa: B018
    except AttributeError as err:
        assert str(err).startswith(
            "offline_graph.graph: 'no_such_name' must be a name of offline_graph.data.graphs.graph"
        )
    else:
        raise AssertionError("no AttributeError")


def forget_old_paths(monkeypatch: pytest.MonkeyPatch, *paths: str) -> None:
    """Each old path warns on its first use in a process (the name found is kept): drop what an
    earlier test in this worker may have left, so that this test sees every first use."""
    import importlib

    for path in paths:
        monkeypatch.delitem(sys.modules, path, raising=False)
        package, _, name = path.rpartition(".")
        if (
            package in sys.modules
            and name
            and not isinstance(getattr(sys.modules[package], name, None), type(sys))
        ):
            monkeypatch.delattr(sys.modules[package], name, raising=False)
    importlib.invalidate_caches()


def test_rllib_module_paths_from_before_the_sub_packages_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: ``offline_graph.rllib.<module>`` (47 flat modules) -> ``rllib.<room>.<module>``.
    The old flat path, an old submodule of ``reading``, a name on an old module whose path is now
    a sub-package (``rllib.evaluation``, ``rllib.ope``, ``rllib.algorithms``) and a pickled
    class under its old path all give the new object, each with one DeprecationWarning."""
    from offline_graph.rllib.algorithms.offline_algorithms import GraphBC
    from offline_graph.rllib.core.gnn_module import GNNModule
    from offline_graph.rllib.core.settings import GraphSettings
    from offline_graph.rllib.evaluation.evaluate import greedy_actions
    from offline_graph.rllib.offline.reading.base import Reading
    from offline_graph.rllib.ope.estimate import estimate_value

    forget_old_paths(
        monkeypatch,
        "offline_graph.rllib.algorithms.GraphBC",
        "offline_graph.rllib.evaluation.greedy_actions",
        "offline_graph.rllib.ope.estimate_value",
        "offline_graph.rllib.gnn_module",
        "offline_graph.rllib.reading",
        "offline_graph.rllib.reading.base",
        "offline_graph.rllib.settings",
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from offline_graph.rllib.algorithms import GraphBC as old_bc  # type: ignore[attr-defined]
        from offline_graph.rllib.evaluation import greedy_actions as old_greedy  # type: ignore[attr-defined]
        from offline_graph.rllib.gnn_module import GNNModule as old_module  # type: ignore[import-not-found]
        from offline_graph.rllib.ope import estimate_value as old_estimate  # type: ignore[attr-defined]
        from offline_graph.rllib.reading.base import Reading as old_reading  # type: ignore[import-not-found]

        blob = pickle.dumps(GraphSettings, protocol=0).replace(
            b"offline_graph.rllib.core.settings", b"offline_graph.rllib.settings"
        )
        unpickled = pickle.loads(blob)
    assert (old_bc, old_greedy, old_module, old_estimate, old_reading, unpickled) == (
        GraphBC, greedy_actions, GNNModule, estimate_value, Reading, GraphSettings,
    )  # fmt: skip
    assert [w.category for w in caught] == [DeprecationWarning] * 6
    assert "offline_graph.rllib.gnn_module.GNNModule moved to offline_graph.rllib.core.gnn_module" in str(
        caught[2].message
    )


def test_experiment_program_paths_from_before_the_runner_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: ``offline_graph.cli.ma_experiment`` / ``stitch_experiment`` (one program each)
    -> one task spec each under ``offline_graph.cli.experiments``; their ``main`` is the task's."""
    from offline_graph.cli.experiments import stitch, team

    forget_old_paths(monkeypatch, "offline_graph.cli.ma_experiment", "offline_graph.cli.stitch_experiment")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from offline_graph.cli.ma_experiment import main as old_team  # type: ignore[import-not-found]
        from offline_graph.cli.stitch_experiment import main as old_stitch  # type: ignore[import-not-found]
    assert (old_team, old_stitch) == (team.main, stitch.main)
    assert [w.category for w in caught] == [DeprecationWarning] * 2


def test_data_module_paths_from_before_the_sub_packages_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: ``offline_graph.data.<module>`` (30 flat modules) -> ``data.<room>.<module>``;
    a checkpoint's pickled ``NodeAction`` under ``offline_graph.data.spaces`` still loads."""
    from offline_graph.data.graphs.collate import collate
    from offline_graph.data.graphs.spaces import NodeAction

    blob = pickle.dumps(NodeAction(5), protocol=0).replace(
        b"offline_graph.data.graphs.spaces", b"offline_graph.data.spaces"
    )
    forget_old_paths(monkeypatch, "offline_graph.data.collate", "offline_graph.data.spaces")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from offline_graph.data.collate import collate as old_collate  # type: ignore[import-not-found]

        space = pickle.loads(blob)
    assert old_collate is collate and type(space) is NodeAction and space == NodeAction(5)
    assert [w.category for w in caught] == [DeprecationWarning] * 2
