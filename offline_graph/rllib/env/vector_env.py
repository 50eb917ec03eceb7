"""``GraphVectorEnv``: N graph envs stepped one after the other, without batching observations.

gymnasium's vector envs (and RLlib's ``SingleAgentEnvRunner``, which builds one with
``gym.make_vec``) stack the sub-envs' observations into one batched structure and RLlib
splits it again with ``unbatch`` (one tree leaf at a time). A ``spaces.Graph`` observation
has no fixed shape to stack: gymnasium returns a tuple of ``GraphInstance``s (NamedTuples),
which ``unbatch`` takes apart field by field, so the observations arrive scrambled.

This vector env returns the observations as a 1-D numpy *object* array (one entry per
sub-env, each the sub-env's own observation, untouched). dm-tree treats an ndarray as a
leaf, so RLlib's ``unbatch`` hands back exactly the N observations. The rest follows
gymnasium 1.x's ``SyncVectorEnv``:

* autoreset ``NEXT_STEP``: the step after a sub-env's episode ended resets it (the action
  is ignored, reward 0, not done), as RLlib's ``SingleAgentEnvRunner`` expects;
* ``reset(seed=s)`` seeds sub-env ``i`` with ``s + i`` (a list gives one seed per sub-env);
* ``observation_space`` / ``action_space`` are gymnasium's batched spaces
  (``Tuple(Graph, ...)``, ``MultiDiscrete``), ``single_*`` the sub-envs' own.

Unlike gymnasium, ``infos`` is a list of the sub-envs' info dicts (the layout RLlib's
``DictInfoToList`` wrapper produces): masks and other per-env arrays of different lengths
stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from offline_graph.data.errors import ConfigError


class GraphVectorEnv(gym.vector.VectorEnv):
    """``len(env_fns)`` sub-envs in this process (see the module docstring)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]):
        if not env_fns:
            raise ConfigError(
                "GraphVectorEnv: env_fns must hold at least one env constructor (found none). "
                "Set config.env_runners(num_envs_per_env_runner=...) to 1 or more."
            )
        self.envs: list[gym.Env] = [fn() for fn in env_fns]
        first = self.envs[0]
        self.num_envs = len(self.envs)
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = dict(getattr(first, "metadata", {}) or {})
        self.metadata["autoreset_mode"] = AutoresetMode.NEXT_STEP
        self.render_mode = getattr(first, "render_mode", None)
        self.spec = getattr(first, "spec", None)
        self._autoreset = np.zeros(self.num_envs, dtype=bool)

    def _seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, (int, np.integer)):
            return [int(seed) + i for i in range(self.num_envs)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ConfigError(
                f"GraphVectorEnv.reset: seed must be an int or a list of {self.num_envs} seeds "
                f"(found a list of {len(seeds)}). Pass one seed per sub-env."
            )
        return seeds

    # infos: a list of per-env dicts (RLlib's layout), not gymnasium's dict of arrays.
    def reset(  # type: ignore[override]
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, list[dict]]:
        """Reset every sub-env: (object array of observations, list of info dicts)."""
        observations = np.empty(self.num_envs, dtype=object)
        infos: list[dict] = []
        for i, (env, env_seed) in enumerate(zip(self.envs, self._seeds(seed))):
            obs, info = env.reset(seed=env_seed, options=options)
            observations[i] = obs
            infos.append(dict(info or {}))
        self._autoreset[:] = False
        return observations, infos

    def step(  # type: ignore[override]
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Step every sub-env with its action (sub-envs done last step are reset instead)."""
        observations = np.empty(self.num_envs, dtype=object)
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        infos: list[dict] = []
        for i, env in enumerate(self.envs):
            if self._autoreset[i]:
                obs, info = env.reset()
            else:
                obs, reward, term, trunc, info = env.step(_action(actions, i))
                rewards[i], terminated[i], truncated[i] = float(reward), bool(term), bool(trunc)
            observations[i] = obs
            infos.append(dict(info or {}))
        self._autoreset = terminated | truncated
        return observations, rewards, terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()


def _action(actions: Any, i: int) -> Any:
    """Sub-env ``i``'s action of a batch (an array or a list), as a Python int when integral."""
    action = actions[i]
    if isinstance(action, np.ndarray) and action.ndim == 0:
        action = action.item()
    elif isinstance(action, np.generic):
        action = action.item()
    return action
