"""Per-episode states for modules with memory, through RLlib's stateful-module API (used by
:func:`offline_graph.rllib.evaluation.evaluate.greedy_actions` to act step by step).

A module with ``frame_stack > 1`` or ``memory`` (``module.is_stateful()``) keeps a state per
episode: ``get_initial_state()`` at the episode's start, then each step's
``forward_inference({OBS: ..., STATE_IN: ...})`` returns ``STATE_OUT``, the next step's
``STATE_IN``. Frame stacks and graph GRU states have a fixed shape per episode and are stacked
``[B, ...]``; a ``node_gru`` state is ragged (``[N, H]``, one row per node of the episode's
last graph): it is carried into the next step when that graph has the same node count (nodes
keep their index) and rebuilt from zeros otherwise, and the batch's states are concatenated
in the node layout of the current step (``[sumN, H]``), never padded.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from offline_graph.data.graphs.graph import GraphDict

NODE_STATE = "node_h"


def align_node_state(prev: Any, n: int) -> Any:
    """An episode's previous ``node_h`` rows ``[N', H]`` for a graph of ``n`` nodes: kept when
    ``N' == n`` (nodes keep their index), else zeros ``[n, H]`` (torch or numpy, as given)."""
    if prev.shape[0] == n:
        return prev
    if isinstance(prev, np.ndarray):
        return np.zeros((n, prev.shape[1]), dtype=prev.dtype)
    return prev.new_zeros((n, prev.shape[1]))


def is_stateful(module: Any) -> bool:
    """True for modules that keep a state between steps (RLlib's ``is_stateful``)."""
    check = getattr(module, "is_stateful", None)
    return bool(check()) if callable(check) else False


class StepStates:
    """Per-slot (one running episode per slot) states of a stateful module."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.states: dict[int, dict[str, Any]] = {}

    def reset(self, slot: int) -> None:
        """A new episode in ``slot``: RLlib's initial state."""
        self.states[slot] = {k: v.detach().cpu() for k, v in self.module.get_initial_state().items()}

    def batch(self, slots: Sequence[int], observations: Sequence[GraphDict], device: Any) -> dict[str, Any]:
        """``STATE_IN`` for the current step of ``slots`` (in this order)."""
        import torch

        out: dict[str, Any] = {}
        keys = self.states[slots[0]].keys()
        for key in keys:
            if key == NODE_STATE:
                parts = [
                    align_node_state(self.states[slot][key], int(np.shape(obs["x"])[0]))
                    for slot, obs in zip(slots, observations)
                ]
                out[key] = torch.cat(parts).to(device)
            else:
                out[key] = torch.stack([self.states[s][key] for s in slots]).to(device)
        return out

    def update(
        self, slots: Sequence[int], observations: Sequence[GraphDict], state_out: dict[str, Any]
    ) -> None:
        """Keep each slot's ``STATE_OUT`` for its next step."""
        counts = [int(np.shape(obs["x"])[0]) for obs in observations]
        for key, value in state_out.items():
            value = value.detach().cpu()
            if key == NODE_STATE:
                pieces = list(value.split(counts))
            else:
                pieces = list(value)
            for slot, piece in zip(slots, pieces):
                self.states[slot][key] = piece
