"""GPU path: a collated graph batch on CUDA through the GNN module (skips without CUDA)."""

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from offline_graph import GNNModule
from offline_graph.data.graphs.columns import GraphColumns
from offline_graph.env import GraphEnv
from offline_graph.data.graphs.graph import graph_to_dict
from offline_graph.rllib.offline.collate_fn import GraphCollateFn
from offline_graph.data.learning.transitions import Transitions

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_collated_batch_on_cuda_gives_the_cpu_logits():
    env = GraphEnv()
    env.reset(seed=0)
    graphs = [graph_to_dict(env.step(0)[0], env.edge_dim) for _ in range(32)]
    cols = GraphColumns.from_graphs(graphs, env.edge_dim)
    n = len(graphs)
    tr = Transitions.from_steps(
        cols, np.zeros(n, np.int64), np.zeros(n), np.array([n]), [True], [False], ["e"], 1.0
    )
    batch = GraphCollateFn()(tr.to_arrow(columns=["actions", "x", "edge_index", "edge_attr"]))
    obs_cpu = {k.split("/")[-1]: v for k, v in batch.items() if "/obs/" in k}
    torch.manual_seed(0)
    module = RLModuleSpec(
        module_class=GNNModule,
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config={"hidden": 32},
    ).build()
    cpu = module.forward_inference({Columns.OBS: obs_cpu})[Columns.ACTION_DIST_INPUTS]
    module = module.to("cuda")
    obs_gpu = {k: v.to("cuda") for k, v in obs_cpu.items()}
    gpu = module.forward_inference({Columns.OBS: obs_gpu})[Columns.ACTION_DIST_INPUTS]
    assert gpu.device.type == "cuda" and gpu.shape == (n, env.action_space.n)
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=1e-4)
