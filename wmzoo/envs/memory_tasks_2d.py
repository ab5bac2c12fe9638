"""The s4wm paper's 2D memory tasks on MiniGrid: Distracting Memory and Multi Doors Keys.

Source: "Facing Off World Model Backbones" (s4wm paper), section 5.5 (reward prediction,
Distracting Memory, Table 2), section 5.6 (memory-based reasoning, Multi Doors Keys, Table 3),
Figure 2 (top-down views) and appendix A (10K scripted trajectories per task, split 8K/1K/1K; 2D
images are ``40x40x3``). The authors' code is not public; what the paper leaves open is chosen here
and named under *Deviations and choices*.

Observation: the agent's local, allocentric ``5x5``-cell top-down view centred on the agent, drawn
with MiniGrid's tiles at 8 px (``5 * 8 = 40``, the paper's resolution; MiniGrid's red triangle
marks the agent and the direction of its last move). :func:`make` resizes it to ``size`` through
:func:`~wmzoo.envs.wrappers.finish` like every adapter: **the paper's datasets use** ``size=40``
(no resizing); the registry's default of 64 enlarges the tiles. ``env.render()`` gives the whole
grid from above (Figure 2's view).

Episodes and phases (the paper's ``context | query`` labels, e.g. ``199 | 51``): an episode
recorded with the scripted policy (``env.unwrapped.scripted_action()``, the
:class:`~wmzoo.envs.scripted.ScriptedTask` protocol) has exactly ``context_length + query_length``
observations (rows, as in :mod:`wmzoo.interfaces`), i.e. ``context_length + query_length - 1``
steps. Rows ``0 .. context_length - 1`` are the context phase (``info["phase"] == "context"``: the
reset observation and the ``context_length - 1`` steps of the context script), the others the query
phase (one row per query action). Every env truncates at ``context_length + query_length - 1``
steps.

**Distracting Memory** (``distracting-memory-{100,200,400}``, the width, and the shorter
``-8`` and ``-20`` of the same formula; ``199|51``, ``399|101``,
``799|201``). A room on the left holds a coloured square (the cue); a 1-cell hallway of ``width``
cells, each holding a floor tile of a random colour (a distractor, drawn dimmer as MiniGrid draws
floors) with probability 1/2, leads to a junction with two coloured squares of different colours
(not red, the agent's colour), above and below it; the cue's colour is one of the two. Section 5.5:
"Each episode terminates when the agent reaches one of the squares on the right. A reward of 1 is
given if the square reached is of the same color as the square in the room on the left. Otherwise,
no reward is given." Actions (4): move right, down, left, up (MiniGrid's direction indices).
Script: "In the context phase, the data collecting policy starts in the middle of the hallway, then
traverses the hallway and returns to the starting position. In the query phase, the policy goes to
one of the two squares on the right uniformly at random." From hallway cell ``width / 2`` it walks
to cell 0 (where the cue is in view), to cell ``width - 1`` (the two squares in view) and back:
``2 * width - 2`` moves, so ``context_length = 2 * width - 1``; then it walks right to the junction
and steps onto the chosen square: ``width / 2 + 1`` moves ``= query_length``. These are the paper's
numbers exactly: nothing is padded.

**Multi Doors Keys** (``multi-doors-keys-{3,5,7}``, the number of keys; ``76|174``, ``170|380``,
``296|654``). A square room (interior side 10, 14, 17) with ``k`` keys on its floor and ``k``
locked doors in its walls; the doors' colours are the keys' colours (drawn from MiniGrid's five
non-grey colours, repeats allowed) shuffled. Section 5.6: "Each time a door is unlocked, the
corresponding key will be consumed, so it cannot be used to unlock other doors of the same color.
The agent is allowed to possess multiple keys." Keys held are not drawn (as in MiniGrid), so the
model has to remember them. Actions (7): move right, down, left, up (moving towards a key, a door
or a wall turns the agent to face it without moving), pick up the key in front, unlock the door in
front (succeeds when a key of its colour is held, which is then consumed; the door opens and stays
open; doors lead nowhere and are never walked through), wait. Script: "In the context phase, the
agent visits all keys and doors without picking up any keys. In the query phase, the agent attempts
to unlock two random doors after picking up each key. After all keys are picked up, the agent will
try to unlock each door once again." Visiting means standing next to the object facing it; keys and
doors are visited, picked up and tried in uniformly random orders along shortest paths. Reward: the
paper measures memory-based reasoning by the generation MSE (Table 3: "we find the generation MSE
to be a good indicator of how well the model predicts the future door states"; "To successfully
predict the outcome when the agent attempts to unlock a door, the world model must constantly
update its memory when a key is picked up or consumed") and gives this task no reward; here an
unlock that opens a door pays 1 (every other step 0), and ``info["unlock_attempt"]`` flags the
steps that try to unlock a door, so the outcome of each attempt is also a reward to predict
(:mod:`wmzoo.eval.memory`'s ``reasoning`` protocol). The episode never terminates; it is truncated
after ``context_length + query_length - 1`` steps.

Deviations and choices (the paper does not give them): the layouts above (cell sizes, cue position,
distractor probability 1/2, room sides, keys on the cells with both coordinates even, which keeps
them apart and off the walls), and the absolute-direction action sets (they give the paper's
Distracting Memory lengths exactly; MiniGrid's turn/forward actions would not). A Multi Doors Keys
script's length depends on the random layout and orders, so **a phase whose script ends early is
filled with the wait action** (the context script waits at the end of the context phase, the query
script at the end of the episode; a script that is interrupted by the end of its phase never
happens: a layout whose scripts would overrun a phase is redrawn at reset, after running them
without drawing). The room sides are chosen so that the scripts fill about 60 % of the phases with
overruns rare: over 300 seeds each, waits are 42 %, 39 %, 39 % of the context rows and 38 %, 35 %,
35 % of the query rows for 3, 5, 7 keys, and no layout was redrawn.

Generation speed, measured with :func:`wmzoo.data.record.record_episode` (the scripted policy,
``size=40``, one process, observations drawn at every step) on a shared 2-core machine under a load
of ~10: episodes and frames per second of process CPU time (wall-clock rates were ~3x lower under
that load; repeated runs varied by up to 2x)::

    task                     rows/episode  episodes/s  frames/s
    distracting-memory-100            250          54     13000
    distracting-memory-200            500          34     17000
    distracting-memory-400           1000          17     17000
    multi-doors-keys-3                250          49     12000
    multi-doors-keys-5                550          19     10000
    multi-doors-keys-7                950           9      8600
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from minigrid.core.constants import DIR_TO_VEC
from minigrid.core.grid import Grid
from minigrid.core.mission import MissionSpace
from minigrid.core.world_object import Door, Floor, Goal, Key, Wall, WorldObj
from minigrid.minigrid_env import MiniGridEnv

from wmzoo.envs.wrappers import finish, require, unknown_env

VIEW_CELLS = 5
"""The local view: ``5x5`` cells centred on the agent."""
TILE_SIZE = 8
"""Pixels per cell: ``5 * 8 = 40``, the paper's 2D resolution (appendix A)."""
RESOLUTION = VIEW_CELLS * TILE_SIZE
COLOURS = ("red", "green", "blue", "purple", "yellow")
"""MiniGrid's colours less grey (the walls' colour)."""
SQUARE_COLOURS = COLOURS[1:]
"""Distracting Memory's cue and squares: not red, the agent's colour, so that the agent stays
visible on the square it reaches."""

RIGHT, DOWN, LEFT, UP = 0, 1, 2, 3
"""Move actions; their values are MiniGrid's direction indices (``DIR_TO_VEC``)."""
STEPS = tuple((int(dx), int(dy)) for dx, dy in DIR_TO_VEC)
"""The cell offset of each move, as Python ints."""
PICKUP, UNLOCK, WAIT = 4, 5, 6
"""Multi Doors Keys' further actions."""

DISTRACTING_MEMORY = {8: (15, 5), 20: (39, 11), 100: (199, 51), 200: (399, 101), 400: (799, 201)}
"""Width -> (context, query) observations: 100, 200, 400 are Table 2's; 8 and 20 are wmzoo's short
hallways by the same formula (context ``2w - 1``, query ``w/2 + 1``), a span a CPU-scale run can
learn across (issue: the s4wm ordering at CPU scale)."""
MULTI_DOORS_KEYS = {3: (76, 174), 5: (170, 380), 7: (296, 654)}
"""Number of keys -> (context, query) observations, Table 3."""
ROOM_SIDE = {3: 10, 5: 14, 7: 17}
"""Number of keys -> interior side of the Multi Doors Keys room (see the module docstring)."""
DISTRACTOR_PROBABILITY = 0.5

_OUTSIDE = Wall()  # what the view shows beyond the grid
_TILES: dict[tuple[Any, int | None], np.ndarray] = {}  # (object code, agent direction) -> tile


class Square(Goal):
    """A full coloured square the agent can stand on (MiniGrid's goal tile in any colour)."""

    def __init__(self, color: str) -> None:
        WorldObj.__init__(self, "goal", color)


class MemoryGridEnv(MiniGridEnv):
    """A MiniGrid world seen through the local top-down view, with the paper's two phases.

    Subclasses build the grid in ``_gen_grid``, act in ``_act`` and script in ``scripted_action``.
    """

    def __init__(
        self, *, width: int, height: int, context_length: int, query_length: int,
        num_actions: int, mission: str,
    ) -> None:  # fmt: skip
        super().__init__(
            mission_space=MissionSpace(mission_func=lambda: mission),
            width=width,
            height=height,
            max_steps=context_length + query_length - 1,
            see_through_walls=True,
            agent_view_size=VIEW_CELLS,
            render_mode="rgb_array",
            highlight=False,
            tile_size=TILE_SIZE,
        )
        self.context_length = context_length
        self.query_length = query_length
        self.observation_space = spaces.Box(0, 255, (RESOLUTION, RESOLUTION, 3), np.uint8)
        self.action_space = spaces.Discrete(num_actions)

    # -- Gymnasium API -----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        gym.Env.reset(self, seed=seed)
        self.step_count = 0
        self.carrying = None
        self._gen_grid(self.width, self.height)
        return self.view(), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        action = int(action)
        if not self.action_space.contains(action):
            raise ValueError(f"action {action} is not in {self.action_space}")
        self.step_count += 1
        reward, terminated = self._act(action)
        truncated = not terminated and self.step_count >= self.max_steps
        return self.view(), reward, terminated, truncated, self._info()

    def _act(self, action: int) -> tuple[float, bool]:
        raise NotImplementedError

    def scripted_action(self) -> int:
        """The data-collecting policy's action in the current state (:class:`ScriptedTask`)."""
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------------------------
    @property
    def in_context(self) -> bool:
        """Whether the next action belongs to the context script (its observation is a context
        row)."""
        return self.step_count + 1 < self.context_length

    def _info(self) -> dict[str, Any]:
        return {"phase": "context" if self.step_count < self.context_length else "query"}

    def cell(self, pos: tuple[int, int]) -> WorldObj | None:
        """The object at ``pos``; a wall outside the grid."""
        x, y = pos
        if 0 <= x < self.width and 0 <= y < self.height:
            return self.grid.get(x, y)
        return _OUTSIDE

    def walkable(self, pos: tuple[int, int]) -> bool:
        """Empty cells and floor-like tiles; doors never (they lead out of the grid)."""
        obj = self.cell(pos)
        return obj is None or (obj.can_overlap() and not isinstance(obj, Door))

    def front(self) -> tuple[int, int]:
        """The cell the agent faces."""
        dx, dy = STEPS[self.agent_dir]
        return (self.agent_pos[0] + dx, self.agent_pos[1] + dy)

    def move(self, direction: int) -> None:
        """Face ``direction`` and step there when the cell is walkable."""
        self.agent_dir = direction
        if self.walkable(self.front()):
            self.agent_pos = self.front()

    def view(self) -> np.ndarray:
        """The ``(40, 40, 3)`` top-down view of the ``5x5`` cells around the agent."""
        ax, ay = self.agent_pos
        r = VIEW_CELLS // 2
        tiles, cells, width = [], self.grid.grid, self.width
        for y in range(ay - r, ay + r + 1):
            inside = 0 <= y < self.height
            for x in range(ax - r, ax + r + 1):
                obj = cells[y * width + x] if inside and 0 <= x < width else _OUTSIDE
                agent = self.agent_dir if (x, y) == (ax, ay) else None
                key = (obj.encode() if obj is not None else None, agent)
                tile = _TILES.get(key)
                if tile is None:  # MiniGrid's tile, rounded down to uint8 as its Grid.render does
                    tile = Grid.render_tile(obj, agent_dir=agent, tile_size=TILE_SIZE)
                    tile = _TILES[key] = tile.astype(np.uint8)
                tiles.append(tile)
        grid = np.stack(tiles).reshape(VIEW_CELLS, VIEW_CELLS, TILE_SIZE, TILE_SIZE, 3)
        return grid.transpose(0, 2, 1, 3, 4).reshape(RESOLUTION, RESOLUTION, 3)


# --------------------------------------------------------------------------- Distracting Memory


class DistractingMemoryEnv(MemoryGridEnv):
    """Distracting Memory of a given hallway ``width`` (section 5.5; see the module docstring).

    Grid (``width + 5`` x 5 cells): the room's interior is ``x`` 1..2, ``y`` 1..3 with the cue at
    ``(1, 2)``; hallway cell ``i`` is ``(3 + i, 2)``; the junction is ``(width + 3, 2)`` with the
    squares at ``(width + 3, 1)`` and ``(width + 3, 3)``.
    """

    def __init__(self, width: int) -> None:
        context, query = DISTRACTING_MEMORY[width]
        self.hallway = width
        super().__init__(
            width=width + 5, height=5, context_length=context, query_length=query, num_actions=4,
            mission="go to the square of the colour shown in the room on the left",
        )  # fmt: skip

    @property
    def start(self) -> tuple[int, int]:
        """The middle of the hallway, where every episode starts."""
        return (3 + self.hallway // 2, 2)

    @property
    def squares(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """The two squares on the right (upper, lower)."""
        x = self.hallway + 3
        return (x, 1), (x, 3)

    def _gen_grid(self, width: int, height: int) -> None:
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, width, height)
        for x in range(3, width - 2):  # hallway walls
            self.grid.set(x, 1, Wall())
            self.grid.set(x, 3, Wall())
        colours = self._rand_subset(SQUARE_COLOURS, 2)
        self.cue = colours[self._rand_int(0, 2)]
        self.grid.set(1, 2, Square(self.cue))
        for pos, colour in zip(self.squares, colours):
            self.grid.set(*pos, Square(colour))
        for x in range(3, 3 + self.hallway):
            if self.np_random.random() < DISTRACTOR_PROBABILITY:
                self.grid.set(x, 2, Floor(self._rand_elem(COLOURS)))
        self.agent_pos, self.agent_dir = self.start, RIGHT
        self.target = self.squares[self._rand_int(0, 2)]  # the query script's square
        # the context script's waypoints: hallway cell 0, cell width - 1, back to the start
        self.waypoints = [(3, 2), (self.hallway + 2, 2), self.start]

    def _act(self, action: int) -> tuple[float, bool]:
        self.move(action)
        if self.waypoints and self.agent_pos == self.waypoints[0]:
            self.waypoints.pop(0)
        if self.agent_pos in self.squares:
            return float(self.grid.get(*self.agent_pos).color == self.cue), True
        return 0.0, False

    def scripted_action(self) -> int:
        if self.in_context and self.waypoints:
            return LEFT if self.waypoints[0][0] < self.agent_pos[0] else RIGHT
        x, y = self.target
        if self.agent_pos[0] < x:
            return RIGHT
        return UP if y < self.agent_pos[1] else DOWN


# --------------------------------------------------------------------------- Multi Doors Keys


class MultiDoorsKeysEnv(MemoryGridEnv):
    """Multi Doors Keys with ``num_keys`` keys and doors (section 5.6; see the module docstring).

    The room's interior is ``1..side`` on both axes inside a wall ring that holds the doors; keys
    lie on the cells whose coordinates are both even, away from the walls.
    """

    data_version = 2
    """1 judged the task the context's last action finished against the query script, so
    :meth:`_scripts_fit` redrew layouts that fit: the same seed can draw another layout in 2."""

    def __init__(self, num_keys: int) -> None:
        context, query = MULTI_DOORS_KEYS[num_keys]
        self.num_keys = num_keys
        self.side = ROOM_SIDE[num_keys]
        super().__init__(
            width=self.side + 2, height=self.side + 2, context_length=context,
            query_length=query, num_actions=7, mission="pick up keys and unlock doors",
        )  # fmt: skip

    def _gen_grid(self, width: int, height: int) -> None:
        while True:  # redraw the (rare) layouts whose scripts would not fit the phases
            rng_state = self.np_random.bit_generator.state
            self._draw(width, height)
            if self._scripts_fit():
                break
        self.np_random.bit_generator.state = rng_state
        self._draw(width, height)  # the same layout again, fresh

    def _scripts_fit(self) -> bool:
        """Run the scripts on the layout just drawn (without drawing observations): whether each
        phase's script ends within the phase."""
        for t in range(self.max_steps):
            self.step_count = t
            action = self.scripted_action()
            self.step_count = t + 1
            self._act(action)
        self.step_count = 0
        return not self.context_plan and not self.query_plan

    def _draw(self, width: int, height: int) -> None:
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, width, height)
        k, side = self.num_keys, self.side
        lattice = [(x, y) for x in range(2, side, 2) for y in range(2, side, 2)]
        walls = [
            *((x, y) for x in range(1, side + 1) for y in (0, side + 1)),
            *((x, y) for y in range(1, side + 1) for x in (0, side + 1)),
        ]
        colours = [self._rand_elem(COLOURS) for _ in range(k)]
        self.keys = [lattice[i] for i in self.np_random.choice(len(lattice), k, replace=False)]
        self.doors = [walls[i] for i in self.np_random.choice(len(walls), k, replace=False)]
        for pos, colour in zip(self.keys, colours):
            self.grid.set(*pos, Key(colour))
        for pos, i in zip(self.doors, self.np_random.permutation(k)):
            self.grid.set(*pos, Door(colours[i], is_locked=True))
        self.held: list[str] = []
        free = [(x, y) for x in range(1, side + 1) for y in range(1, side + 1)]
        free = [p for p in free if p not in self.keys]
        self.agent_pos = free[self._rand_int(0, len(free))]
        self.agent_dir = self._rand_int(0, 4)
        # the scripts: (what to do, where); "visit" = stand next to it facing it
        order = self.np_random.permutation(2 * k)
        self.context_plan = [("visit", (self.keys + self.doors)[i]) for i in order]
        self.query_plan: list[tuple[str, tuple[int, int]]] = []
        for i in self.np_random.permutation(k):
            self.query_plan.append(("pickup", self.keys[i]))
            tries = self.np_random.choice(k, 2, replace=False)
            self.query_plan.extend(("unlock", self.doors[j]) for j in tries)
        self.query_plan.extend(("unlock", self.doors[j]) for j in self.np_random.permutation(k))
        self._route: tuple[tuple[int, int], dict[tuple[int, int], int]] = ((-1, -1), {})
        self.attempted = False  # whether the last step tried to unlock a door

    def _act(self, action: int) -> tuple[float, bool]:
        reward = 0.0
        target = self.front()
        self.attempted = action == UNLOCK and isinstance(self.cell(target), Door)
        if action < PICKUP:
            self.move(action)
        elif action == PICKUP and isinstance(self.cell(target), Key):
            self.held.append(self.grid.get(*target).color)
            self.grid.set(*target, None)
        elif action == UNLOCK:
            door = self.cell(target)
            if isinstance(door, Door) and door.is_locked and door.color in self.held:
                self.held.remove(door.color)
                door.is_locked, door.is_open = False, True
                reward = 1.0
        self._advance(action, target)
        return reward, False

    def _info(self) -> dict[str, Any]:
        return {**super()._info(), "unlock_attempt": self.attempted}

    def _plan(self) -> list[tuple[str, tuple[int, int]]]:
        return self.context_plan if self.in_context else self.query_plan

    def _advance(self, action: int, front: tuple[int, int]) -> None:
        """Drop the tasks that ``action`` finished from the script it belonged to (``step_count``
        has already counted it: the context's last action still belongs to the context)."""
        plan = self.context_plan if self.step_count < self.context_length else self.query_plan
        while plan:
            kind, pos = plan[0]
            done = {
                "visit": self.front() == pos,
                "pickup": not isinstance(self.cell(pos), Key),
                "unlock": action == UNLOCK and front == pos,
            }[kind]
            if not done:
                return
            plan.pop(0)
            action = -1  # one unlock action completes one task

    def scripted_action(self) -> int:
        plan = self._plan()
        while plan and plan[0][0] == "visit" and self.front() == plan[0][1]:
            plan.pop(0)  # already faced (e.g. the agent starts facing it): visited
        if not plan:
            return WAIT
        kind, pos = plan[0]
        if self.front() == pos:
            return PICKUP if kind == "pickup" else UNLOCK
        ax, ay = self.agent_pos
        if abs(pos[0] - ax) + abs(pos[1] - ay) == 1:  # next to it: turn towards it
            return STEPS.index((pos[0] - ax, pos[1] - ay))
        to, route = self._route  # cell -> move, cached per target
        if to != pos or self.agent_pos not in route:
            route = self._shortest_route(pos)
            self._route = (pos, route)
        return route[self.agent_pos]

    def _shortest_route(self, pos: tuple[int, int]) -> dict[tuple[int, int], int]:
        """Moves along a shortest path from the agent to a walkable cell next to ``pos``."""
        goals = {(pos[0] + dx, pos[1] + dy) for dx, dy in STEPS}
        start = self.agent_pos
        parent: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
        queue = deque([start])
        while queue:
            cell = queue.popleft()
            if cell in goals:
                route = {}
                while parent[cell] is not None:
                    cell, move = parent[cell]
                    route[cell] = move
                return route
            for move, (dx, dy) in enumerate(STEPS):
                nxt = (cell[0] + dx, cell[1] + dy)
                if nxt not in parent and self.walkable(nxt):
                    parent[nxt] = (cell, move)
                    queue.append(nxt)
        raise RuntimeError(f"no path from {start} to {pos}")  # the layouts are always connected


# --------------------------------------------------------------------------- factory

TASKS: dict[str, Callable[[], MemoryGridEnv]] = {
    **{f"distracting-memory-{w}": partial(DistractingMemoryEnv, w) for w in DISTRACTING_MEMORY},
    **{f"multi-doors-keys-{k}": partial(MultiDoorsKeysEnv, k) for k in MULTI_DOORS_KEYS},
}


def make(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """A 2D memory task, observations ``(3, size, size)`` (the paper: ``size=40``); ``train`` is
    unused. Unknown names raise :class:`~wmzoo.errors.UnknownNameError` with suggestions."""
    require("minigrid", name, "minigrid")
    if name not in TASKS:
        raise unknown_env(name, TASKS)
    return finish(TASKS[name](), size=size, seed=seed)
