"""``benchmarks/official_speed.py``: the official codes' configs read as their own loaders read
them, wmzoo's side timing the work it names, bad checkouts refused in one line. (The official
codes themselves are not in the test environment: the side-by-side figures are in
benchmarks/README.md.)"""

from __future__ import annotations


import pytest

from benchmark_scripts import load_script
import torch


@pytest.fixture(scope="module")
def official_speed():
    return load_script("official_speed")


def test_configs_read_as_the_official_loaders_read_them(official_speed):
    # Catches: YAML 1.1 floats such as 1e-4 left as strings (the official Adam refuses them),
    # REM's "(64, 64)" resolution passed on as a string, hydra's _target_ keys passed as arguments.
    raw = {"_target_": "x", "model_lr": "1e-4", "size": [64, 64], "task": "atari_pong",
           "encoder": {"_target_": "y", "config": {"input_resolution": "(64, 64)", "act": "SiLU"}}}
    assert official_speed._config_value(raw) == {
        "model_lr": 1e-4, "size": [64, 64], "task": "atari_pong",
        "encoder": {"config": {"input_resolution": (64, 64), "act": "SiLU"}},
    }
    base = {"actor": {"layers": 2, "dist": "normal"}, "envs": 4}
    assert official_speed.merge(base, {"actor": {"dist": "onehot"}, "envs": 1}) == {
        "actor": {"layers": 2, "dist": "onehot"}, "envs": 1}
    assert base["actor"]["dist"] == "normal"  # the defaults are not changed in place


@pytest.mark.parametrize("flag", ["--iris", "--rem", "--dreamerv3"])
def test_a_folder_that_is_not_the_official_checkout_is_one_line(official_speed, tmp_path, capsys, flag):
    with pytest.raises(SystemExit) as exit_:
        official_speed.main([flag, str(tmp_path), "--threads", "1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path) in err and "not a checkout" in err


def test_no_code_to_compare_is_a_usage_error(official_speed, capsys):
    with pytest.raises(SystemExit) as exit_:
        official_speed.main(["--threads", "1"])
    assert exit_.value.code == 2 and "--iris PATH" in capsys.readouterr().err


def test_sides_are_timed_in_alternated_rounds(official_speed):
    # Catches: one side's warm-up or timed calls skipped, so the two are not under the same load,
    # or the same side always first in a round.
    calls = []
    seconds = official_speed.time_rounds(
        {"official": lambda: calls.append("o"), "wmzoo": lambda: calls.append("w")}, iters=2, warmup=1, rounds=3)
    assert calls == ["o", "w"] + ["o", "o", "w", "w"] + ["w", "w", "o", "o"] + ["o", "o", "w", "w"]
    assert set(seconds) == {"official", "wmzoo"} and all(len(v) == 3 for v in seconds.values())


def test_wmzoo_world_model_unit_steps_the_world_model_only(official_speed):
    # Catches: the tokenizer's own training inside the timed world-model update (the official
    # figure leaves it out), the world model not stepped, frames credited wrongly.
    torch.manual_seed(0)
    agent = official_speed.wmzoo_agent("rem")
    units, sizes = official_speed.wmzoo_units(agent, batch=1, seq_len=10)
    assert sizes == {"tokenizer": 3_189_667, "world_model": 4_625_925, "actor_critic": 4_574_407}
    update, frames = units["world_model_update"]
    assert frames == 10 and units["imagination"][1] == 10  # REM's horizon 10, one segment
    assert units["imagination_equal_actions"][1] == 10  # as many actions as the horizon unless told
    assert official_speed.wmzoo_units(agent, batch=2, seq_len=10, acted=9)[0]["imagination_equal_actions"][1] == 18
    wm = agent.world_model
    tok_before = [p.detach().clone() for p in wm.tokenizer.parameters()]
    head_before = [p.detach().clone() for p in wm.obs_head.parameters()]
    update()
    assert all(torch.equal(a, b) for a, b in zip(tok_before, wm.tokenizer.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(head_before, wm.obs_head.parameters()))


def test_wmzoo_delta_iris_imagination_runs_the_target_network_at_every_frame_and_learns_nothing(official_speed):
    # Catches: the timed rollout without the target network's pass (the official's imagine runs it at
    # every imagined frame: not like for like), a pass over fewer frames, a unit that also steps the
    # policy, frames credited other than batch x horizon.
    torch.manual_seed(0)
    agent = official_speed.wmzoo_delta_iris_agent()
    units, _ = official_speed.wmzoo_delta_iris_units(batch=1, seq_len=26, agent=agent)
    rollout, frames = units["imagination"]
    assert frames == units["actor_critic_update"][1] == 20  # paper-atari's horizon, one segment
    calls = []
    policy = agent.policy
    policy.target.register_forward_hook(lambda *_: calls.append(1))
    before = [p.detach().clone() for p in policy.parameters()]
    rollout()
    assert len(calls) == (policy.spec.segment - 1) + policy.spec.horizon + 1  # burn-in, then every imagined frame
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))
