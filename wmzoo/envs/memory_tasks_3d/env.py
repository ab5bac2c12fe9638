"""The rooms tasks as Gymnasium envs: the MuJoCo world on Memory Maze's engine, the teleport
variants, and :func:`make` (see the package docstring)."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from wmzoo.envs.memory_maze import NUM_ACTIONS, RESOLUTION, require_memory_maze
from wmzoo.envs.memory_tasks_3d.driver import ACTIONS, NOOP, Route, World
from wmzoo.envs.memory_tasks_3d.layouts import (
    LAYOUTS,
    NAMES,
    OBJECTS_PER_ROOM,
    TELEPORT,
    XY_SCALE,
    Layout,
    Scene,
    sample_scene,
)
from wmzoo.envs.wrappers import SeededAtBuild, finish, unknown_env

CONTROL_FREQ = 4.0  # Memory Maze's DEFAULT_CONTROL_FREQ
PHYSICS_TIMESTEP = 0.005  # Memory Maze's DEFAULT_PHYSICS_TIMESTEP
OBJECT_RADIUS = 0.6  # Memory Maze's target_radius; centred on the floor (half buried)
CORRIDOR_WALL_TEXTURE = "yellow"  # Memory Maze's default ("*") wall texture
# labmaze style_01 wall textures a room may get: all but the corridors'
ROOM_WALL_TEXTURES = ("blue", "cerise", "green_bright", "green", "purple", "red_bright", "red")


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
            world = World(layout, self.scene)
            for geom, (cell, colour) in zip(self.objects, self.scene.objects, strict=True):
                geom.pos = [*world.to_world(cell), 0.0]
                geom.rgba = [*TARGET_COLORS[colour], 1.0]

        def initialize_episode(self, physics: Any, random_state: np.random.RandomState) -> None:
            assert self.scene is not None
            x, y = World(layout, self.scene).to_world(self.scene.start_cell)
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
        self._world = World(self.layout, self._task.scene)
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
