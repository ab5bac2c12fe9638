"""The behaviour contract of every registered backbone (wmzoo.testing.check_reward_sign): trained
on a task whose reward is +1 after action 0 and -1 after action 1, it imagines more reward under
action 0. Slow (tens of seconds per backbone): run with ``-m slow``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from wmzoo.registry import build_world_model, default_registry, world_model_spec
from wmzoo.testing import SIGN_ENV, check_reward_sign

# Updates the bundled tiny models need (measured): the token models' 3-class sign heads learn the
# reward in 200; the DreamerV3-style two-hot heads (255 bins, zero-initialised) in ~800 at lr 1e-3.
# Any other registered backbone gets the default below at its tiny preset.
SCHEDULES: dict[str, tuple[int, dict[str, Any]]] = {
    "iris": (200, {}),
    "delta-iris": (200, {}),
    "rem": (200, {}),
    "rssm": (800, {"optim": {"lr": 1e-3}}),
    "s4wm": (800, {"optim": {"lr": 1e-3}}),
    "tssm-xl": (800, {"optim": {"lr": 1e-3}}),
    "tokenwm": (600, {"optim": {"lr": 1e-3}}),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(default_registry().tables["backbone"]))
def test_imagined_reward_follows_the_action_that_earned_it(name: str) -> None:
    # Catches: a reward target read one step late or early (then uncorrelated with the action that
    # earned it), a sign flipped between data and imagination, imagination reading the state
    # before the action (the reward cannot depend on it), an action embedded but never used.
    torch.set_num_threads(2)
    updates, overrides = SCHEDULES.get(name, (800, {}))
    wm = build_world_model(name, world_model_spec(name, "tiny", overrides), SIGN_ENV)
    plus, minus = check_reward_sign(wm, updates=updates)
    assert plus > 0.5 and minus < -0.5, (plus, minus)
