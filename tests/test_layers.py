"""The layers of the tree: the pure core imports no Ray / torch, old module paths still work."""

from __future__ import annotations

import pickle
import pkgutil
import subprocess
import sys
import warnings

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
    from offline_graph.data.collate import collate
    from offline_graph.data.spaces import NodeAction

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from offline_graph.collate import collate as old_collate  # type: ignore[attr-defined]
        import offline_graph.spaces as old_spaces  # type: ignore[import-not-found]

        old_node_action = old_spaces.NodeAction
    assert old_collate is collate
    assert old_node_action is NodeAction
    assert [w.category for w in caught] == [DeprecationWarning, DeprecationWarning]
    assert "offline_graph.data.collate.collate" in str(caught[0].message)


def test_a_pickle_naming_an_old_path_loads() -> None:
    from offline_graph.data.spaces import NodeAction

    blob = pickle.dumps(NodeAction(7), protocol=0).replace(
        b"offline_graph.data.spaces", b"offline_graph.spaces"
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
            "offline_graph.graph: 'no_such_name' must be a name of offline_graph.data.graph"
        )
    else:
        raise AssertionError("no AttributeError")
