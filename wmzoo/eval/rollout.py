"""Evaluate a checkpoint in its real environment, and record real-vs-imagined rollouts.

:func:`summarize` turns evaluation episodes into the figures the papers report: the mean return;
for the 26 Atari 100k games the human-normalised score (REM section 3.1); for environments whose
step ``info`` counts ``achievements`` (Crafter) the per-achievement success rates and the Crafter
score (Hafner, 2021; :func:`wmzoo.eval.metrics.crafter_score`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmzoo.device import resolve_device
from wmzoo.interfaces import Batch, EnvInfo, map_obs, stack_obs
from wmzoo.registry import make_env
from wmzoo.config import load_run
from wmzoo.train.agent import Agent
from wmzoo.train.checkpoint import load_checkpoint


def load_agent(checkpoint: str | Path, device: str | None = None) -> Agent:
    """Rebuild the agent of a checkpoint (spec, env shapes, weights) without pickle, on ``device``
    (``--device``: cpu, cuda, auto, ...; ``None``: the device the run trained on)."""
    if device is not None:
        resolve_device(device, "--device")  # before anything is read
    tree = load_checkpoint(checkpoint)
    run = load_run(tree["run"], f"checkpoint {checkpoint}")
    if device is not None:
        run = run.model_copy(update={"train": run.train.model_copy(update={"device": device})})
    info = EnvInfo.from_dict(tree["env"])
    torch.manual_seed(run.seed)
    agent = Agent(run, info)
    agent.load_state_tree(tree, f"checkpoint {checkpoint}")
    return agent


@dataclass
class EpisodeResult:
    ret: float
    length: int
    info: dict[str, Any]  # the last step's info (JSON-able entries)
    achievements: list[str] | None = None  # unlocked in this episode, where the env counts them


def evaluate(
    agent: Agent, episodes: int, max_steps: int, seed: int = 10_000, sample: bool = False,
    temperature: float = 1.0, uniform: bool = False, on_episode: Callable[[int, EpisodeResult], None] | None = None,
) -> list[EpisodeResult]:
    """Run ``episodes`` episodes (test-time env protocol), each at most ``max_steps`` steps,
    acting greedily or, with ``sample``, sampling at ``temperature``. ``uniform``: a uniformly
    random policy instead of the agent's, on the same env, seeds and protocol (the baseline the
    learning checks compare against); its action space is seeded with each episode's seed.
    ``on_episode(index, result)`` is called as each episode ends (``wmzoo eval``'s progress)."""
    run = agent.run
    env = make_env(run.env, seed=seed, size=run.train.image_size, train=False)
    results = []
    try:
        for episode in range(episodes):
            obs, info = env.reset(seed=seed + episode)
            if uniform:
                env.action_space.seed(seed + episode)
            agent.reset_acting()
            condition = agent.policy.condition(info)  # the episode's instruction, for a conditioned policy
            first, total, steps, done = True, 0.0, 0, False
            while not done and steps < max_steps:
                if uniform:
                    action = env.action_space.sample()
                else:
                    action = agent.act(map_obs(lambda x: np.asarray(x)[None], obs), np.array([first]), sample=sample,
                                       temperature=temperature,
                                       condition=condition)[0]
                obs, reward, terminated, truncated, info = env.step(action)
                total += float(reward)
                steps += 1
                first = False
                done = terminated or truncated
            results.append(EpisodeResult(total, steps, _jsonable(info), unlocked(info)))
            if on_episode is not None:
                on_episode(episode, results[-1])
    finally:
        env.close()
    return results


def play_episode(agent: Agent, steps: int, seed: int = 20_000) -> Batch:
    """A 1-row batch of ``steps`` real rows played by the agent's policy (same row layout as replay)."""
    run = agent.run
    env = make_env(run.env, seed=seed, size=run.train.image_size, train=False)
    rows: dict[str, list] = {k: [] for k in ("obs", "action", "reward", "terminal", "is_first")}
    try:
        obs, _ = env.reset(seed=seed)
        agent.reset_acting()
        first = True
        while len(rows["obs"]) < steps:
            action = agent.act(map_obs(lambda x: np.asarray(x)[None], obs), np.array([first]))[0]
            next_obs, reward, terminated, truncated, _ = env.step(action)
            for key, value in zip(rows, (obs, action, reward, terminated, first)):
                rows[key].append(value)
            obs, first = next_obs, False
            if terminated or truncated:
                obs, _ = env.reset()
                first = True
    finally:
        env.close()
    return Batch(
        obs=map_obs(lambda x: torch.as_tensor(x)[None], stack_obs(rows["obs"])),
        action=torch.as_tensor(np.stack(rows["action"]))[None].to(agent.env.action_dtype),
        reward=torch.as_tensor(np.array(rows["reward"], np.float32))[None],
        terminal=torch.as_tensor(np.array(rows["terminal"]))[None],
        is_first=torch.as_tensor(np.array(rows["is_first"]))[None],
    )


def unlocked(info: dict[str, Any]) -> list[str] | None:
    """Names of the achievements an episode's last ``info`` counts at least once (Crafter's
    ``info["achievements"]`` holds per-episode counters), ``None`` without such counters."""
    counts = info.get("achievements")
    if not isinstance(counts, dict):
        return None
    return sorted(name for name, count in counts.items() if count > 0)


def summarize(env: str, results: list[EpisodeResult]) -> dict[str, Any]:
    """``mean_return``; ``human_normalized_score`` for Atari 100k games; ``success_rates`` (percent
    per achievement) and ``crafter_score`` when every episode reports achievements; ``success_rate``
    (percent of episodes) where the env's last ``info`` says whether the task was done
    (``info["success"]``: MiniGrid and BabyAI)."""
    from wmzoo.envs.atari import human_normalized_score
    from wmzoo.eval.metrics import crafter_score, success_rates

    mean = float(np.mean([r.ret for r in results]))
    out: dict[str, Any] = {"mean_return": mean}
    hns = human_normalized_score(env, mean)
    if hns is not None:
        out["human_normalized_score"] = hns
    if results and all(r.achievements is not None for r in results):
        names = sorted({name for r in results for name in r.info.get("achievements", {})})
        rates = success_rates([r.achievements or [] for r in results], names)
        out["success_rates"] = rates
        out["crafter_score"] = crafter_score(rates)
    if results and all(isinstance(r.info.get("success"), bool) for r in results):
        out["success_rate"] = 100.0 * float(np.mean([r.info["success"] for r in results]))
    return out


def _jsonable(info: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in info.items():
        if isinstance(value, (int, float, str, bool)):
            out[key] = value
        elif isinstance(value, dict) and all(isinstance(v, (int, float)) for v in value.values()):
            out[key] = {k: float(v) for k, v in value.items()}
    return out
