"""The scripted data-collecting policies of the s4wm paper's memory tasks (section 5).

Every memory task is a Gymnasium env whose *unwrapped* env satisfies :class:`ScriptedTask`: it knows
the paper's context and query lengths and, at each step, the action its scripted policy takes.
An episode recorded with the scripted policy (:func:`wmzoo.data.record.record_episode` rolls it
out into row arrays) holds exactly ``context_length + query_length`` observations (rows), and
``info["phase"]`` says which phase each step belongs to.

Anything that records data for these tasks (``wmzoo data generate``, the memory metrics) goes
through this protocol and never names a task.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym


@runtime_checkable
class ScriptedTask(Protocol):
    """What a memory task exposes besides the Gymnasium API (on ``env.unwrapped``)."""

    context_length: int
    """Observations in the context phase (the first number of the paper's ``context | query``)."""
    query_length: int
    """Observations in the query phase (the second number)."""

    def scripted_action(self) -> int:
        """The data-collecting policy's next action in the current state (call after reset)."""
        ...


def scripted_task(env: gym.Env) -> ScriptedTask | None:
    """The :class:`ScriptedTask` behind ``env``'s wrappers, or ``None`` when it has none."""
    inner: Any = env.unwrapped
    return inner if isinstance(inner, ScriptedTask) else None


def expert_policy(env: gym.Env) -> Callable[[], Any] | None:
    """The env's expert, where it has one: ``expert_action()`` on a wrapper or the unwrapped env
    (BabyAI's bot, :class:`wmzoo.envs.minigrid.BabyAIExpert`), called after reset and after each
    step for the action the expert takes now; ``None`` for an env without one. ``wmzoo data
    generate`` records an env's scripted policy first, else its expert, else random actions."""
    try:
        return env.get_wrapper_attr("expert_action")
    except AttributeError:
        return None
