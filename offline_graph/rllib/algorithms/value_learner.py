"""``GraphValueTorchLearner``: the IQL and CQL losses for graph modules (discrete, node and
edge actions, masked), set by ``offline_graph.configure`` for ``IQLConfig`` / ``CQLConfig``.

The batch is a value-run batch (:mod:`offline_graph.data.learning.value_runs`); the module's training
forward (:func:`offline_graph.rllib.core.critic.value_train_outputs`) encodes its graphs once per
network. With ``T`` trained transitions ``(s, a, r, s', terminated)``:

IQL (Kostrikov et al. 2021), ``Q_t`` the minimum of the target heads at ``(s, a)``:

- value:  ``mean(|expectile - 1[u < 0]| * u^2)``, ``u = Q_t - V(s)``;
- critic: ``mean((Q_h(s, a) - y)^2)`` summed over the heads, ``y = r + gamma (1 - terminated)
  V(s')`` (bootstraps through truncation: ``s'`` is the stored final observation);
- actor:  ``-mean(min(exp(beta * A), 100) * log pi(a | s))`` (``beta > 1`` allowed), ``A = (Q_t -
  V(s)) / max(1, std)`` with ``std`` the advantages' standard deviation over the batch
  (``advantage_norm="shrink_std"``, the default: :func:`advantage_weights`), ``A = (Q_t - V(s)) /
  std`` (``"batch_std"``) or ``A = Q_t - V(s)`` as in the paper (``"none"``).

CQL (discrete; Kumar et al. 2020), one Q network and its target:

- TD: ``mean((Q(s, a) - y)^2)``, ``y = r + gamma (1 - terminated) Q_target(s', a*)`` with
  ``a* = argmax`` of the online Q over the legal choices of ``s'`` (double DQN);
- conservative term: ``min_q_weight * mean(logsumexp_a Q(s, a) - Q(s, a_data))`` over the
  legal actions; the greedy policy is the masked argmax of Q.

Masked and missing choices are ``finfo.min`` (never chosen, never the max, 0 in a
logsumexp); an ``s'`` without a legal choice bootstraps 0. Target networks follow the online
ones by Polyak averaging with ``config.tau`` after every gradient step (``tau=1``: a copy).

Rewards arrive scaled (``settings.reward_scale``, :mod:`offline_graph.data.learning.reward_scale`):
the losses work in those units; ``q_mean`` is reported in the logged reward's units
(divided by the scale), ``q_mean_trained`` as trained.

Optimizers: IQL ``policy`` (policy encoder and head, ``actor_lr``), ``critic`` (Q encoder and
heads, ``critic_lr``), ``value`` (the V head, ``value_lr``); CQL one for the Q network
(``critic_lr``).
"""

from __future__ import annotations

from typing import Any, Dict

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.torch_utils import update_target_network
from ray.rllib.utils.typing import ModuleID, ParamDict

from offline_graph.rllib.algorithms.learners import CachedBlocks
from offline_graph.rllib.core.critic import masked_argmax, masked_logsumexp, pick
from offline_graph.rllib.core.heap import KeptHeap
from offline_graph.rllib.core.settings import GraphSettings, read_settings

ADV_WEIGHT_MAX = 100.0
"""IQL's clip of ``exp(beta * advantage)`` (the paper's)."""
ADVANTAGE_NORMS = ("shrink_std", "batch_std", "none")
"""IQL actor's advantage normalisation (``configure(advantage_norm=...)``), the default first."""
ADV_STD_FLOOR = {"shrink_std": 1.0, "batch_std": 1e-6}
"""The least batch std an advantage is divided by: ``shrink_std`` never enlarges an
advantage (only a spread above one trained reward unit is shrunk to it), ``batch_std`` always
brings the spread to 1 (1e-6: a batch of equal advantages)."""


def advantage_weights(adv: torch.Tensor, beta: float, norm: str = "none") -> torch.Tensor:
    """IQL's actor weights ``min(exp(beta * A), 100)`` of the advantages ``adv`` ``[T]`` (no
    gradient): ``A = adv / max(std(adv), floor)`` over the batch (population std; floor
    :data:`ADV_STD_FLOOR` of ``norm``; a single advantage is left as it is), ``A = adv`` for
    ``"none"``."""
    adv = adv.detach()
    if norm in ADV_STD_FLOOR and adv.numel() > 1:
        adv = adv / adv.std(unbiased=False).clamp(min=ADV_STD_FLOOR[norm])
    elif norm not in ADVANTAGE_NORMS:
        raise ValueError(
            f"advantage_weights: norm must be one of {ADVANTAGE_NORMS} (found {norm!r}). "
            "Set it with offline_graph.configure(config, advantage_norm=...)."
        )
    return torch.clamp(torch.exp(beta * adv), max=ADV_WEIGHT_MAX)


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """``mean(|expectile - 1[diff < 0]| * diff^2)``."""
    weight = torch.where(diff > 0, torch.full_like(diff, expectile), torch.full_like(diff, 1.0 - expectile))
    return (weight * diff.pow(2)).mean()


class GraphValueTorchLearner(CachedBlocks, KeptHeap, TorchLearner):  # type: ignore[misc]
    """IQL / CQL losses of graph modules (see the module doc)."""

    def configure_optimizers_for_module(self, module_id: ModuleID, config: Any = None) -> None:
        module = self._graph_module(module_id)
        kind = module.gnn_config["value_based"]
        groups: dict[str, tuple[list[Any], Any]]
        if kind == "cql":
            groups = {"qf": (list(self.get_parameters(module._q)), config.critic_lr)}
        else:
            critic = module._critic

            def params(part: Any) -> list[Any]:
                return list(self.get_parameters(part))

            groups = {
                "policy": (params(module._encoder) + params(module._pi_head), config.actor_lr),
                "critic": (params(critic.encoder) + params(critic.q_heads), config.critic_lr),
                "value": (params(critic.v_head), config.value_lr),
            }
        for name, (group, lr) in groups.items():
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=name,
                optimizer=torch.optim.Adam(group),
                params=group,
                lr_or_lr_schedule=lr,
            )

    def _graph_module(self, module_id: ModuleID) -> Any:
        """The (unwrapped, non-DDP) GNNModule ``module_id``."""
        modules: Any = self._module
        return modules[module_id].unwrapped()

    def compute_loss_for_module(
        self, *, module_id: ModuleID, config: Any, batch: Dict[str, Any], fwd_out: Dict[str, Any]
    ) -> torch.Tensor:
        module = self._graph_module(module_id)
        if module.gnn_config["value_based"] == "cql":
            losses = cql_losses(fwd_out, batch, float(config.gamma), float(config.min_q_weight))
        else:
            dist = module.get_train_action_dist_cls().from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
            logp = dist.logp(batch[Columns.ACTIONS].long())
            args = (float(config.gamma), float(config.beta), float(config.expectile))
            losses = iql_losses(fwd_out, batch, logp, *args, self._settings().advantage_norm)
        scale = self._reward_scale()
        losses["q_mean_trained"] = losses["q_mean"]
        losses["q_mean"] = losses["q_mean"] / scale  # in the logged reward's units
        self.metrics.log_dict(losses, key=module_id, window=1)
        return losses["total_loss"]

    def _settings(self) -> GraphSettings:
        if not hasattr(self, "_graph_settings"):
            self._graph_settings = read_settings(self.config, "GraphValueTorchLearner")
        return self._graph_settings

    def _reward_scale(self) -> float:
        """The factor the prelearner multiplied the logged rewards by (1: none)."""
        return float(self._settings().reward_scale.get("scale", 1.0))

    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        super().apply_gradients(gradients_dict)
        for module_id in self.module.keys():
            module = self._graph_module(module_id)
            config: Any = self.config.get_config_for_module(module_id)
            tau = float(config.tau)
            for online, target in module.target_network_pairs():
                update_target_network(main_net=online, target_net=target, tau=tau)


def _step_columns(batch: Dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(actions long, rewards float, 1 - terminated float) ``[T]``."""
    return (
        batch[Columns.ACTIONS].long(),
        batch[Columns.REWARDS].float(),
        1.0 - batch[Columns.TERMINATEDS].float(),
    )


def iql_losses(
    fwd_out: Dict[str, Any],
    batch: Dict[str, Any],
    logp: torch.Tensor,
    gamma: float,
    beta: float,
    expectile: float,
    advantage_norm: str = "none",
) -> dict[str, torch.Tensor]:
    """IQL's value, critic and actor losses (module doc) from the training forward's outputs
    and ``logp`` = log pi(a | s) of the rows' actions; ``advantage_norm``: :func:`advantage_weights`."""
    actions, rewards, alive = _step_columns(batch)
    q_sa = pick(fwd_out["q"], actions.expand(fwd_out["q"].shape[0], -1))  # [H, T]
    q_t = pick(fwd_out["q_target"], actions)
    value_loss = expectile_loss(q_t - fwd_out["v"], expectile)
    weights = advantage_weights(q_t - fwd_out["v"], beta, advantage_norm)
    actor_loss = -(weights * logp).mean()
    target = (rewards + gamma * alive * fwd_out["v_next"]).detach()
    critic_loss = (q_sa - target.unsqueeze(0)).pow(2).mean(dim=-1).sum()
    return {
        POLICY_LOSS_KEY: actor_loss,
        "qf_loss": critic_loss,
        "vf_loss": value_loss,
        "q_mean": q_sa.mean().detach(),
        "adv_weight_mean": weights.mean(),
        "adv_std": (q_t - fwd_out["v"]).detach().std(unbiased=False),
        "total_loss": value_loss + actor_loss + critic_loss,
    }


def cql_losses(
    fwd_out: Dict[str, Any], batch: Dict[str, Any], gamma: float, min_q_weight: float
) -> dict[str, torch.Tensor]:
    """Discrete CQL's TD (double DQN over the legal choices of s') and conservative losses."""
    actions, rewards, alive = _step_columns(batch)
    q = fwd_out["q"][0]
    q_sa = pick(q, actions)
    best = masked_argmax(fwd_out["q_next"])
    has_legal = pick(fwd_out["q_next"], best) > torch.finfo(q.dtype).min
    q_next = torch.where(has_legal, pick(fwd_out["q_next_target"], best), torch.zeros_like(rewards))
    target = (rewards + gamma * alive * q_next).detach()
    td_loss = (q_sa - target).pow(2).mean()
    cql_loss = (masked_logsumexp(q) - q_sa).mean()
    return {
        "qf_loss": td_loss,
        "cql_loss": cql_loss,
        "q_mean": q_sa.mean().detach(),
        "total_loss": td_loss + min_q_weight * cql_loss,
    }
