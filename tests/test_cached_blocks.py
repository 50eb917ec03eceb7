"""One remote learner iterates the materialized data from its cache (CachedBlocks): what RLlib
hands it, ``dataset.iterator()`` pickled to the learner's process, has lost Ray Data's
execution cache, so every epoch started a streaming executor again."""

import pickle
from types import SimpleNamespace

import pytest

from offline_graph.rllib.algorithms.learners import CachedBlocks

pytestmark = [pytest.mark.usefixtures("ray_session")]


class RLlibLearner:
    """Stands in for RLlib's ``Learner._create_iterator_if_necessary``: the first iterator."""

    def _create_iterator_if_necessary(self, *, training_data, **kwargs):
        return training_data.data_iterators[0]


class Probe(CachedBlocks, RLlibLearner):
    def __init__(self, num_learners, materialized):
        self.config = SimpleNamespace(num_learners=num_learners, materialize_mapped_data=materialized)
        self.iterator = None


def shipped_iterator(ds):
    """The iterator as a remote learner receives it (pickled by Ray)."""
    return pickle.loads(pickle.dumps(ds.iterator()))


def starts_an_executor(it):
    """Does a new epoch of ``it`` start a Ray Data executor (no cached blocks)?"""
    return it._base_dataset._execute_to_iterator()[2] is not None


def test_one_remote_learner_iterates_the_cached_blocks():
    import ray

    ds = ray.data.range(100, override_num_blocks=4).materialize()
    shipped = shipped_iterator(ds)
    assert starts_an_executor(shipped)  # what made each epoch cost ~27 ms in the learner
    it = Probe(1, True)._create_iterator_if_necessary(training_data=SimpleNamespace(data_iterators=[shipped]))
    assert it is not shipped and not starts_an_executor(it)
    # the blocks of ds in ds's order (materialize keeps them in the order its tasks finished,
    # not always 0..99): every row once, in that order, in each of two epochs
    order = [r["id"] for r in ds.iter_rows()]
    assert sorted(order) == list(range(100))
    for _ in range(2):
        assert [r["id"] for r in it.iter_rows()] == order


@pytest.mark.parametrize("num_learners, materialized", [(0, True), (2, True), (1, False)])
def test_other_learners_keep_rllibs_iterator(num_learners, materialized):
    import ray

    shipped = shipped_iterator(ray.data.range(10).materialize())
    data = SimpleNamespace(data_iterators=[shipped])
    assert Probe(num_learners, materialized)._create_iterator_if_necessary(training_data=data) is shipped
