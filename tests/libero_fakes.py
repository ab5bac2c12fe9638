"""LIBERO demonstration files written in LIBERO's exact layout (its own files cannot be
downloaded): for the import tests and the output-path tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def write_libero(path: Path, lengths: list[int], instruction: str, *, suite: str = "libero_spatial",
                 convention: str | None = "opengl", size: int = 16, seed: int = 0) -> dict[str, dict]:
    """A LIBERO demonstration file as LIBERO's scripts/create_dataset.py writes it; returns each
    demo's arrays. Every frame is distinct: red = 8 * demo + t, green = row, blue = column (so a
    flip, transpose or shift shows)."""
    rng = np.random.default_rng(seed)
    demos = {}
    import h5py

    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_name"] = "Libero_Tabletop_Manipulation"
        data.attrs["problem_info"] = json.dumps({"problem_name": "libero_tabletop_manipulation",
                                                 "domain_name": "robosuite", "language_instruction": instruction})
        data.attrs["bddl_file_name"] = f"libero/libero/bddl_files/{suite}/{instruction.replace(' ', '_')}.bddl"
        if convention is not None:
            data.attrs["macros_image_convention"] = convention
        data.attrs["env_args"] = json.dumps({"type": 1, "env_name": "Libero_Tabletop_Manipulation"})
        for i, steps in enumerate(lengths):
            rows, cols = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
            frames = np.stack([np.stack([np.full((size, size), 8 * i + t), 7 * rows, 5 * cols + 1], -1)
                               for t in range(steps)]).astype(np.uint8)
            actions = rng.uniform(-1, 1, (steps, 7))  # float64, as LIBERO stores them
            actions[:, -1] = np.sign(actions[:, -1])
            done = np.zeros(steps, np.uint8)
            done[-1] = 1
            demo = data.create_group(f"demo_{i}")
            obs = demo.create_group("obs")
            obs.create_dataset("agentview_rgb", data=frames)
            obs.create_dataset("eye_in_hand_rgb", data=frames[:, ::-1, ::-1])
            obs.create_dataset("joint_states", data=rng.normal(size=(steps, 7)))
            demo.create_dataset("actions", data=actions)
            demo.create_dataset("states", data=rng.normal(size=(steps, 9)))
            demo.create_dataset("rewards", data=done.copy())
            demo.create_dataset("dones", data=done)
            demo.attrs["num_samples"] = steps
            demos[f"demo_{i}"] = {"frames": frames, "actions": actions, "rewards": done, "dones": done}
        data.attrs["num_demos"] = len(lengths)
        data.attrs["total"] = sum(lengths)
    return demos
