"""The s4wm paper's 2D memory tasks: shapes, scripted episode lengths, rewards, key consumption."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

pytest.importorskip("minigrid")

from minigrid.core.world_object import Door, Key, Wall  # noqa: E402

from wmzoo.data.record import record_episode  # noqa: E402
from wmzoo.envs import memory_tasks_2d as tasks  # noqa: E402
from wmzoo.envs.memory_tasks_2d import DOWN, LEFT, PICKUP, RIGHT, UNLOCK, UP, WAIT  # noqa: E402
from wmzoo.envs.scripted import scripted_task  # noqa: E402
from wmzoo.errors import UnknownNameError  # noqa: E402
from wmzoo.registry import default_registry, env_availability, make_env  # noqa: E402

NAMES = tuple(tasks.TASKS)
LENGTHS = {  # (context | query) of Tables 2 and 3; widths 8 and 20 by Table 2's formula
    "distracting-memory-8": (15, 5),
    "distracting-memory-20": (39, 11),
    "distracting-memory-100": (199, 51),
    "distracting-memory-200": (399, 101),
    "distracting-memory-400": (799, 201),
    "multi-doors-keys-3": (76, 174),
    "multi-doors-keys-5": (170, 380),
    "multi-doors-keys-7": (296, 654),
}


@pytest.mark.parametrize("name", NAMES)
def test_reset_and_step_shapes(name: str) -> None:
    env = make_env(name, seed=0, size=40)
    actions = 4 if name.startswith("distracting") else 7
    assert env.observation_space == gym.spaces.Box(0, 255, (3, 40, 40), np.uint8)
    assert env.action_space == gym.spaces.Discrete(actions)
    obs, info = env.reset()
    assert obs.shape == (3, 40, 40) and obs.dtype == np.uint8 and info["phase"] == "context"
    extra = {} if name.startswith("distracting") else {"unlock_attempt": False}
    assert info == {"phase": "context", **extra}
    for action in range(actions):
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.shape == (3, 40, 40) and obs.dtype == np.uint8
        assert type(reward) is float and not terminated and not truncated
        assert info["phase"] == "context"
    with pytest.raises(ValueError, match="not in Discrete"):
        env.step(actions)
    obs, _ = make_env(name, seed=0, size=64).reset()
    assert obs.shape == (3, 64, 64)


def test_view_is_the_5x5_cells_around_the_agent_at_8_px() -> None:
    """At size 40 the pixels are the 5x5 cells centred on the agent cut from MiniGrid's
    top-down render of the whole grid (``env.render()``, Figure 2's view) at 8 px per cell."""
    env = tasks.make("multi-doors-keys-7", size=40)
    inner = env.unwrapped
    cells = tasks.ROOM_SIDE[7] + 2
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        for _ in range(30):
            full = inner.render()  # (0, 0) is a wall: beyond the grid the view shows walls
            assert full.shape == (cells * 8, cells * 8, 3)
            padded = np.tile(full[:8, :8], (cells + 4, cells + 4, 1))
            padded[16:-16, 16:-16] = full
            x, y = inner.agent_pos
            crop = padded[y * 8 : y * 8 + 40, x * 8 : x * 8 + 40]
            assert np.array_equal(obs, crop.transpose(2, 0, 1))
            obs = env.step(inner.scripted_action())[0]


@pytest.mark.parametrize("name", NAMES)
def test_scripted_episode_has_the_papers_lengths(name: str) -> None:
    env = make_env(name, size=40)
    context, query = LENGTHS[name]
    task = scripted_task(env)
    assert task is not None and (task.context_length, task.query_length) == (context, query)
    for seed in (0, 1):
        data, scripted = record_episode(env, seed)
        assert scripted and len(data["obs"]) == context + query
        assert data["phase"].tolist() == [0] * context + [1] * query
        # the env itself ends the episode there: terminated (Distracting Memory) or truncated
        assert env.unwrapped.step_count == context + query - 1
        terminal = name.startswith("distracting")
        assert data["terminal"].tolist() == [False] * (context + query - 2) + [terminal, False]
        if not terminal:  # Multi Doors Keys: 3 attempts per key, rewarded ones among them
            keys = int(name.rsplit("-", 1)[1])
            attempt = data["info_unlock_attempt"][1:]  # transition t's info comes with row t + 1
            assert attempt.sum() == 3 * keys and data["reward"].sum() == keys
            assert not data["reward"][:-1][~attempt].any()


def _walk(env: gym.Env, seed: int) -> tuple[list[tuple[int, int]], list[int], list[float]]:
    """Follow the script to the end: positions per row, actions, rewards."""
    env.reset(seed=seed)
    inner = env.unwrapped
    cells, actions, rewards = [inner.agent_pos], [], []
    done = False
    while not done:
        actions.append(inner.scripted_action())
        _, reward, terminated, truncated, _ = env.step(actions[-1])
        cells.append(inner.agent_pos)
        rewards.append(reward)
        done = terminated or truncated
    return cells, actions, rewards


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_distracting_memory_script(seed: int) -> None:
    env = tasks.make("distracting-memory-100", size=40)
    cells, _, rewards = _walk(env, seed)
    inner = env.unwrapped
    start, context = inner.start, inner.context_length
    xs = [x - 3 for x, _ in cells]  # hallway cell index
    assert cells[0] == start == (3 + 50, 2)
    assert min(xs[:context]) == 0 and max(xs[:context]) == 99  # the whole hallway...
    assert cells[context - 1] == start  # ...and back, ending the context phase
    assert all(x > 50 for x in xs[context:])  # the query goes right only
    assert cells[-1] in inner.squares and len(cells) == 250
    square = inner.grid.get(*cells[-1])
    assert rewards == [0.0] * 248 + [float(square.color == inner.cue)]


@pytest.mark.parametrize("match", [True, False])
def test_distracting_memory_reward_is_one_exactly_for_the_cue_colour(match: bool) -> None:
    for seed in range(4):  # cue above and below, both outcomes
        env = tasks.make("distracting-memory-100", seed=seed, size=40)
        env.reset()
        inner = env.unwrapped
        upper, lower = (inner.grid.get(*pos).color for pos in inner.squares)
        assert upper != lower and inner.cue in (upper, lower)
        goes_up = (inner.cue == upper) == match
        for _ in range(50):
            assert env.step(RIGHT)[1:4] == (0.0, False, False)
        _, reward, terminated, truncated, info = env.step(UP if goes_up else DOWN)
        assert (reward, terminated, truncated) == (float(match), True, False)
        assert info["phase"] == "context"  # an early end: the phase is by row, not by event


def _bare_room(env: gym.Env) -> tasks.MultiDoorsKeysEnv:
    """Multi Doors Keys with its keys and doors removed, the agent at (2, 1)."""
    env.reset(seed=0)
    inner = env.unwrapped
    for pos in inner.keys:
        inner.grid.set(*pos, None)
    for pos in inner.doors:
        inner.grid.set(*pos, Wall())
    inner.agent_pos, inner.agent_dir = (2, 1), RIGHT
    return inner


def test_multi_doors_keys_consumes_keys() -> None:
    env = tasks.make("multi-doors-keys-3", size=40)
    inner = _bare_room(env)
    for x in (1, 3):
        inner.grid.set(x, 0, Door("red", is_locked=True))
    inner.grid.set(2, 2, Key("red"))
    inner.grid.set(4, 2, Key("red"))
    inner.grid.set(6, 2, Key("blue"))

    def run(*actions: int) -> list[float]:
        return [env.step(a)[1] for a in actions]

    assert run(DOWN, PICKUP) == [0.0, 0.0]  # DOWN faces the key without moving onto it
    assert inner.agent_pos == (2, 1) and inner.held == ["red"] and inner.grid.get(2, 2) is None
    assert run(LEFT, UP, UNLOCK) == [0.0, 0.0, 1.0]  # the first red door opens...
    door = inner.grid.get(1, 0)
    assert door.is_open and not door.is_locked and inner.held == []  # ...and takes the key
    assert run(UNLOCK) == [0.0]  # an open door stays open
    assert run(RIGHT, RIGHT, UP, UNLOCK) == [0.0] * 4  # the second red door: no key left
    assert inner.grid.get(3, 0).is_locked and inner.agent_pos == (3, 1)
    blue = (RIGHT, RIGHT, RIGHT, DOWN, PICKUP, LEFT, LEFT, LEFT, UP, UNLOCK)
    assert run(*blue) == [0.0] * 10  # a key of another colour does not open it
    assert inner.held == ["blue"] and inner.grid.get(3, 0).is_locked
    assert run(RIGHT, DOWN, PICKUP, LEFT, UP, UNLOCK) == [0.0] * 5 + [1.0]  # another red key
    assert not inner.grid.get(3, 0).is_locked and inner.held == ["blue"]
    assert inner.agent_pos == (3, 1)  # doors are never walked through
    assert run(UP, WAIT) == [0.0, 0.0] and inner.agent_pos == (3, 1)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
@example(seed=54)  # starts facing the first object to visit
def test_multi_doors_keys_script(seed: int) -> None:
    """The script follows section 5.6 and fits the paper's phases, filling them with waits."""
    env = tasks.make("multi-doors-keys-3", size=40)
    env.reset(seed=seed)
    inner = env.unwrapped
    context, query = inner.context_length, inner.query_length
    keys, doors = list(inner.keys), list(inner.doors)
    colours = sorted(inner.grid.get(*p).color for p in keys)
    assert sorted(inner.grid.get(*p).color for p in doors) == colours
    faced, acts, rewards = [inner.front()], [], []  # what the agent faces at reset counts too
    for t in range(context + query - 1):
        action = inner.scripted_action()
        front = inner.front()
        _, reward, terminated, truncated, info = env.step(action)
        faced.append(inner.front())
        acts.append((action, front))
        rewards.append(reward)
        assert info["phase"] == ("context" if t + 1 < context else "query")
        assert info["unlock_attempt"] is (action == UNLOCK and front in doors)
        assert terminated is False and truncated is (t == context + query - 2)
    ctx = acts[: context - 1]
    assert set(faced[:context]) >= set(keys + doors)  # the context visits all of them...
    assert all(a not in (PICKUP, UNLOCK) for a, _ in ctx)  # ...without picking up keys
    waits = [a == WAIT for a, _ in ctx]  # the script ended early and waits out the phase
    assert waits == sorted(waits)
    qry = acts[context - 1 :]
    picks = [i for i, (a, _) in enumerate(qry) if a == PICKUP]
    unlocks = [(i, pos) for i, (a, pos) in enumerate(qry) if a == UNLOCK]
    assert sorted(pos for a, pos in qry if a == PICKUP) == sorted(keys)
    assert len(unlocks) == 2 * 3 + 3  # two tries after each key, then each door once more
    for j, pick in enumerate(picks):
        tries = [i for i, _ in unlocks if i > pick and (j == 2 or i < picks[j + 1])]
        assert len(tries) == (2 if j < 2 else 2 + 3)
    assert sorted(pos for _, pos in unlocks[-3:]) == sorted(doors)
    waits = [a == WAIT for a, _ in qry]
    assert waits == sorted(waits) and not inner.context_plan and not inner.query_plan
    assert sum(rewards) == 3.0  # every door has a key of its colour
    assert inner.held == [] and all(not inner.grid.get(*p).is_locked for p in doors)


def test_layouts_whose_scripts_overrun_a_phase_are_redrawn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(tasks.ROOM_SIDE, 3, 16)  # a room too large for 76 | 174: many overrun
    env = tasks.MultiDoorsKeysEnv(3)
    fits: list[bool] = []
    check = env._scripts_fit
    monkeypatch.setattr(env, "_scripts_fit", lambda: fits.append(check()) or fits[-1])
    for seed in range(4):
        env.reset(seed=seed)
        first = env.view()
        for _ in range(env.max_steps):
            env.step(env.scripted_action())
        assert not env.context_plan and not env.query_plan  # both scripts ended in their phase
        assert np.array_equal(env.reset(seed=seed)[0], first)  # redrawing is seeded too
    assert False in fits and fits.count(True) == 8


@pytest.mark.parametrize("name", ["distracting-memory-200", "multi-doors-keys-5"])
def test_seeding(name: str) -> None:
    a, _ = tasks.make(name, seed=5).reset()
    b, _ = tasks.make(name).reset(seed=5)
    c, _ = tasks.make(name).reset(seed=6)
    assert np.array_equal(a, b)
    env = tasks.make(name, size=40)
    first = record_episode(env, 7)[0]
    again = record_episode(env, 7)[0]
    other = record_episode(env, 8)[0]
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert not np.array_equal(first["obs"], other["obs"])
    assert not (np.array_equal(a, c) and np.array_equal(first["action"], other["action"]))


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("distracting-memory-150", "distracting-memory-"), ("multi-doors-keys-4", "multi-doors-keys-"),
     ("multi-door-keys-3", "multi-doors-keys-3")],
)  # fmt: skip
def test_unknown_names_raise_with_suggestions(name: str, suggestion: str) -> None:
    with pytest.raises(UnknownNameError) as err:
        tasks.make(name)
    assert str(err.value).startswith(f"unknown environment '{name}'; did you mean: {suggestion}")


def test_registered_and_available() -> None:
    registry = default_registry()
    for name in NAMES:
        assert env_availability(registry.env(name)) == (True, "")
