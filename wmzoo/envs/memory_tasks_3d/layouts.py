"""The fixed rooms layouts (after the s4wm paper's Figure 2) and what each episode randomises on
them: wall textures, objects, start room, cell and heading (see the package docstring)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from wmzoo.envs.memory_tasks_3d.planning import Cell, connected

XY_SCALE = 2.0  # metres per layout cell, as in Memory Maze
OBJECTS_PER_ROOM = 2

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
