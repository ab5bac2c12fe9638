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
``i`` has a corridor to room ``i + 1 (mod n)``. See :data:`.layouts.LAYOUTS`.

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

The package, bottom up: :mod:`.planning` (shortest paths on the layout grid),
:mod:`.layouts` (the layouts and what an episode randomises on them), :mod:`.driver` (the
scripted policy: waypoint controller and room route), :mod:`.env` (the MuJoCo world and the
Gymnasium env, :func:`make`).
"""

from wmzoo.envs.memory_tasks_3d.env import make

__all__ = ["make"]
