"""Writing a ``model_config`` key where RLlib reads it (the RLModuleSpec's or the config's),
shared by ``offline_graph.configure`` and ``configure_online``."""

from __future__ import annotations

from typing import Any


def set_model_option(cfg: Any, key: str, value: Any, *, keep_user: bool) -> None:
    """Write ``model_config[key]`` where RLlib reads it: the RLModuleSpec's ``model_config``
    when that is a dict, else the config's ``model_config``. ``keep_user``: a value the user
    set stays."""
    spec: Any = getattr(cfg, "_rl_module_spec", None)
    in_spec = isinstance(getattr(spec, "model_config", None), dict)
    model_config = spec.model_config if in_spec else dict(getattr(cfg, "_model_config", {}) or {})
    if keep_user:
        model_config.setdefault(key, value)
    else:
        model_config[key] = value
    if not in_spec:
        cfg.rl_module(model_config=model_config)


def default_graph_module(cfg: Any) -> None:
    """A config without an RLModule class of the user's gets :class:`~offline_graph.GNNModule`
    (with the ``model_config`` of an ``RLModuleSpec`` that names no class): RLlib's default
    modules cannot read graph observations (``ValueError: No default encoder config for obs
    space=Graph(...)`` at ``build_algo()``). A class the user chose is kept."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.rllib.core.gnn_module import GNNModule

    spec = getattr(cfg, "_rl_module_spec", None)
    if spec is None:
        cfg.rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule))
    elif isinstance(spec, RLModuleSpec) and spec.module_class is None:
        spec.module_class = GNNModule
