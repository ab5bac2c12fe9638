"""The collector of online training: steps the vector of environments with the agent's
(ε-greedy or random) actions and writes every env step as a replay row."""

from __future__ import annotations

import numpy as np
from gymnasium.vector import VectorEnv

from wmzoo.data import Replay
from wmzoo.envs.vector import action_samplers
from wmzoo.interfaces import map_obs
from wmzoo.train.agent import Agent


class Collector:
    """Steps a vector of ``N`` environments with the agent and writes one replay row per env step.

    ``envs`` is a Gymnasium vector env that resets an environment in the step that ends its
    episode (:func:`wmzoo.envs.vector.make_vector_env`); worker ``i``'s rows go to replay stream
    ``i``. Random actions come from per-env action spaces seeded ``seed + i`` here, so the rows do
    not depend on whether the environments run in this process or in their own.
    """

    def __init__(self, envs: VectorEnv, agent: Agent, replay: Replay, seed: int) -> None:
        self.envs, self.agent, self.replay = envs, agent, replay
        n = envs.num_envs
        self.samplers = action_samplers(envs, seed)
        self.epsilon = agent.policy.spec.epsilon
        self.rng = np.random.default_rng(seed)
        self.obs, _ = envs.reset(seed=[seed + i for i in range(n)])
        self.is_first = np.ones(n, bool)
        self.returns = np.zeros(n)
        self.lengths = np.zeros(n, int)
        agent.reset_acting()

    def step(self, random: bool) -> list[tuple[float, int]]:
        """One step of every env; returns (return, length) of the episodes that ended.

        ``random``: every action uniformly random (prefill); otherwise the policy's, each
        replaced by a random one with the policy spec's ``epsilon`` chance (ε-greedy)."""
        n = self.envs.num_envs
        if random or self.epsilon == 0:
            explore = np.full(n, random)
        else:
            explore = self.rng.random(n) < self.epsilon
        forced = np.stack([space.sample() for space in self.samplers]) if explore.any() else None
        actions = self.agent.act(self.obs, self.is_first, actions=forced, override=None if random else explore)
        obs, rewards, terminated, truncated, info = self.envs.step(actions)
        ended = []
        for i in range(len(actions)):
            self.replay.add(i, map_obs(lambda x: x[i], self.obs), actions[i], float(rewards[i]), bool(terminated[i]),
                            bool(self.is_first[i]))
            self.returns[i] += rewards[i]
            self.lengths[i] += 1
            if terminated[i] or truncated[i]:
                # the final observation closes the episode (zero action/reward, not terminal)
                self.replay.add(i, info["final_obs"][i], np.zeros_like(actions[i]), 0.0, False, False)
                ended.append((float(self.returns[i]), int(self.lengths[i])))
                self.returns[i], self.lengths[i] = 0.0, 0
        self.is_first = terminated | truncated  # obs[i] already starts the next episode
        self.obs = obs
        return ended
