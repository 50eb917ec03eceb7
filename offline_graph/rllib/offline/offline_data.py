"""``GraphOfflineData``: RLlib's ``OfflineData`` without shipping module weights to the
prelearner actors when nothing there uses them.

RLlib's ``OfflineData.sample`` fetches the *whole* ``MultiRLModule`` state from the first
learner and passes it to every prelearner actor (``fn_constructor_kwargs``), so each actor
holds every module's weights, K league policies included, and never refreshes them. Our
prelearner computes value targets from the data (returns-to-go), not with a value net, so the
weights are needed only when user learner-connector pieces run there
(``config.training(learner_connector=...)``); otherwise :data:`NO_MODULE_STATE` is passed
instead. ``offline_graph.configure`` sets this class unless the config names its own.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.offline.offline_data import OfflineData

NO_MODULE_STATE = {"offline_graph": "no module state: the prelearner builds no RLModule from it"}
"""The ``module_state`` the prelearner actors receive when they do not use module weights."""


def needs_module_state(config: Any) -> bool:
    """True when user learner-connector pieces run in the prelearner (they may read the module)."""
    return getattr(config, "_learner_connector", None) is not None


class GraphOfflineData(OfflineData):
    """``OfflineData`` that ships module weights to prelearner actors only when they use them."""

    def sample(  # type: ignore[override]
        self,
        num_samples: int,
        return_iterator: bool = False,
        num_shards: int = 1,
        module_state: dict[str, Any] | None = None,
    ) -> Any:
        if module_state is None and not self.data_is_mapped and not needs_module_state(self.config):
            module_state = NO_MODULE_STATE
        return super().sample(
            num_samples,
            return_iterator=return_iterator,
            num_shards=num_shards,
            module_state=module_state,  # type: ignore[arg-type]  # RLlib defaults it to None
        )
