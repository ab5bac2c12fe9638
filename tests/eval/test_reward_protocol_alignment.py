"""The reward protocol's alignment (s4wm section 5.3, Table 3): which transitions
:func:`wmzoo.eval.memory.reward_accuracy` scores, and which state and action each prediction comes
from, checked with a world model whose predicted reward is a known function of the step.

Transition ``t`` takes ``action[t]`` after row ``t`` and earns ``reward[t]``; the query's
transitions are ``t = context − 1 .. T − 2``. :class:`StepModel` predicts ``10 t + action[t]``
for transition ``t`` whether it filtered rows ``0 .. t`` (inference) or imagined from the state
after the context (imagination), so a protocol aligned right scores it correct on every
transition whose recorded reward is that value, and any index off by one (state, action, target,
scored rows) misses by at least 1 > 0.5.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from memory_fakes import KnownModel
from torch import Tensor

from wmzoo.eval.memory import _batch, reward_accuracy
from wmzoo.interfaces import EnvInfo, State, Step

ENV = EnvInfo("steps", (3, 4, 4), 3)


class StepModel(KnownModel):
    """:class:`memory_fakes.KnownModel`'s counters: the rows it filtered (``seen``) and the steps it
    imagined since (``k``); the transition out of that state under ``a`` is step
    ``t = seen − 1 + k``, its reward ``10 t + a``."""

    def __init__(self) -> None:
        super().__init__(ENV)

    def imagine_step(self, state: State, action: Tensor) -> Step:
        step = state["seen"] - 1 + state["k"]
        reward = 10 * step + action.float()
        new = {"seen": state["seen"], "k": state["k"] + 1}
        return Step(new, reward, torch.ones_like(reward), self.features(new))


def episode(actions: list[int], scored: list[int], missed: list[int]) -> dict[str, np.ndarray]:
    """Rewards ``10 t + action[t]`` (the model's prediction) except at ``missed`` transitions
    (−5: the model is wrong there); ``scored`` transitions are marked as episode ends."""
    T = len(actions)
    reward = 10 * np.arange(T, dtype=np.float32) + np.asarray(actions, np.float32)
    reward[missed] = -5.0
    terminal = np.zeros(T, bool)
    terminal[scored] = True
    return {
        "obs": np.zeros((T, *ENV.obs_shape), np.uint8),
        "action": np.asarray(actions, np.int64),
        "reward": reward,
        "terminal": terminal,
        "is_first": np.arange(T) == 0,
    }


def test_scores_the_query_transitions_from_the_right_state_and_action() -> None:
    """context 3, T 8: the query's transitions are t = 2 .. 6. Marked: 1 (a context transition),
    2, 4, 5 and 7 (the last row: no transition leaves it); the model misses 5. So 3 scored, 2
    right, in both modes. Bugs caught: the query-action index shifted by one (imagining
    ``action[context:]``, predicting under ``action[t ± 1]``), the targets or the scored mask
    shifted (``reward[context:]``), imagination started one row late or early."""
    data = episode([0, 1, 2, 0, 1, 2, 0, 1], scored=[1, 2, 4, 5, 7], missed=[5])
    batch, extras = _batch([data])
    out = reward_accuracy(StepModel(), iter([(batch, extras, 3)]), None)
    assert out["scored_transitions"] == 3 and out["episodes"] == 1
    assert out["inference_accuracy"] == pytest.approx(2 / 3)
    assert out["imagination_accuracy"] == pytest.approx(2 / 3)


@given(data=st.data(), T=st.integers(3, 12), B=st.integers(1, 3))
@settings(max_examples=30, deadline=None)
def test_accuracy_is_the_share_of_right_query_transitions(data: st.DataObject, T: int, B: int) -> None:
    """For any context, actions, marks and misses: scored = the marked transitions in
    ``context − 1 .. T − 2``, accuracy = the share of them the model is not set to miss, the same
    in both modes (the model is exact in both). Bugs caught: any off-by-one in the scored range,
    the targets, the actions, the filtered rows or the imagination start."""
    context = data.draw(st.integers(1, T - 1), label="context")
    episodes, right, scored = [], 0, 0
    for b in range(B):
        actions = data.draw(st.lists(st.integers(0, 2), min_size=T, max_size=T), label=f"actions {b}")
        marks = data.draw(st.lists(st.integers(0, T - 1), unique=True), label=f"marks {b}")
        missed = data.draw(st.lists(st.integers(0, T - 1), unique=True), label=f"missed {b}")
        if b == 0:  # at least one scored transition
            marks = sorted({*marks, data.draw(st.integers(context - 1, T - 2), label="one scored")})
        episodes.append(episode(actions, marks, missed))
        query = [t for t in marks if context - 1 <= t <= T - 2]
        scored += len(query)
        right += sum(t not in missed for t in query)
    batch, extras = _batch(episodes)
    out = reward_accuracy(StepModel(), iter([(batch, extras, context)]), None)
    assert out["scored_transitions"] == scored and out["episodes"] == B
    assert out["inference_accuracy"] == pytest.approx(right / scored)
    assert out["imagination_accuracy"] == pytest.approx(right / scored)
