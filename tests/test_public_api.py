"""``offline_graph``'s public names: each resolves, lazily (``import offline_graph`` is light)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import offline_graph


def test_every_public_name_resolves_to_its_home() -> None:
    assert len(offline_graph.__all__) == len(set(offline_graph.__all__)) == 44
    assert set(offline_graph.__all__) == set(offline_graph._EXPORTS)
    for name in offline_graph.__all__:
        home = importlib.import_module(offline_graph._EXPORTS[name])
        assert getattr(offline_graph, name) is getattr(home, name), name
        assert name in dir(offline_graph)
    from offline_graph.data.errors import ConfigError
    from offline_graph.rllib.algorithms.offline_algorithms import GraphBC
    from offline_graph.rllib.algorithms.value_algorithms import GraphIQL

    assert offline_graph.ConfigError is ConfigError and offline_graph.GraphBC is GraphBC
    assert offline_graph.GraphIQL is GraphIQL
    assert issubclass(offline_graph.ConfigError, offline_graph.OfflineGraphError)
    assert issubclass(offline_graph.StorageError, offline_graph.OfflineGraphError)


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        offline_graph.no_such_name  # noqa: B018
    except AttributeError as err:
        assert str(err) == "module 'offline_graph' has no attribute 'no_such_name'"
    else:
        raise AssertionError("no AttributeError")


def test_import_offline_graph_loads_no_ray_or_torch() -> None:
    code = (
        "import sys, offline_graph\n"
        "print(','.join(m for m in ('ray', 'torch', 'torch_geometric') if m in sys.modules) or 'none')\n"
        "offline_graph.ConfigError\n"
        "print(','.join(m for m in ('ray', 'torch') if m in sys.modules) or 'none')\n"
        "offline_graph.configure\n"
        "print(','.join(m for m in ('ray', 'torch') if m in sys.modules) or 'none')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # Nothing heavy on import, nor for an error class; the RLlib glue brings Ray and torch.
    assert out.stdout.split() == ["none", "none", "ray,torch"], out.stderr
