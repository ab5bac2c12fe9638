"""The behaviour contract of every registered backbone (wmzoo.testing.check_reward_sign): trained
on a task whose reward is +1 after action 0 and -1 after action 1, it imagines more reward under
action 0. Slow (tens of seconds per backbone): run with ``-m slow``."""

from __future__ import annotations

import pytest
import torch

from wmzoo.registry import default_registry
from wmzoo.testing import check_behaviour


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(default_registry().tables["backbone"]))
def test_imagined_reward_follows_the_action_that_earned_it(name: str) -> None:
    # Catches: a reward target read one step late or early (then uncorrelated with the action that
    # earned it), a sign flipped between data and imagination, imagination reading the state
    # before the action (the reward cannot depend on it), an action embedded but never used.
    # Each backbone's budget is its entry's behaviour_check (the token models' 3-class sign heads
    # learn the reward in 200 updates; the DreamerV3-style two-hot heads, 255 bins zero-initialised,
    # in ~800 at lr 1e-3), so a third-party backbone sets its own without editing this file.
    torch.set_num_threads(2)
    plus, minus = check_behaviour(name)
    assert plus > 0.5 and minus < -0.5, (plus, minus)
