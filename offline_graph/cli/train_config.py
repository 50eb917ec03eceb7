"""The RLlib side of ``offline-graph train``: the BCConfig / MARWILConfig of a :class:`Config`.

Also what building it needs from the data (the first file's offline_graph metadata) and the
quieting of Ray Data's progress logging.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from offline_graph.cli.train import Config


def data_metadata(files: list[str]) -> dict[str, Any]:
    """The offline_graph metadata of the first file (env, policy, seed, kind, ...)."""
    from offline_graph.data.format import read_file_metadata

    return read_file_metadata(files[0]) if files else {}


def build_config(cfg: Config, kind: str, observation_space: Any, action_space: Any) -> Any:
    """The configured BCConfig / MARWILConfig for ``cfg`` (via ``offline_graph.configure``)."""
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.algorithms.marwil import MARWILConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import offline_graph
    from offline_graph.rllib.gnn_module import GNNModule
    from offline_graph.rllib.prelearner import GraphOfflinePreLearner

    model_config: dict[str, Any] = {
        "hidden": cfg.hidden,
        "layers": cfg.layers,
        "bag_of_nodes": cfg.bag_of_nodes,
    }
    if cfg.conv is not None:
        model_config["conv"] = cfg.conv
    if cfg.frame_stack > 1 or cfg.memory:
        model_config.update(frame_stack=cfg.frame_stack, memory=cfg.memory, max_seq_len=cfg.max_seq_len)
    config = BCConfig() if cfg.algo == "bc" else MARWILConfig()
    training: dict[str, Any] = {"train_batch_size_per_learner": cfg.batch_size, "lr": cfg.lr}
    if cfg.algo == "marwil":
        training["beta"] = 1.0 if cfg.beta is None else cfg.beta
        model_config["beta"] = training["beta"]
    config = (
        config.environment(observation_space=observation_space, action_space=action_space)
        .offline_data(
            input_=[cfg.data],
            input_read_episodes=(kind == "episodes"),
            prelearner_class=GraphOfflinePreLearner,
            dataset_num_iters_per_learner=cfg.updates_per_iteration,
        )
        .training(**training)
        .learners(num_learners=cfg.num_learners, num_gpus_per_learner=cfg.num_gpus_per_learner)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config=model_config))
        .debugging(seed=cfg.seed)
    )
    return offline_graph.configure(
        config,
        on_error=cfg.on_error,
        seed=cfg.seed,
        holdout=cfg.holdout or 0.0,
        holdout_seed=cfg.holdout_seed,
    )


def quiet_ray_data() -> None:
    """Ray Data's progress logging floods the per-iteration lines; keep warnings only."""
    try:
        from ray.data import DataContext

        ctx = DataContext.get_current()
        ctx.enable_progress_bars = False
        for attr in ("enable_operator_progress_bars", "print_on_execution_start"):
            if hasattr(ctx, attr):
                setattr(ctx, attr, False)
    except Exception:  # noqa: BLE001, S110 (only cosmetics)
        pass
    for name in ("ray.data", "ray.rllib", "ray.tune"):
        logging.getLogger(name).setLevel(logging.WARNING)
