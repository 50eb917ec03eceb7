"""The BC / MARWIL learner ``configure`` sets (``offline_graph.rllib.algorithms.learners``):
RLlib's ``MARWILTorchLearner`` with one finiteness check of all gradients per update. The
same gradients give the same parameters as RLlib's own learner, finite or not (RLlib zeroes a
nan / inf gradient and warns); a learner class the user set is kept."""

from __future__ import annotations

import os

import pytest
import torch
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.algorithms.marwil import MARWILConfig
from ray.rllib.algorithms.marwil.torch.marwil_torch_learner import MARWILTorchLearner

import offline_graph
from offline_graph.rllib.algorithms.learners import GraphMARWILTorchLearner

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "sample_data", "expert")


def _config(cls):
    config = cls().offline_data(input_=[SAMPLE], input_read_episodes=True).learners(num_learners=0)
    return offline_graph.configure(config.training(train_batch_size_per_learner=8, lr=0.1))


@pytest.mark.parametrize("cls", [BCConfig, MARWILConfig])
def test_configure_sets_the_one_sync_learner_and_keeps_a_users(cls):
    assert _config(cls).learner_class is GraphMARWILTorchLearner

    class Own(MARWILTorchLearner):
        pass

    config = cls().offline_data(input_=[SAMPLE], input_read_episodes=True).learners(learner_class=Own)
    assert offline_graph.configure(config).learner_class is Own


@pytest.mark.parametrize("bad", [None, float("nan"), float("inf")])
def test_one_sync_applies_what_rllib_applies(bad):
    config = _config(BCConfig)
    ours = config.build_learner()
    theirs = config.copy(copy_frozen=False).learners(learner_class=MARWILTorchLearner).build_learner()
    theirs.set_state(ours.get_state())
    assert type(ours) is GraphMARWILTorchLearner and type(theirs) is MARWILTorchLearner
    torch.manual_seed(0)
    grads = [torch.randn_like(p) for p in ours._params.values()]
    if bad is not None:
        grads[0].view(-1)[0] = bad  # RLlib: that gradient zeroed where not finite, then a step
    initial = [p.detach().clone() for p in ours._params.values()]
    ours.apply_gradients(dict(zip(ours._params, [g.clone() for g in grads])))
    theirs.apply_gradients(dict(zip(theirs._params, [g.clone() for g in grads])))
    for p, q in zip(ours._params.values(), theirs._params.values()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
        assert torch.isfinite(p).all()
    assert ours.config.torch_skip_nan_gradients is False  # put back after the call
    assert all(not torch.equal(p, p0) for p, p0 in zip(ours._params.values(), initial))  # a step
