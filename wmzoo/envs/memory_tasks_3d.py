"""The s4wm paper's 3D memory tasks: Two/Four/Ten Rooms and their teleport variants.

Deng, Park and Ahn, "Facing Off World Model Backbones" (s4wm paper), section 5.1 (long-term
imagination), section 5.2 (context-dependent recall, "teleport"), Figure 2 (top-down views) and
appendix A (64x64x3 observations, 30K scripted trajectories per environment). The environments are
built on Memory Maze's engine (Pasukonis et al., 2022): its rolling-ball walker with the 64x64
egocentric camera, its six discrete actions at 4 Hz, its labmaze wall and floor textures and its
target colours; but the maze layout is fixed and only the wall colours and the objects are
randomised per episode (appendix C).

Layouts (our own, after Figure 2; ``*`` a fixed corridor wall, digit ``i`` the walls of room ``i``,
one character = one 2 m cell): 5x5-cell rooms joined by 1-cell-wide, 3-cell-long corridors.
Two Rooms is a pair side by side, Four Rooms a 2x2 ring, Ten Rooms a 2x5 ring (rooms 0-4 on top
from left to right, 5-9 below from right to left); the rooms are numbered in ring order, so room
``i`` has a corridor to room ``i + 1 (mod n)``. See :data:`LAYOUTS`.

Each episode draws (from the env's seeded random state) every room's wall texture among 7 of the
labmaze ``style_01`` wall textures (the 8th, yellow, is the corridors'), 2 objects per room (Memory Maze's half-buried target spheres,
not collidable, no reward) at random cells with random colours among Memory Maze's 6 target
colours, the start room, the start cell and the heading.

Scripted data-collecting policy (section 5.1): the context phase starts in the start room ``s``,
visits rooms ``s, s+1, ..., s-1`` and returns to ``s``; the query phase revisits rooms
``s+1, ..., s-1, s`` in the same order. In each room visit the agent drives to random cells of the
room; a visit gets an equal share of the phase's remaining steps, and the route moves on to the
next room when the next cell would not fit (estimated from the path length and the turns). The last
visit of a phase keeps exploring until the phase ends, so no route ends early and no filler is
needed; the env counts observations, so every episode has exactly ``context + query``
observations: 301 | 200, 501 | 500, 1101 | 900 (Table 1). Navigation is closed-loop in the
continuous physics: shortest 8-connected cell paths (no corner cutting, avoiding walls and
objects) followed by a waypoint controller on the walker's position and heading (turn in place
when the waypoint is more than 35 degrees off, steer while driving when more than 8 degrees off).
``info["phase"]`` says which phase the returned observation belongs to, ``info["room"]`` the
agent's room (-1 in corridors) and ``info["pose"]`` its ``(x, y, heading)`` in metres/radians.

Teleport variants (section 5.2): the last context step (its action is ignored) teleports the agent
to a random earlier point ``k`` of its own history, uniform over ``0 .. context - 2``, by restoring
the full MuJoCo integration state saved there (``mj_setState``), so the first query observation is
the context's observation ``k`` again (``info["teleport_to"] = k`` on every query step). The query
then replays the exact actions taken from ``k`` on, which reproduces observations ``k+1, ...``
bit for bit. Interpretation (the paper does not say): when the replay catches up with the moment
of the teleport before the query ends (``k > context - query``), the agent is where the context
ended and the scripted query route continues from there. ``info["replay"]`` is true on the query
observations that repeat a context observation (the ``j``-th repeats observation ``k + j``):
the ones a recall metric compares.

Choices the paper leaves open (deviations where it may differ): the layouts, room and corridor
sizes, the 2 objects per room and their look are ours; the query visits ``s+1, ..., s`` (the
agent already stands in ``s``); the teleport step's action is ignored; the continuation after a
replay that catches up (above). The dataset size (30K episodes) is the data generator's business.

Speed of the scripted generation, one process (``reset()`` + scripted steps, build excluded) on
the shared 2-core CPU machine with Mesa llvmpipe rendering (``MUJOCO_GL=egl``); the machine was
loaded by other jobs (load average about 9), so CPU time (all threads of the process) is the
fairer figure. Rendering (``mjr_render`` + ``mjr_readPixels``) takes about two thirds of a step,
the 50 physics substeps of 5 ms the rest.

| task       | frames/episode | CPU: episodes/s | CPU: frames/s | wall (loaded): frames/s |
|------------|----------------|-----------------|---------------|-------------------------|
| two-rooms  | 501            | 0.21            | 105           | 21                      |
| four-rooms | 1001           | 0.087           | 88            | 22                      |
| ten-rooms  | 2001           | 0.033           | 65            | 16                      |

Building an env (``make`` + first ``reset``, EGL start-up included) takes a few seconds more.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from wmzoo.envs.memory_maze import NUM_ACTIONS, RESOLUTION, require_memory_maze
from wmzoo.envs.wrappers import SeededAtBuild, finish, unknown_env

# Memory Maze's discrete actions (memory_maze/tasks.py): [forward, turn] commands of the walker.
ACTIONS = np.array([[0, 0], [-1, 0], [0, -1], [0, 1], [-1, -1], [-1, 1]], dtype=np.float64)
NOOP, FORWARD, LEFT, RIGHT, FORWARD_LEFT, FORWARD_RIGHT = range(NUM_ACTIONS)
CONTROL_FREQ = 4.0  # Memory Maze's DEFAULT_CONTROL_FREQ
PHYSICS_TIMESTEP = 0.005  # Memory Maze's DEFAULT_PHYSICS_TIMESTEP
XY_SCALE = 2.0  # metres per layout cell, as in Memory Maze
OBJECTS_PER_ROOM = 2
OBJECT_RADIUS = 0.6  # Memory Maze's target_radius; centred on the floor (half buried)
CORRIDOR_WALL_TEXTURE = "yellow"  # Memory Maze's default ("*") wall texture
# labmaze style_01 wall textures a room may get: all but the corridors'
ROOM_WALL_TEXTURES = ("blue", "cerise", "green_bright", "green", "purple", "red_bright", "red")

# Measured motion of the walker with these actions (used only to budget the route):
SPEED = 0.5  # metres per step when driving
TURN = math.radians(18.3)  # radians per turning step

TWO_ROOMS = """\
0000000***1111111
0     0***1     1
0     0***1     1
0               1
0     0***1     1
0     0***1     1
0000000***1111111
"""

FOUR_ROOMS = """\
0000000***1111111
0     0***1     1
0     0***1     1
0               1
0     0***1     1
0     0***1     1
000 000***111 111
*** ********* ***
*** ********* ***
*** ********* ***
333 333***222 222
3     3***2     2
3     3***2     2
3               2
3     3***2     2
3     3***2     2
3333333***2222222
"""

TEN_ROOMS = """\
0000000***1111111***2222222***3333333***4444444
0     0***1     1***2     2***3     3***4     4
0     0***1     1***2     2***3     3***4     4
0                                             4
0     0***1     1***2     2***3     3***4     4
0     0***1     1***2     2***3     3***4     4
000 000***1111111***2222222***3333333***444 444
*** *************************************** ***
*** *************************************** ***
*** *************************************** ***
999 999***8888888***7777777***6666666***555 555
9     9***8     8***7     7***6     6***5     5
9     9***8     8***7     7***6     6***5     5
9                                             5
9     9***8     8***7     7***6     6***5     5
9     9***8     8***7     7***6     6***5     5
9999999***8888888***7777777***6666666***5555555
"""

Cell = tuple[int, int]  # (row, column) of the layout text


@dataclass(frozen=True)
class Layout:
    """A fixed rooms layout and the paper's phase lengths (observations per phase, Table 1)."""

    text: str
    context_length: int
    query_length: int
    rooms: tuple[tuple[Cell, ...], ...] = field(init=False)
    """Interior cells of each room, rooms in ring order."""
    free: frozenset[Cell] = field(init=False)
    """Every cell the walker can be in (rooms, doorways, corridors)."""
    doorside: frozenset[Cell] = field(init=False)
    """Room cells next to a doorway (kept free of objects)."""

    def __post_init__(self) -> None:
        grid = self.text.splitlines()
        free = {(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == " "}
        rooms = []
        for digit in sorted({ch for ch in self.text if ch.isdigit()}):
            walls = [
                (r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == digit
            ]
            (r0, c0), (r1, c1) = np.min(walls, axis=0), np.max(walls, axis=0)
            rooms.append(tuple((r, c) for r, c in sorted(free) if r0 < r < r1 and c0 < c < c1))
        inside = {cell for room in rooms for cell in room}
        doors = {
            (r, c)
            for r, c in free - inside
            if any((r + dr, c + dc) in inside for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0)))
        }
        doorside = {
            (r + dr, c + dc) for r, c in doors for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0))
        } & inside
        object.__setattr__(self, "rooms", tuple(rooms))
        object.__setattr__(self, "free", frozenset(free))
        object.__setattr__(self, "doorside", frozenset(doorside))

    @property
    def shape(self) -> tuple[int, int]:
        lines = self.text.splitlines()
        return len(lines), len(lines[0])

    def room_of(self, cell: Cell) -> int:
        """The room ``cell`` lies in, or -1 (corridor, doorway, wall)."""
        for i, room in enumerate(self.rooms):
            if cell in room:
                return i
        return -1

    def variations(self) -> str:
        """labmaze variations layer: letter ``A + i`` on room ``i``'s floor, ``.`` elsewhere."""
        rows, cols = self.shape
        grid = [["."] * cols for _ in range(rows)]
        for i, room in enumerate(self.rooms):
            for r, c in room:
                grid[r][c] = chr(ord("A") + i)
        return "".join("".join(row) + "\n" for row in grid)


LAYOUTS: dict[str, Layout] = {
    "two-rooms": Layout(TWO_ROOMS, 301, 200),
    "four-rooms": Layout(FOUR_ROOMS, 501, 500),
    "ten-rooms": Layout(TEN_ROOMS, 1101, 900),
}
TELEPORT = "-teleport"
NAMES = tuple(n + s for n in LAYOUTS for s in ("", TELEPORT))


# --- planning on the layout grid ------------------------------------------------------------


def shortest_path(free: frozenset[Cell] | set[Cell], start: Cell, goal: Cell) -> list[Cell]:
    """Cells from ``start`` to ``goal`` (both included) over ``free``: 8-connected, diagonal
    steps cost sqrt(2) and may not cut a blocked corner. Empty when ``goal`` is unreachable."""
    dist = {start: 0.0}
    prev: dict[Cell, Cell] = {}
    heap = [(0.0, start)]
    while heap:
        d, cell = heapq.heappop(heap)
        if cell == goal:
            path = [goal]
            while path[-1] != start:
                path.append(prev[path[-1]])
            return path[::-1]
        if d > dist[cell]:
            continue
        r, c = cell
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                nxt = (r + dr, c + dc)
                if nxt == cell or nxt not in free:
                    continue
                if dr and dc and ((r + dr, c) not in free or (r, c + dc) not in free):
                    continue
                nd = d + (math.sqrt(2.0) if dr and dc else 1.0)
                if nd < dist.get(nxt, math.inf):
                    dist[nxt], prev[nxt] = nd, cell
                    heapq.heappush(heap, (nd, nxt))
    return []


def connected(cells: set[Cell]) -> bool:
    """Whether ``cells`` form one 4-connected region."""
    todo, seen = [next(iter(cells))], set()
    while todo:
        r, c = todo.pop()
        if (r, c) in seen or (r, c) not in cells:
            continue
        seen.add((r, c))
        todo += [(r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)]
    return seen == cells


def corners(path: list[Cell]) -> list[Cell]:
    """The cells of ``path`` after its start where its direction changes, and its end."""
    out = []
    for i in range(1, len(path)):
        step = (path[i][0] - path[i - 1][0], path[i][1] - path[i - 1][1])
        if i + 1 == len(path) or (path[i + 1][0] - path[i][0], path[i + 1][1] - path[i][1]) != step:
            out.append(path[i])
    return out


def wrap(angle: float) -> float:
    """``angle`` in ``[-pi, pi)``."""
    return (angle + math.pi) % (2 * math.pi) - math.pi


def steer(pos: np.ndarray, heading: float, target: np.ndarray) -> int:
    """The waypoint controller: the discrete action that drives from ``pos`` toward ``target``."""
    delta = target - pos
    error = wrap(math.atan2(delta[1], delta[0]) - heading)
    if abs(error) > math.radians(35) or (abs(error) > math.radians(10) and np.hypot(*delta) < 1.5):
        return LEFT if error > 0 else RIGHT
    if abs(error) > math.radians(8):
        return FORWARD_LEFT if error > 0 else FORWARD_RIGHT
    return FORWARD


def estimate_steps(pos: np.ndarray, heading: float, points: list[np.ndarray]) -> float:
    """Steps to drive through ``points``: distance over :data:`SPEED`, turns over :data:`TURN`."""
    steps = 0.0
    for point in points:
        delta = point - pos
        direction = math.atan2(delta[1], delta[0])
        steps += abs(wrap(direction - heading)) / TURN + float(np.hypot(*delta)) / SPEED
        pos, heading = point, direction
    return 1.1 * steps + 2.0


@dataclass(frozen=True)
class Scene:
    """What one episode randomised (all drawn from the env's seeded random state)."""

    wall_textures: tuple[str, ...]
    """Wall texture of each room (labmaze ``style_01`` names)."""
    objects: tuple[tuple[Cell, int], ...]
    """Each object's cell and colour (index into Memory Maze's ``TARGET_COLORS``)."""
    start_room: int
    start_cell: Cell
    start_heading: float


class Route:
    """The scripted policy of one phase: drive to random cells of ``visits`` rooms, in order.

    Each room visit gets an equal share of the phase's remaining steps (``end - t``); the last
    visit explores until the phase ends.
    """

    def __init__(self, world: _World, visits: list[int], end: int, rng: np.random.RandomState):
        self._world, self._visits, self._end, self._rng = world, visits, end, rng
        self._visit = -1
        self._budget = self._visit_start = 0.0
        self._points: list[np.ndarray] = []
        self._goal_start = 0
        self._goal_estimate = 0.0

    def action(self, t: int, pos: np.ndarray, heading: float) -> int:
        """The action at observation index ``t`` with the walker at ``pos`` facing ``heading``."""
        while self._points and np.hypot(*(self._points[0] - pos)) < (
            0.5 if len(self._points) == 1 else 0.7
        ):
            self._points.pop(0)
        stuck = t - self._goal_start > 2 * self._goal_estimate + 20
        if not self._points or stuck:
            self._next_goal(t, pos, heading)
        return steer(pos, heading, self._points[0])

    def _next_goal(self, t: int, pos: np.ndarray, heading: float) -> None:
        here = self._world.cell_of(pos)
        fresh = self._visit < 0
        if fresh:
            self._start_visit(t)
        while True:
            _, points, estimate = self._plan(here, pos, heading, self._visits[self._visit])
            last = self._visit == len(self._visits) - 1
            if fresh or last or t - self._visit_start + estimate <= self._budget:
                break
            self._start_visit(t)  # this room's share is spent: on to the next room
            fresh = True
        self._points = points
        self._goal_start, self._goal_estimate = t, estimate

    def _plan(
        self, here: Cell, pos: np.ndarray, heading: float, room: int
    ) -> tuple[Cell, list[np.ndarray], float]:
        """A random cell of ``room`` 2+ cells from ``here``: its path's corners and their cost."""
        cells = [
            c
            for c in self._world.room_cells(room)
            if max(abs(c[0] - here[0]), abs(c[1] - here[1])) >= 2
        ]
        goal = cells[self._rng.randint(len(cells))]
        path = shortest_path(self._world.passable, here, goal)
        points = [self._world.to_world(c) for c in corners(path)] or [self._world.to_world(goal)]
        return goal, points, estimate_steps(pos, heading, points)

    def _start_visit(self, t: int) -> None:
        self._visit += 1
        self._visit_start = t
        self._budget = (self._end - t) / (len(self._visits) - self._visit)


class _World:
    """A built episode's geometry: the layout, the objects' cells and grid/world conversions."""

    def __init__(self, layout: Layout, scene: Scene) -> None:
        self.layout = layout
        blocked = {cell for cell, _ in scene.objects}
        self.passable = frozenset(layout.free - blocked)
        rows, cols = layout.shape
        self._offset = np.array([(cols - 1) / 2, (rows - 1) / 2])

    def room_cells(self, room: int) -> list[Cell]:
        return [c for c in self.layout.rooms[room] if c in self.passable]

    def to_world(self, cell: Cell) -> np.ndarray:
        """The centre of ``cell`` in world ``(x, y)`` metres (dm_control's maze convention)."""
        return np.array([cell[1] - self._offset[0], self._offset[1] - cell[0]]) * XY_SCALE

    def cell_of(self, pos: np.ndarray) -> Cell:
        """The passable cell nearest to world position ``pos``."""
        col, row = self._offset[0] + pos[0] / XY_SCALE, self._offset[1] - pos[1] / XY_SCALE
        r, c = round(row), round(col)
        near = [(r + dr, c + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)]
        near = [cell for cell in near if cell in self.passable] or [(r, c)]
        return min(near, key=lambda cell: (cell[0] - row) ** 2 + (cell[1] - col) ** 2)


# --- the MuJoCo scene -------------------------------------------------------------------------


def sample_scene(layout: Layout, wall_textures: list[str], rng: np.random.RandomState) -> Scene:
    """Objects (rejected until every room stays connected), start room, cell and heading."""
    objects: list[tuple[Cell, int]] = []
    for room in layout.rooms:
        allowed = [c for c in room if c not in layout.doorside]
        while True:
            picks = [allowed[i] for i in rng.choice(len(allowed), OBJECTS_PER_ROOM, replace=False)]
            if connected({c for c in room if c not in picks}):
                break
        objects += [(cell, int(rng.randint(6))) for cell in picks]
    start_room = int(rng.randint(len(layout.rooms)))
    taken = {cell for cell, _ in objects}
    cells = [c for c in layout.rooms[start_room] if c not in taken]
    start_cell = cells[rng.randint(len(cells))]
    heading = float(rng.uniform(-math.pi, math.pi))
    return Scene(tuple(wall_textures), tuple(objects), start_room, start_cell, heading)


def _build_world(layout: Layout, rng: np.random.RandomState) -> Any:
    """The composer environment of ``layout`` (walker, arena, task) using ``rng``."""
    import labmaze
    from dm_control import composer, mjcf
    from dm_control.locomotion.arenas import labmaze_textures, mazes
    from labmaze import assets as labmaze_assets
    from memory_maze.maze import (
        TARGET_COLORS,
        FixedFloorTexture,
        FixedWallTexture,
        MazeWithTargetsArena,
        RollingBallWithFriction,
    )

    class WallTextureSet(labmaze_textures.WallTextures):
        """The named labmaze wall textures of ``style`` (Memory Maze's FixedWallTexture, many)."""

        def _build(self, style: str, names: tuple[str, ...]) -> None:
            paths = labmaze_assets.get_wall_texture_paths(style)
            self._mjcf_root = mjcf.RootElement(model="labmaze_" + style)
            self._textures = [
                self._mjcf_root.asset.add("texture", type="2d", name=name, file=paths[name])
                for name in names
            ]

    class RoomsArena(MazeWithTargetsArena):
        """Memory Maze's arena (seeded wall textures, room floors) on a fixed labmaze layout."""

        def _build(self, **kwargs: Any) -> None:
            mazes.MazeWithTargets._build(self, **kwargs)

    class RoomsTask(composer.Task):
        """Walker in the rooms; per episode: wall textures, objects, start pose. No reward."""

        def __init__(self) -> None:
            self.walker = RollingBallWithFriction(camera_height=0.3)  # as Memory Maze
            maze = labmaze.FixedMazeWithRandomGoals(layout.text, layout.variations())
            style = WallTextureSet("style_01", ROOM_WALL_TEXTURES)
            self.arena = RoomsArena(
                maze=maze,
                xy_scale=XY_SCALE,
                z_height=1.5,
                floor_textures=FixedFloorTexture("style_01", ["blue", "blue_bright"]),
                wall_textures={
                    "*": FixedWallTexture("style_01", CORRIDOR_WALL_TEXTURE),
                    **{str(i): style for i in range(len(layout.rooms))},
                },
            )
            self.walker.create_root_joints(self.arena.attach(self.walker))
            self.objects = [
                self.arena.mjcf_model.worldbody.add(
                    "geom",
                    name=f"object_{i}",
                    type="sphere",
                    size=[OBJECT_RADIUS],
                    contype=0,
                    conaffinity=0,
                )
                for i in range(OBJECTS_PER_ROOM * len(layout.rooms))
            ]
            self.set_timesteps(
                control_timestep=1.0 / CONTROL_FREQ, physics_timestep=PHYSICS_TIMESTEP
            )
            for observable in self.walker.observables.as_dict().values():
                observable.enabled = False  # the env renders the camera itself
            self.scene: Scene | None = None

        @property
        def root_entity(self) -> Any:
            return self.arena

        def initialize_episode_mjcf(self, random_state: np.random.RandomState) -> None:
            self.arena.regenerate(random_state)  # draws the wall textures
            textures = self.arena._current_wall_texture
            names = [textures[str(i)].name for i in range(len(layout.rooms))]
            self.scene = sample_scene(layout, names, random_state)
            world = _World(layout, self.scene)
            for geom, (cell, colour) in zip(self.objects, self.scene.objects, strict=True):
                geom.pos = [*world.to_world(cell), 0.0]
                geom.rgba = [*TARGET_COLORS[colour], 1.0]

        def initialize_episode(self, physics: Any, random_state: np.random.RandomState) -> None:
            assert self.scene is not None
            x, y = _World(layout, self.scene).to_world(self.scene.start_cell)
            h = -self.scene.start_heading  # the steer joint turns about -z
            self.walker.set_pose(physics, [x, y, 0.0], [math.cos(h / 2), 0.0, 0.0, math.sin(h / 2)])

        def get_reward(self, physics: Any) -> float:
            return 0.0

    task = RoomsTask()
    return composer.Environment(task=task, random_state=rng, strip_singleton_obs_buffer_dim=True)


class RoomsEnv(SeededAtBuild):
    """One rooms task as a Gymnasium env with its scripted policy (a :class:`ScriptedTask`).

    ``step`` returns ``terminated=False`` and ``truncated=True`` at the episode's last
    observation (index ``context_length + query_length - 1``); the reward is always 0.
    """

    def __init__(self, layout: Layout, *, teleport: bool) -> None:
        super().__init__(RESOLUTION, NUM_ACTIONS)
        self.layout = layout
        self.teleport = teleport
        self.context_length = layout.context_length
        self.query_length = layout.query_length
        self._rng = np.random.RandomState(0)

    # -- building and resetting
    def _build(self, seed: int) -> Any:
        self._rng = np.random.RandomState(seed)
        return _build_world(self.layout, self._rng)

    def _first_obs(self) -> np.ndarray:
        from dm_control.mujoco import Camera

        self._env.reset()  # a new episode recompiles the model: a new camera
        self._task = self._env.task
        self._camera = Camera(self._env.physics, RESOLUTION, RESOLUTION, "walker/egocentric")
        self._world = _World(self.layout, self._task.scene)
        self._t = 0
        self._states: list[np.ndarray] = []
        self._actions: list[int] = []
        self._teleport_to: int | None = None
        scene = self._task.scene
        n = len(self.layout.rooms)
        visits = [(scene.start_room + i) % n for i in range(n + 1)]
        self._route = Route(self._world, visits, self.context_length, self._rng)
        self._query_route: Route | None = None
        self._save_state()
        return self._render()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, _ = super().reset(seed=seed, options=options)
        return obs, self._info()

    @property
    def scene(self) -> Scene:
        """What the current episode randomised."""
        return self._task.scene

    # -- acting
    def scripted_action(self) -> int:
        """The data-collecting policy's action at the current observation."""
        t, c = self._t, self.context_length
        if t < c - 1 or (t == c - 1 and not self.teleport):
            return self._route.action(t, *self._pose())
        if t == c - 1:
            return NOOP  # ignored: this step teleports
        k = self._teleport_to
        if k is not None and k + t - c < c - 1:  # replay the action taken at k + (t - c)
            return self._actions[k + t - c]
        if self._query_route is None:
            n = len(self.layout.rooms)
            start = self.scene.start_room
            visits = [(start + i) % n for i in range(1, n + 1)]
            end = self.context_length + self.query_length - 1
            self._query_route = Route(self._world, visits, end, self._rng)
        return self._query_route.action(t, *self._pose())

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        last = self.context_length + self.query_length - 1
        if self._t >= last:
            raise RuntimeError("the episode has ended: call reset()")
        if self.teleport and self._t == self.context_length - 1:
            self._teleport_to = int(self._rng.randint(self.context_length - 1))
            self._set_state(self._states[self._teleport_to])
        else:
            self._env.step(ACTIONS[int(action)])
            if self._t < self.context_length - 1:
                self._actions.append(int(action))
        self._t += 1
        if self._t < self.context_length:
            self._save_state()
        return self._render(), 0.0, False, self._t == last, self._info()

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    # -- helpers
    def _info(self) -> dict[str, Any]:
        pos, heading = self._pose()
        info: dict[str, Any] = {
            "phase": "context" if self._t < self.context_length else "query",
            "room": self.layout.room_of(self._world.cell_of(pos)),
            "pose": np.array([*pos, heading]),
        }
        if self._teleport_to is not None:
            info["teleport_to"] = self._teleport_to
            info["replay"] = self._teleport_to + self._t - self.context_length < self.context_length
        return info

    def _pose(self) -> tuple[np.ndarray, float]:
        body = self._env.physics.bind(self._task.walker.root_body)
        xmat = np.asarray(body.xmat).reshape(3, 3)
        return np.array(body.xpos[:2]), math.atan2(xmat[1, 1], xmat[0, 1])

    def _render(self) -> np.ndarray:
        return self._camera.render().copy()  # the camera returns a view of its own buffer

    def _save_state(self) -> None:
        import mujoco

        physics = self._env.physics
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.empty(mujoco.mj_stateSize(physics.model.ptr, spec))
        mujoco.mj_getState(physics.model.ptr, physics.data.ptr, state, spec)
        self._states.append(state)

    def _set_state(self, state: np.ndarray) -> None:
        import mujoco

        physics = self._env.physics
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        mujoco.mj_setState(physics.model.ptr, physics.data.ptr, state, spec)
        mujoco.mj_forward(physics.model.ptr, physics.data.ptr)


def make(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """A rooms task, observations ``(3, size, size)``; ``train`` changes nothing."""
    if name not in NAMES:
        raise unknown_env(name, NAMES)
    require_memory_maze(name)
    layout = LAYOUTS[name.removesuffix(TELEPORT)]
    return finish(RoomsEnv(layout, teleport=name.endswith(TELEPORT)), size=size, seed=seed)
