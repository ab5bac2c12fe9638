"""The s4wm paper's 2D memory tasks: shapes, scripted episode lengths, rewards, key consumption."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

pytest.importorskip("minigrid")

from minigrid.core.world_object import Door, Floor, Key, Wall  # noqa: E402

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
    # Catches: the query script stepping up / down onto the other square than the one it chose
    assert cells[-1] == inner.target
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


# --------------------------------------------------------------------------- layouts over seeds


def test_distracting_memory_layouts_over_seeds() -> None:
    """Width 20 over 60 seeds, against the layout the class docstring gives cell by cell: the
    agent at hallway cell 10 facing right, walls above and below every hallway cell, two squares
    of different non-red colours, distractors on about half the hallway cells, each cell of it
    sometimes; the cue and the scripted target each above in some episodes and below in others."""
    inner = tasks.make("distracting-memory-20", size=40).unwrapped
    upper, lower = (23, 1), (23, 3)  # the junction is x = width + 3
    cue_above, target_above, floors, floor_colours = [], [], np.zeros(20), set()
    for seed in range(60):
        inner.reset(seed=seed)
        # Catches: the start off the hallway's middle cell, or facing another way than right
        assert (inner.agent_pos, inner.agent_dir) == ((13, 2), RIGHT)
        # Catches: a hallway cell (the first or the last) without its walls, walls over the junction
        assert all(isinstance(inner.grid.get(x, y), Wall) for x in range(3, 23) for y in (1, 3))
        assert inner.grid.get(23, 2) is None and inner.grid.get(2, 2) is None
        colours = [inner.grid.get(*pos).color for pos in (upper, lower)]
        # Catches: the squares drawn in red (the agent's colour) or in one colour
        assert colours[0] != colours[1] and "red" not in colours and inner.cue in colours
        assert inner.grid.get(1, 2).color == inner.cue and tuple(inner.squares) == (upper, lower)
        cue_above.append(inner.cue == colours[0])
        target_above.append(inner.target == upper)
        floors += [isinstance(inner.grid.get(x, 2), Floor) for x in range(3, 23)]
        floor_colours.update(obj.color for x in range(3, 23) if (obj := inner.grid.get(x, 2)))
    # Catches: the cue always the first of the two colours drawn (always the upper square's)
    assert 15 < sum(cue_above) < 45
    # Catches: the query script always choosing the same square
    assert 15 < sum(target_above) < 45
    # Catches: a distractor probability other than 1/2; a hallway cell that never gets one
    assert 0.4 < floors.mean() / 60 < 0.6 and (floors > 0).all()  # floors: per cell, over 60 seeds
    # Catches: distractors drawn from fewer colours than MiniGrid's five (e.g. the squares' four)
    assert floor_colours == {"red", "green", "blue", "purple", "yellow"}


def test_multi_doors_keys_layouts_over_seeds() -> None:
    """3 keys over 40 seeds: keys on the even lattice, doors in the wall ring off its corners, the
    agent on a free cell in any of the 4 directions, the doors' colours the keys' in a shuffled
    order, and the query's two tries after each key at two different doors."""
    inner = tasks.make("multi-doors-keys-3", size=40).unwrapped
    side = tasks.ROOM_SIDE[3]
    corners = {(0, 0), (0, side + 1), (side + 1, 0), (side + 1, side + 1)}
    directions, shuffled, door_first = set(), 0, 0
    for seed in range(40):
        inner.reset(seed=seed)
        # Catches: keys off the lattice of even coordinates (next to a wall), doors in a corner
        lattice = range(2, side, 2)
        assert all(x in lattice and y in lattice for x, y in inner.keys)
        assert all(x in (0, side + 1) or y in (0, side + 1) for x, y in inner.doors)
        assert not corners & set(inner.doors) and len(set(inner.doors)) == 3
        # Catches: the agent starting on a key's cell
        assert inner.agent_pos not in inner.keys and inner.grid.get(*inner.agent_pos) is None
        directions.add(inner.agent_dir)
        door_first += inner.context_plan[0][1] in inner.doors
        keys = [inner.grid.get(*p).color for p in inner.keys]
        doors = [inner.grid.get(*p).color for p in inner.doors]
        assert sorted(keys) == sorted(doors)
        shuffled += keys != doors
        # Catches: the two doors tried after a key drawn with replacement (one door tried twice)
        plan = [pos for _, pos in inner.query_plan]
        assert all(plan[i + 1] != plan[i + 2] for i in range(0, 9, 3))
        assert sorted(plan[9:]) == sorted(inner.doors)
    # Catches: a start direction never drawn (e.g. up, from _rand_int(0, 3))
    assert directions == {RIGHT, DOWN, LEFT, UP}
    # Catches: the doors coloured in the keys' order (not shuffled)
    assert shuffled > 10
    # Catches: the context visiting the keys first, then the doors (not in one random order)
    assert 5 < door_first < 35


def test_multi_doors_keys_unlock_attempt_flags_only_unlocks_facing_a_door() -> None:
    # Catches: info["unlock_attempt"] set by any UNLOCK action (facing a wall, a key or nothing)
    env = tasks.make("multi-doors-keys-3", size=40)
    inner = _bare_room(env)  # at (2, 1) facing right
    inner.grid.set(2, 0, Door("red", is_locked=True))
    inner.grid.set(3, 1, Key("red"))

    def flags(*actions: int) -> list[tuple[bool, float]]:
        return [(info["unlock_attempt"], r) for _, r, _, _, info in map(env.step, actions)]

    # UNLOCK facing the key (3, 1), then the wall (0, 1) from (1, 1); back at (2, 1), UP faces the
    # door (2, 0): UNLOCK with no key is an attempt (unrewarded), PICKUP and WAIT facing it are not
    assert flags(UNLOCK, LEFT, UNLOCK, RIGHT, UP, UNLOCK, PICKUP, WAIT) == [(False, 0.0)] * 5 + [
        (True, 0.0), (False, 0.0), (False, 0.0)]
    # RIGHT faces the key, PICKUP takes it; UP faces the door: UNLOCK opens it, a second tries again
    opened = [(False, 0.0)] * 3 + [(True, 1.0), (True, 0.0)]
    assert flags(RIGHT, PICKUP, UP, UNLOCK, UNLOCK) == opened
    assert inner.held == [] and inner.agent_pos == (2, 1)


def test_a_query_script_that_ends_on_the_last_step_fits() -> None:
    # Catches: the redraw check simulating fewer steps than an episode has (a fitting layout redrawn)
    env = tasks.make("multi-doors-keys-3", size=40)
    inner = _bare_room(env)
    inner.grid.set(2, 0, Door("red", is_locked=True))
    inner.agent_dir = UP  # facing the door: each query step is one UNLOCK, one task done
    for extra, fits in ((0, True), (1, False)):
        plan = [("unlock", (2, 0))] * (inner.query_length + extra)
        inner.context_plan, inner.query_plan = [], plan
        assert inner._scripts_fit() is fits  # the query phase has query_length actions, no more


def test_a_context_task_done_by_the_last_context_action_is_removed():
    # Catches: the task finished on the context's last action judged against the query plan (data version 1).
    env = tasks.MultiDoorsKeysEnv(3)
    env.reset(seed=0)
    for pos in env.keys:
        env.grid.set(*pos, None)
    for pos in env.doors:
        env.grid.set(*pos, Wall())
    env.grid.set(2, 0, Door("red", is_locked=True))
    env.agent_pos, env.agent_dir = (2, 1), 0  # facing right, the door right above
    env.context_plan, env.query_plan = [("visit", (2, 0))], []
    env.step_count = env.context_length - 2  # the next action is the context's last
    action = env.scripted_action()
    assert action == UP
    env.step(action)
    assert env.front() == (2, 0)
    assert env.context_plan == []


def test_a_layout_whose_context_script_ends_on_the_last_context_action_is_drawn():
    # Catches: data version 1's redraw of such layouts (2 of seeds 0-9,999 at three keys: 6023 and
    # 9219; none of 0-2,399, the checked-in Multi Doors Keys 3 result's dataset), and the version
    # not raised with it.
    env = tasks.MultiDoorsKeysEnv(3)
    assert tasks.MultiDoorsKeysEnv.data_version == 2
    env.reset(seed=6023)
    assert (env.keys, env.doors, env.agent_pos) == ([(8, 2), (6, 2), (2, 2)], [(8, 11), (11, 1), (0, 10)], (3, 10))
    for t in range(env.context_length - 1):
        assert env.context_plan, f"the context script ended early, after action {t - 1}"
        env.step(env.scripted_action())
    assert env.context_plan == [] and env.step_count == env.context_length - 1
