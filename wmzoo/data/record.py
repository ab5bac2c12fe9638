"""Recording one episode of an env into replay rows plus per-row extras, and writing it as a
reproducible chunk file.

Rows follow :mod:`wmzoo.interfaces` (``n`` steps are ``n + 1`` rows). Besides the row arrays an
episode holds what the env reports per observation: ``phase`` (0 context, 1 query) from
``info["phase"]``, ``probe_<name>`` from ``info["probe"]``, ``mission`` (unicode) from MiniGrid's
and BabyAI's ``info["mission"]`` and ``info_<key>`` for every numeric ``info[key]``
(``info_teleport_to``: -1 where absent). Row ``t``'s extras come from the info
returned with ``obs[t]`` (reset for row 0, step ``t - 1`` after). Episodes come from the env's
scripted policy (:mod:`wmzoo.envs.scripted`) when it has one, else from its expert, else from a
uniformly random policy.
:func:`write_episode` gives equal data equal bytes (fixed zip timestamps).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from wmzoo.atomic import atomic_path
from wmzoo.data.dataset import sha256
from wmzoo.data.store import obs_fields, row_fields
from wmzoo.errors import WmzooError
from wmzoo.interfaces import map_obs, stack_obs

PHASES = ("context", "query")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed member timestamps: byte-identical files per seed


def record_episode(
    env: Any, seed: int | None, max_steps: int | None = None
) -> tuple[dict[str, np.ndarray], bool]:
    """One episode of ``env`` from ``reset(seed=seed)`` as row arrays plus per-row extras.

    Actions come from the env's scripted policy when it has one (the episode then stops after
    ``context_length + query_length`` rows at the latest), else from its expert (BabyAI's bot,
    :func:`wmzoo.envs.scripted.expert_policy`), else uniformly at random from the action space
    seeded with ``seed`` (``seed=None``: the env's next episode, the action space's generator
    continued). ``max_steps`` caps the steps (rows: one more). Returns the arrays and whether the
    policy was scripted.
    """
    from wmzoo.envs.scripted import expert_policy, scripted_task

    task = scripted_task(env)
    expert = expert_policy(env) if task is None else None
    obs, info = env.reset(seed=seed)
    if task is None and seed is not None:
        env.action_space.seed(seed)
    limit = task.context_length + task.query_length if task is not None else None
    frames, infos, actions, rewards, terminals = [obs], [info], [], [], []
    while True:
        if task is not None:
            action = task.scripted_action()
        else:
            action = expert() if expert is not None else env.action_space.sample()
        obs, reward, terminated, truncated, info = env.step(action)
        frames.append(obs)
        infos.append(info)
        actions.append(action)
        rewards.append(reward)
        terminals.append(terminated)
        if terminated or truncated or (limit is not None and len(frames) >= limit):
            break
        if max_steps is not None and len(actions) >= max_steps:
            break
    action = np.asarray(actions)
    action = action.astype(np.int64) if action.dtype.kind in "iub" else action.astype(np.float32)
    data = {
        **obs_fields(map_obs(_stored, stack_obs(frames))),
        # the final observation's row: zero action, zero reward, not terminal (interfaces.py)
        "action": np.concatenate([action, np.zeros_like(action[:1])]),
        "reward": np.asarray([*rewards, 0.0], np.float32),
        "terminal": np.asarray([*terminals, False], np.bool_),
        "is_first": np.arange(len(frames)) == 0,
    }
    return {**data, **_info_arrays(infos)}, task is not None


def _stored(frames: np.ndarray) -> np.ndarray:
    """An entry's rows as stored: images uint8, vectors float32."""
    return frames.astype(np.uint8 if frames.ndim == 4 else np.float32, copy=False)


def _info_arrays(infos: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Per-row arrays of what the env reports: phase, probe targets, numeric info values."""
    out: dict[str, np.ndarray] = {}
    if any("phase" in i for i in infos):
        phases = [i.get("phase") for i in infos]
        bad = [p for p in phases if p not in PHASES and p not in (0, 1)]
        if bad:
            raise WmzooError(f"info['phase'] must be one of {PHASES} (or 0/1), got {bad[0]!r}")
        out["phase"] = np.asarray([PHASES.index(p) if isinstance(p, str) else p for p in phases], np.uint8)
    if any("probe" in i for i in infos):
        if not all("probe" in i for i in infos):
            raise WmzooError("the env gives info['probe'] on some steps only; it must give it on every step")
        for name in infos[0]["probe"]:
            out[f"probe_{name}"] = np.stack([np.asarray(i["probe"][name]) for i in infos])
    if all(isinstance(i.get("mission"), str) for i in infos):  # MiniGrid / BabyAI: the instruction
        out["mission"] = np.asarray([i["mission"] for i in infos], np.str_)
    keys = sorted({k for i in infos for k, v in i.items() if _numeric(v) and k not in ("phase", "probe")})
    for key in keys:
        values = [i.get(key) for i in infos]
        present = [v for v in values if v is not None]
        if not all(_numeric(v) for v in present):
            continue  # a key that is not numeric on every step is not recorded
        if all(isinstance(v, (bool, np.bool_)) for v in present):
            out[f"info_{key}"] = np.asarray([bool(v) if v is not None else False for v in values])
        elif all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in present):
            out[f"info_{key}"] = np.asarray([-1 if v is None else v for v in values], np.int64)
        else:
            out[f"info_{key}"] = np.asarray([np.nan if v is None else v for v in values], np.float32)
    return out


def _numeric(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))


def write_episode(path: Path, data: dict[str, np.ndarray]) -> str:
    """Write ``data`` as an ``.npz`` chunk atomically (deflated members with fixed timestamps, so
    equal data gives equal bytes) and return the file's sha256."""
    rows = row_fields(data)
    keys = [*rows, *sorted(k for k in data if k not in rows)]
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as archive:
            for key in keys:
                member = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_TIME)
                member.compress_type = zipfile.ZIP_DEFLATED
                with archive.open(member, "w", force_zip64=True) as out:
                    np.lib.format.write_array(out, np.ascontiguousarray(data[key]), allow_pickle=False)
        digest = sha256(tmp)
    return digest
