"""``offline-graph train``'s settings (:class:`Config`) and their RLlib side: the
BCConfig / MARWILConfig of a :class:`Config`.

Also what building it needs from the data (the first file's offline_graph metadata); Ray Data's
progress logging is quieted by :func:`offline_graph.rllib.core.ray_session.quiet_ray_data`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from offline_graph.cli.arguments import bounded
from offline_graph.data.episodes.reader import OnError
from offline_graph.rllib.evaluation.evaluate import DEFAULT_EVAL_SEED
from offline_graph.rllib.core.settings import Conv

DEFAULT_HOLDOUT = 0.1
"""--holdout when there is no env to evaluate in."""
Algo = Literal["bc", "marwil", "iql", "cql"]
"""The message-passing layers of :mod:`offline_graph.rllib.core.gnn_layers` (its ``CONVS``)."""


@dataclass(frozen=True)
class Config:
    """Settings of one training + evaluation run."""

    algo: Algo
    """Algorithm: bc (behaviour cloning), marwil (advantage-weighted BC; --beta 0 is BC), iql
    (implicit Q-learning) or cql (conservative Q-learning, discrete: masked argmax of Q)."""
    data: str
    """Parquet file or directory of episode files (offline-graph record) or converted
    transition rows (offline-graph convert); the kind is read from the file metadata."""
    checkpoint: str
    """Output directory: RLlib checkpoint (algo.save_to_path), learning_curve.png and
    summary.json."""
    iterations: int = field(default=10, metadata=bounded(1, hint="Train for at least one iteration."))
    """Number of algo.train() calls."""
    num_learners: int = field(default=0, metadata=bounded(0, hint="0 trains in this process."))
    """0: one learner in this process; N >= 1: N remote learners (DDP, N batches per update)."""
    updates_per_iteration: int = 10
    """Learner updates per iteration (RLlib's dataset_num_iters_per_learner; >= 2 with
    --num-learners 0)."""
    eval_episodes: int = field(default=50, metadata=bounded(0, hint="0 skips the evaluation."))
    """Episodes for evaluating the trained module, the expert and the random policy (same
    seeds for all three); 0 skips evaluation."""
    eval_seed: int = DEFAULT_EVAL_SEED
    """Seed of the evaluation episodes. Keep it different from the seed the data was
    recorded with, or the evaluation replays the training graphs."""
    batch_size: int = field(
        default=256, metadata=bounded(1, hint="It is the number of transitions per learner batch.")
    )
    """Transitions per learner batch (train_batch_size_per_learner)."""
    lr: float = field(default=1e-3, metadata=bounded(0.0, hint="It is Adam's learning rate.", low_open=True))
    """Adam learning rate."""
    beta: float | None = field(default=None, metadata=bounded(0.0, hint="0 turns MARWIL into BC."))
    """Advantage temperature: MARWIL's (default 1.0, at most 1; 0 turns MARWIL into BC) or
    IQL's (default 3.0; any value > 0). Not for bc / cql."""
    expectile: float | None = field(
        default=None,
        metadata=bounded(0.0, 1.0, hint="IQL's V is this expectile of Q.", low_open=True, high_open=True),
    )
    """IQL: the expectile of the value loss (default 0.8). Only for iql."""
    cql_alpha: float | None = field(default=None, metadata=bounded(0.0, hint="0 is double DQN."))
    """CQL: weight of the conservative term (RLlib's min_q_weight; default 1.0). Only for cql."""
    reward_scaling: Literal["return_range", "standard", "none"] | None = None
    """IQL / CQL: rewards times one factor measured from the training episodes (return_range,
    the default: 1 / their return range; standard: 1 / the rewards' std; none: as logged).
    Only for iql / cql."""
    tau: float = field(
        default=0.005, metadata=bounded(0.0, 1.0, hint="1 copies every update.", low_open=True)
    )
    """IQL / CQL: Polyak rate of the target Q networks after every gradient step."""
    hidden: int = 64
    """GNN node embedding width."""
    layers: int = 2
    """Number of message-passing layers."""
    conv: Conv | None = None
    """Message-passing layer: gcn, sage, gin or gine (default: gine with edge features, else
    gin)."""
    bag_of_nodes: bool = False
    """Ignore edges (per-node layers + pooling): the structure-blind baseline."""
    graph_only: bool = False
    """Ignore the graph-level parts of a Dict observation space (model_config globals=False):
    the baseline that sees the graph alone."""
    node_types: list[str] | None = None
    """Typed graphs: the node types the module reads (model_config node_types; it then sees
    only those nodes and the edges between them). Default: every node type."""
    frame_stack: int = field(default=1, metadata=bounded(1, hint="1 is one graph per decision."))
    """Stacked frames: the policy at step t sees the graphs of steps t-K+1..t."""
    memory: Literal["gru", "node_gru"] | None = None
    """Recurrent memory: gru (a per-graph state) or node_gru (a per-node state; nodes keep
    their index within an episode)."""
    max_seq_len: int = field(default=20, metadata=bounded(1, hint="It is a number of steps."))
    """With --frame-stack / --memory: trained steps per run; --batch-size then counts runs
    of up to this many steps."""
    seed: int = 0
    """Training seed (RLlib's torch seeds and the prelearner's batch sampling)."""
    on_error: OnError = "raise"
    """Bad episode rows: raise (stop, naming the file/row/episode) or skip (count and go on)."""
    curve: str | None = None
    """Learning-curve PNG path (default: <checkpoint>/learning_curve.png)."""
    num_gpus_per_learner: float = field(default=0, metadata=bounded(0.0, hint="0 trains on CPU."))
    """GPUs per learner (with --num-learners 0: the local learner's GPU)."""
    env: str | None = None
    """Evaluation env id or module:ClassName (default: the env named in the data's metadata;
    none: no env evaluation, offline metrics on held-out episodes instead). Its spaces must
    match the data's."""
    env_config: dict = field(default_factory=dict)
    """Keyword arguments of the env, as a JSON object."""
    observation_space: str | None = None
    """Observation space as compact text, e.g. graph:F=5,D=3 or graph:F=5 (edges without
    features). Default: the data's metadata, the env's, else inferred from the data."""
    action_space: str | None = None
    """Action space as compact text: discrete:K, node:MAX_NODES or edge:MAX_EDGES. Default:
    as --observation-space."""
    holdout: float | None = field(
        default=None,
        metadata=bounded(
            0.0, 1.0, hint="It is the fraction of episodes kept out of training.", high_open=True
        ),
    )
    """Fraction of episodes kept out of training, by a hash of the episode id and
    --holdout-seed; the trained module's action agreement and log-likelihood on them are
    reported (default: 0.1 when there is no env to evaluate in, else 0)."""
    holdout_seed: int = 0
    """Seed of the held-out split."""
    num_cpus: int | None = None
    """CPUs for ray.init when this script starts Ray (default: all)."""
    checkpoint_every: int = field(default=0, metadata=bounded(0, hint="0 saves only at the end."))
    """Save the algorithm every K iterations into --checkpoint (resumable with --resume)."""
    resume: bool = False
    """Continue from --checkpoint's last periodic checkpoint to --iterations (same flags)."""
    select_by: Literal["fqe", "wis", "pdis", "dr"] | None = None
    """Keep the checkpoint with the best off-policy estimate (offline_graph.estimate_value) of
    this method: estimated at every --checkpoint-every K iterations and at the end, on the
    --holdout episodes (else the training episodes: in-sample, with a warning); --checkpoint
    then holds the best one (summary.json: selection). Needs --checkpoint-every."""
    select_gamma: float | None = field(
        default=None, metadata=bounded(0.0, 1.0, hint="1.0 estimates the undiscounted return.")
    )
    """With --select-by: the estimate's discount (default: the algorithm's gamma)."""
    select_epochs: int | None = field(default=None, metadata=bounded(1, hint="It is a number of epochs."))
    """With --select-by fqe or dr: FQE epochs per estimate (default 10)."""
    select_explore: bool = False
    """With --select-by: estimate the module's sampling distribution instead of its greedy
    action (the greedy policy of a deterministic target gets no IS weight from logs that
    never follow it for a whole episode)."""
    torch_threads: int = field(default=1, metadata=bounded(0, hint="0 leaves torch's default."))
    """torch intra-op threads of this process, where the local learner (--num-learners 0)
    and the evaluation run (0 leaves torch's default). Batches are small; on a shared 2-CPU
    machine two spinning threads per process made iterations up to ~8x slower."""
    multi_agent: bool = False
    """Multi-agent episode files (offline-graph record of an RLlib MultiAgentEnv): one GNN
    module per module id, each with the spaces of its agents (the metadata's agent_spaces, or
    --module-spaces); see offline_graph.cli.ma_train."""
    policy_mapping: str | None = None
    """With --multi-agent: module:function mapping an agent id to a module id (RLlib's
    policy_mapping_fn(agent_id, episode, **kw)); default: the module ids recorded with the
    agents (else default_policy)."""
    modules: list[str] | None = None
    """With --multi-agent: the module ids to build (a,b or a b; default: every module the
    data's agents map to)."""
    train_modules: list[str] | None = None
    """With --multi-agent: the module ids to train (RLlib's policies_to_train; default: all)."""
    eval_interval: int = field(default=0, metadata=bounded(0, hint="0 evaluates only at the end."))
    """With --multi-agent and an env: RLlib's own evaluation every K iterations
    (config.evaluation(evaluation_interval=K), --eval-episodes greedy episodes on
    GraphMultiAgentEnvRunner); each module's return per evaluated iteration goes into the
    history (eval_return) and the curve."""
    module_spaces: dict = field(default_factory=dict)
    """With --multi-agent: per-module spaces as a JSON object {module_id: {"observation_space":
    text, "action_space": text}} (default: from the spaces of the agents mapped to it)."""


def data_metadata(files: Any) -> dict[str, Any]:
    """The offline_graph metadata of the first file (env, policy, seed, kind, ...); of an
    input resolved already (:class:`~offline_graph.env.data_input.DataInput`, a ``FileScan``):
    the metadata its scan read, no file opened again."""
    from offline_graph.data.store.format import read_file_metadata

    scan = getattr(files, "scan", files)
    if not isinstance(scan, (list, tuple)):
        return dict(scan.metadata or {})
    return read_file_metadata(files[0]) if files else {}


def build_config(cfg: Config, kind: str, observation_space: Any, action_space: Any, data: Any = None) -> Any:
    """The configured BCConfig / MARWILConfig for ``cfg`` (via ``offline_graph.configure``;
    ``data``: ``cfg.data`` resolved already, not listed again)."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from offline_graph.rllib.core.gnn_module import GNNModule

    config, model_config = algo_config(cfg)
    config = (
        config.environment(observation_space=observation_space, action_space=action_space)
        .offline_data(input_=[cfg.data], input_read_episodes=(kind == "episodes"))
        .rl_module(rl_module_spec=RLModuleSpec(module_class=GNNModule, model_config=model_config))
    )
    return configure(cfg, config, data)


def algo_config(cfg: Config) -> tuple[Any, dict[str, Any]]:
    """The unconfigured RLlib config of ``cfg`` (algorithm, training, learners, seed, updates
    per iteration, ``GraphOfflinePreLearner``; no data, spaces or modules yet) and the
    ``model_config`` of its GNN module(s)."""
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.algorithms.cql import CQLConfig
    from ray.rllib.algorithms.iql import IQLConfig
    from ray.rllib.algorithms.marwil import MARWILConfig

    from offline_graph.rllib.offline.prelearner import GraphOfflinePreLearner

    model_config: dict[str, Any] = {
        "hidden": cfg.hidden,
        "layers": cfg.layers,
        "bag_of_nodes": cfg.bag_of_nodes,
    }
    if cfg.conv is not None:
        model_config["conv"] = cfg.conv
    if cfg.graph_only:
        model_config["globals"] = False
    if cfg.node_types is not None:
        model_config["node_types"] = list(cfg.node_types)
    if cfg.frame_stack > 1 or cfg.memory:
        model_config.update(frame_stack=cfg.frame_stack, memory=cfg.memory, max_seq_len=cfg.max_seq_len)
    config: Any = {"bc": BCConfig, "marwil": MARWILConfig, "iql": IQLConfig, "cql": CQLConfig}[cfg.algo]()
    training: dict[str, Any] = {"train_batch_size_per_learner": cfg.batch_size, "lr": cfg.lr}
    if cfg.algo == "marwil":
        training["beta"] = 1.0 if cfg.beta is None else cfg.beta
        model_config["beta"] = training["beta"]
    if cfg.algo in ("iql", "cql"):  # their own learning rates (RLlib's lr is unused)
        training.update(lr=None, critic_lr=cfg.lr, tau=cfg.tau)
    if cfg.algo == "iql":
        training.update(actor_lr=cfg.lr, value_lr=cfg.lr, beta=3.0 if cfg.beta is None else cfg.beta)
        training["expectile"] = 0.8 if cfg.expectile is None else cfg.expectile
    if cfg.algo == "cql":
        training["min_q_weight"] = 1.0 if cfg.cql_alpha is None else cfg.cql_alpha
    config = (
        config.offline_data(
            prelearner_class=GraphOfflinePreLearner,
            dataset_num_iters_per_learner=cfg.updates_per_iteration,
        )
        .training(**training)
        .learners(num_learners=cfg.num_learners, num_gpus_per_learner=cfg.num_gpus_per_learner)
        .debugging(seed=cfg.seed)
    )
    return config, model_config


def configure(cfg: Config, config: Any, data: Any = None) -> Any:
    """``offline_graph.configure(config)`` with ``cfg``'s error mode, seed and holdout
    (``data``: the input resolved already, a ``DataInput`` or ``FileScan``)."""
    import offline_graph

    return offline_graph.configure(
        config,
        data=data,
        on_error=cfg.on_error,
        seed=cfg.seed,
        holdout=cfg.holdout or 0.0,
        holdout_seed=cfg.holdout_seed,
        reward_scaling=cfg.reward_scaling,
    )
