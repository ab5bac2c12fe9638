"""The scripted data-collecting policy (s4wm paper, section 5.1): a waypoint controller on the
walker's pose, and the route that visits the rooms of a phase in order (see the package
docstring)."""

from __future__ import annotations

import math

import numpy as np

from wmzoo.envs.memory_maze import NUM_ACTIONS
from wmzoo.envs.memory_tasks_3d.layouts import XY_SCALE, Layout, Scene
from wmzoo.envs.memory_tasks_3d.planning import Cell, corners, shortest_path

# Memory Maze's discrete actions (memory_maze/tasks.py): [forward, turn] commands of the walker.
ACTIONS = np.array([[0, 0], [-1, 0], [0, -1], [0, 1], [-1, -1], [-1, 1]], dtype=np.float64)
NOOP, FORWARD, LEFT, RIGHT, FORWARD_LEFT, FORWARD_RIGHT = range(NUM_ACTIONS)

# Measured motion of the walker with these actions (used only to budget the route):
SPEED = 0.5  # metres per step when driving
TURN = math.radians(18.3)  # radians per turning step


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


class Route:
    """The scripted policy of one phase: drive to random cells of ``visits`` rooms, in order.

    Each room visit gets an equal share of the phase's remaining steps (``end - t``); the last
    visit explores until the phase ends.
    """

    def __init__(self, world: World, visits: list[int], end: int, rng: np.random.RandomState):
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


class World:
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
