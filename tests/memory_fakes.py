"""A tiny scripted memory task (the :class:`wmzoo.envs.scripted.ScriptedTask` protocol) and a
world model with known outputs, for the dataset and memory-metric tests."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from wmzoo import hookimpl
from wmzoo.hookspecs import EnvEntry
from wmzoo.interfaces import EnvInfo, State, Step, WorldModel
from wmzoo.specs import OptimSpec, WorldModelSpec

CONTEXT, QUERY = 6, 5


class FakeMemoryTask(gym.Env):
    """A colour shown during the context, a walk on a ring of 4 cells; reward 1 at the end when
    the colour was 1. Teleport variant: the first query row jumps back to the cell of row 2."""

    context_length = CONTEXT
    query_length = QUERY

    def __init__(self, size: int = 16, teleport: bool = False) -> None:
        self.size, self.teleport = size, teleport
        self.observation_space = gym.spaces.Box(0, 255, (3, size, size), np.uint8)
        self.action_space = gym.spaces.Discrete(3)

    def _obs(self) -> np.ndarray:
        image = np.zeros((3, self.size, self.size), np.uint8)
        image[0] = 60 * self.pos
        image[1] = 200 * self.colour if self.t < 3 else 0
        image[2, : self.t + 1] = 255
        return image

    def _info(self) -> dict[str, Any]:
        info = {"phase": "context" if self.t < CONTEXT else "query",
                "probe": {"pos": np.array([self.pos, self.colour], np.int64)}}
        return info

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.colour = int(self.np_random.integers(2))
        self.pos, self.t, self.history = 0, 0, [0]
        return self._obs(), self._info()

    def scripted_action(self) -> int:
        return 1 if self.t < CONTEXT - 1 else int(self.np_random.choice([0, 2]))

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        self.pos = (self.pos + int(action) - 1) % 4
        info: dict[str, Any] = {}
        if self.teleport and self.t == CONTEXT:
            self.pos = self.history[2]
            info["teleport_to"] = 2
        self.history.append(self.pos)
        terminated = self.t == CONTEXT + QUERY - 1
        reward = float(terminated and self.colour == 1)
        info.update(self._info(), unlock_attempt=bool(self.t >= CONTEXT and action == 2))
        return self._obs(), reward, terminated, False, info


class FakeEnvs:
    """A plugin registering ``fake-memory`` and ``fake-memory-teleport``."""

    @hookimpl
    def wmzoo_envs(self) -> list[EnvEntry]:
        def make(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
            env = FakeMemoryTask(size, teleport=name.endswith("teleport"))
            env.reset(seed=seed)
            return env

        return [EnvEntry(name=n, make=make, description="test task") for n in ("fake-memory", "fake-memory-teleport")]


class KnownModel(WorldModel):
    """Decodes observed rows as black images and the ``k``-th imagined row as value ``10 k``;
    predicts reward 1 after an action 2 when it has seen at least ``sees`` rows, else 0."""

    def __init__(self, env: EnvInfo, sees: int = 0) -> None:
        super().__init__()
        self.env, self.spec, self.sees = env, WorldModelSpec(), sees
        self.feature_shape = (2,)
        self.dummy = nn.Parameter(torch.zeros(1))

    def components(self) -> dict[str, tuple[list[nn.Parameter], OptimSpec]]:
        return {"model": ([self.dummy], OptimSpec())}

    def initial_state(self, batch_size: int) -> State:
        return {"seen": torch.zeros(batch_size), "k": torch.zeros(batch_size)}

    def loss(self, batch: Any, carry: State | None = None) -> Any:
        raise NotImplementedError

    def observe_step(self, state: State, obs: Tensor, prev_action: Tensor, is_first: Tensor) -> State:
        seen = torch.where(is_first, torch.zeros_like(state["seen"]), state["seen"]) + 1
        return {"seen": seen, "k": torch.zeros_like(state["k"])}

    def imagine_step(self, state: State, action: Tensor) -> Step:
        new = {"seen": state["seen"], "k": state["k"] + 1}
        reward = ((action == 2) & (state["seen"] >= self.sees)).float()
        return Step(new, reward, torch.ones_like(reward), self.features(new))

    def features(self, state: State) -> Tensor:
        return torch.stack([state["seen"], state["k"]], -1)

    def decode(self, state: State) -> Tensor:
        C, H, W = self.env.obs_shape
        value = (state["k"] * 10).clamp(0, 255).to(torch.uint8)
        return value.view(-1, 1, 1, 1).expand(-1, C, H, W).clone()
