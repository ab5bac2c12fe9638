"""The s4wm 3D memory tasks (Two/Four/Ten Rooms, teleport variants) and their scripted policy.

MuJoCo with software rendering makes about 50 steps/s here: the default tests play one full
Two Rooms episode (501 observations) and the Two Rooms teleport context; the Four and Ten Rooms
episodes are marked slow.
"""

from __future__ import annotations

import itertools
import math
import os

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco/dm_control are imported

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.envs.memory_tasks_3d.driver import FORWARD, LEFT, RIGHT, steer
from wmzoo.envs.memory_tasks_3d.layouts import LAYOUTS, NAMES, OBJECTS_PER_ROOM, sample_scene
from wmzoo.envs.memory_tasks_3d.planning import connected, corners, shortest_path
from wmzoo.envs.scripted import scripted_task
from wmzoo.errors import UnknownNameError

# --- the layouts and the planner (pure Python, fast) -------------------------------------------


@pytest.mark.parametrize(
    ("name", "rooms"), [("two-rooms", 2), ("four-rooms", 4), ("ten-rooms", 10)]
)
def test_layout_rooms_form_a_ring(name: str, rooms: int) -> None:
    layout = LAYOUTS[name]
    assert len(layout.rooms) == rooms and all(len(room) == 25 for room in layout.rooms)
    for i in range(rooms):
        j = (i + 1) % rooms
        path = shortest_path(layout.free, layout.rooms[i][12], layout.rooms[j][12])
        # the way to the next room is one corridor: it crosses no third room
        assert {layout.room_of(c) for c in path} == {i, j, -1}
        assert 0 < sum(layout.room_of(c) == -1 for c in path) <= 5  # doorway + corridor + doorway


def test_phase_lengths_are_the_papers() -> None:  # Table 1: context | query
    lengths = {n: (lay.context_length, lay.query_length) for n, lay in LAYOUTS.items()}
    assert lengths == {"two-rooms": (301, 200), "four-rooms": (501, 500), "ten-rooms": (1101, 900)}


@settings(max_examples=50, deadline=None)
@given(st.sets(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=30), st.data())
def test_shortest_path_is_valid(blocked: set, data: st.DataObject) -> None:
    free = frozenset((r, c) for r in range(8) for c in range(8)) - blocked
    if len(free) < 2:
        return
    cells = sorted(free)
    start, goal = data.draw(st.sampled_from(cells)), data.draw(st.sampled_from(cells))
    path = shortest_path(free, start, goal)
    if not path:  # then not even a 4-connected way exists
        seen, todo = set(), [start]
        while todo:
            r, c = todo.pop()
            if (r, c) in free and (r, c) not in seen:
                seen.add((r, c))
                todo += [(r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)]
        assert goal not in seen
        return
    assert path[0] == start and path[-1] == goal and set(path) <= free
    for (r0, c0), (r1, c1) in itertools.pairwise(path):
        assert max(abs(r1 - r0), abs(c1 - c0)) == 1
        assert (r1, c0) in free and (r0, c1) in free  # a diagonal step cuts no blocked corner
    if len(path) > 1:
        assert corners(path)[-1] == goal and set(corners(path)) <= set(path[1:])


def test_corners_keep_turns_only() -> None:
    path = [(0, 0), (0, 1), (0, 2), (1, 3), (2, 4), (3, 4)]
    assert corners(path) == [(0, 2), (2, 4), (3, 4)]


def test_steer() -> None:
    pos = np.zeros(2)
    assert steer(pos, 0.0, np.array([5.0, 0.2])) == FORWARD
    assert steer(pos, 0.0, np.array([0.0, 5.0])) == LEFT  # 90 degrees to the left
    assert steer(pos, math.pi / 2, np.array([5.0, 0.0])) == RIGHT


@pytest.mark.parametrize("seed", range(5))
def test_sample_scene(seed: int) -> None:
    layout = LAYOUTS["ten-rooms"]
    scene = sample_scene(layout, ["blue"] * 10, np.random.RandomState(seed))
    cells = [cell for cell, _ in scene.objects]
    assert len(set(cells)) == len(cells) == OBJECTS_PER_ROOM * 10
    assert not set(cells) & layout.doorside  # doorways stay clear
    for i, room in enumerate(layout.rooms):
        assert sum(c in room for c in cells) == OBJECTS_PER_ROOM
        assert connected(set(room) - set(cells))
    assert scene.start_cell in layout.rooms[scene.start_room] and scene.start_cell not in cells
    assert all(0 <= colour < 6 for _, colour in scene.objects)


def test_unknown_name() -> None:
    from wmzoo.envs.memory_tasks_3d import make

    with pytest.raises(UnknownNameError, match="did you mean: .*rooms"):
        make("three-rooms")
    with pytest.raises(UnknownNameError, match="two-rooms-teleport"):
        make("two-rooms-teleprt")


# --- the MuJoCo envs --------------------------------------------------------------------------

try:
    import memory_maze  # noqa: F401  (its __init__ also needs the legacy gym package)
    from dm_control import mujoco

    mujoco.Physics.from_xml_string("<mujoco><worldbody/></mujoco>").render(16, 16)
    RENDERS = ""
except Exception as err:  # noqa: BLE001  (ImportError, or no OpenGL for MUJOCO_GL)
    RENDERS = f"memory_maze does not import or render: {err}"
mujoco_env = pytest.mark.skipif(bool(RENDERS), reason=RENDERS)


def make(name: str, **kwargs) -> gym.Env:
    from wmzoo.envs.plugin import wmzoo_envs

    (found,) = [e for e in wmzoo_envs() if e.matches(name)]
    return found.make(name, **kwargs)


def rollout(env: gym.Env, steps: int | None = None) -> tuple[list, list]:
    """Frames and infos of the scripted policy from ``reset()`` (the whole episode by default)."""
    task = scripted_task(env)
    assert task is not None
    obs, info = env.reset()
    frames, infos = [obs], [info]
    for _ in itertools.count() if steps is None else range(steps):
        obs, reward, terminated, truncated, info = env.step(task.scripted_action())
        assert reward == 0.0 and not terminated
        frames.append(obs)
        infos.append(info)
        if truncated:
            break
    return frames, infos


def rooms_visited(infos: list[dict], phase: str) -> list[int]:
    rooms = [i["room"] for i in infos if i["phase"] == phase and i["room"] >= 0]
    return [room for room, _ in itertools.groupby(rooms)]


def check_episode(name: str, frames: list, infos: list, start_room: int) -> None:
    layout = LAYOUTS[name.removesuffix("-teleport")]
    c, q, n = layout.context_length, layout.query_length, len(layout.rooms)
    assert len(frames) == c + q
    assert [i["phase"] for i in infos] == ["context"] * c + ["query"] * q
    assert all(f.shape == (3, 64, 64) and f.dtype == np.uint8 for f in frames)
    ring = [(start_room + i) % n for i in range(n + 1)]
    assert rooms_visited(infos, "context") == ring  # all rooms in order, back to the start
    if not name.endswith("-teleport"):
        assert rooms_visited(infos, "query") == ring  # and once more in the same order


@pytest.fixture(scope="module")
def two_rooms() -> tuple[gym.Env, list, list]:
    env = make("two-rooms", seed=0)
    frames, infos = rollout(env)
    return env, frames, infos


@mujoco_env
def test_two_rooms_episode(two_rooms: tuple[gym.Env, list, list]) -> None:
    env, frames, infos = two_rooms
    assert env.observation_space == gym.spaces.Box(0, 255, (3, 64, 64), np.uint8)
    assert env.action_space == gym.spaces.Discrete(6)
    task = scripted_task(env)
    assert (task.context_length, task.query_length) == (301, 200)
    scene = env.unwrapped.scene
    check_episode("two-rooms", frames, infos, scene.start_room)
    (row, col), heading = scene.start_cell, scene.start_heading  # the walker starts as drawn
    assert np.allclose(infos[0]["pose"], [(col - 8) * 2.0, (3 - row) * 2.0, heading], atol=1e-6)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    moved = np.hypot(*np.diff([i["pose"][:2] for i in infos], axis=0).T)
    assert moved.mean() > 0.3  # it drives most of the time (0.5 m per forward step)


@mujoco_env
def test_teleport_returns_to_an_earlier_point(two_rooms: tuple[gym.Env, list, list]) -> None:
    _, frames, infos = two_rooms
    c = 301
    env = make("two-rooms-teleport", seed=0)
    tele_frames, tele_infos = rollout(env, steps=c + 20)
    # the context is the plain task's (same seed): the teleport is drawn only when it happens
    assert all(np.array_equal(a, b) for a, b in zip(tele_frames[:c], frames[:c], strict=True))
    assert "teleport_to" not in tele_infos[c - 1]
    k = tele_infos[c]["teleport_to"]
    assert 0 <= k <= c - 2 and tele_infos[c]["phase"] == "query"
    assert np.array_equal(tele_infos[c]["pose"], infos[k]["pose"])
    assert np.array_equal(tele_frames[c], frames[k])
    # the query replays the actions taken from k on: the same observations again, bit for bit
    for j in range(1, 21):
        assert tele_infos[c + j]["teleport_to"] == k
        if k + j < c:
            assert tele_infos[c + j]["replay"]
            assert np.array_equal(tele_frames[c + j], frames[k + j])
            assert np.array_equal(tele_infos[c + j]["pose"], infos[k + j]["pose"])
        else:
            assert not tele_infos[c + j]["replay"]


@mujoco_env
def test_seeds(two_rooms: tuple[gym.Env, list, list]) -> None:
    scene0 = two_rooms[0].unwrapped.scene
    fresh = make("two-rooms")
    obs1, _ = fresh.reset(seed=1)
    seeded = make("two-rooms", seed=1)
    again, _ = seeded.reset()
    assert np.array_equal(obs1, again) and fresh.unwrapped.scene == seeded.unwrapped.scene
    scene1 = seeded.unwrapped.scene
    # colours and objects differ between seeds (2 rooms of 7 textures, 4 objects of 6 colours)
    assert scene1.wall_textures != scene0.wall_textures or scene1.objects != scene0.objects
    seeded.reset()  # the next episode of seed 1: new colours and objects
    assert seeded.unwrapped.scene != scene1


@pytest.mark.slow
@mujoco_env
@pytest.mark.parametrize("name", ["four-rooms", "ten-rooms", "ten-rooms-teleport"])
def test_full_episode(name: str) -> None:
    env = make(name, seed=1)
    frames, infos = rollout(env)
    check_episode(name, frames, infos, env.unwrapped.scene.start_room)


def test_names() -> None:
    assert set(NAMES) == {
        f"{n}-rooms{t}" for n in ("two", "four", "ten") for t in ("", "-teleport")
    }
