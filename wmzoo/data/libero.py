"""``wmzoo data import-libero``: LIBERO's HDF5 demonstrations as a wmzoo dataset.

LIBERO (Liu et al., 2023), the TokenWM paper's benchmark (section 4), ships each task's
demonstrations as one HDF5 file in robomimic's layout, written by LIBERO's
``scripts/create_dataset.py``::

    data.attrs["problem_info"]              JSON; its "language_instruction" is the task's instruction
    data.attrs["bddl_file_name"]            the task file, under bddl_files/<suite>/
    data.attrs["macros_image_convention"]   robosuite's image convention, "opengl" or "opencv"
    data/demo_<i>/actions                   float [T, 7] (OSC pose delta + gripper)
    data/demo_<i>/obs/agentview_rgb         uint8 [T, H, W, 3] (and eye_in_hand_rgb, proprioception)
    data/demo_<i>/rewards, dones            [T]: 0 everywhere but 1 at the last step

What this module does with it, each point checked against LIBERO's code:

- **Instruction.** ``json.loads(data.attrs["problem_info"])["language_instruction"]``, as
  LIBERO's ``scripts/get_dataset_info.py`` reads it (joined if it is a list, quotes stripped);
  it becomes every row's ``mission``.
- **Images upside down.** ``create_dataset.py`` stores robosuite's camera observations, which under
  ``macros.IMAGE_CONVENTION = "opengl"`` (robosuite 1.4's default, recorded in
  ``macros_image_convention``) have their first row at the *bottom*: robosuite flips them only for
  ``"opencv"`` (``img[::-1]``, rows only), and LIBERO's ``utils/video_utils.py`` flips them the same
  way to show them. So frames of an ``"opengl"`` file (or of one that does not say, which was made
  with that default) are flipped vertically (rows reversed; columns kept), those of an
  ``"opencv"`` file are kept; ``--image-convention`` overrides the file. (OpenVLA's LIBERO code
  rotates by 180 degrees instead, which also mirrors left and right; wmzoo follows robosuite.)
- **Rows.** A demonstration of ``T`` frames becomes ``T`` rows (``T - 1`` steps,
  :mod:`wmzoo.interfaces`): row ``t`` holds frame ``t``, resized to ``size x size`` (PIL's box
  filter) and channels first; the last row a zero action, zero reward, not terminal.
- **Which action goes with a frame.** ``create_dataset.py`` replays the recorded actions and stores,
  at index ``k``, ``actions[k]`` and the frame rendered *after* ``env.step(actions[k])`` (LIBERO
  issue #54): frame ``k`` is one control step (50 ms at 20 Hz) later than the action beside it.
  LIBERO's own policies, and the TokenWM paper's, learn ``pi(actions[k] | frame k)`` all the same.
  ``align="libero"`` (default) keeps that pairing, row ``t``: ``actions[t]``; ``align="causal"``
  gives row ``t`` the action actually taken after frame ``t`` was seen, ``actions[t + 1]`` (what a
  world model of ``frame t, action t -> frame t + 1`` should learn from). Either way each
  demonstration's first or last action has no row.
- **Rewards and ends.** ``rewards[k]`` and ``dones[k]`` come with frame ``k`` (results of the step
  that led to it), so row ``t``'s ``reward`` / ``terminal`` (results of its step, which leads to frame
  ``t + 1``) are ``rewards[t + 1]`` / ``dones[t + 1]``, in both alignments: a LIBERO demonstration
  ends with reward 1 and ``terminal`` on its second-last row.
- **Suite.** The env name is the suite's (``libero-spatial``, ``libero-object``, ``libero-goal``,
  ``libero-10``, ``libero-90``), read from ``bddl_file_name``'s folder, else from the file's
  folder (LIBERO's downloads keep each suite in a folder of its name), else ``--env``.
- **Episodes.** The demonstrations of all files, ordered by file then by demo number, are
  shuffled with ``--seed`` before the splits take their share, so val and test hold demonstrations
  of every task rather than of the last file's; the manifest's ``source`` names each episode's file
  and demo.

The folder is a dataset like ``wmzoo data generate``'s (:mod:`wmzoo.data.dataset`): files written
atomically, checksums in the manifest, and re-running the same command verifies what is there and
imports the rest (:func:`wmzoo.data.generate.prepare`, :func:`~wmzoo.data.generate.recording`).
Reading needs ``h5py`` (``pip install "wmzoo[libero]"``), not LIBERO itself.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wmzoo.data.dataset import MANIFEST, Arguments, Manifest, check_same
from wmzoo.data.generate import prepare, recording, write_episode_file
from wmzoo.data.splits import PAPER_SPLIT, normalise_split
from wmzoo.envs.wrappers import resize_rgb
from wmzoo.errors import MissingDependencyError, WmzooError
from wmzoo.interfaces import EnvInfo
from wmzoo.outputs import check_output_folder
from wmzoo.specs import TrainSpec, check_option

SUITES = {
    "libero_spatial": "libero-spatial",
    "libero_object": "libero-object",
    "libero_goal": "libero-goal",
    "libero_10": "libero-10",
    "libero_90": "libero-90",
}
"""LIBERO's folder name of each suite -> wmzoo's env name."""
CAMERA = "agentview_rgb"
ALIGNS = ("libero", "causal")
CONVENTIONS = ("auto", "opengl", "opencv")
DEFAULT_CONVENTION = "opengl"  # robosuite 1.4's macros.IMAGE_CONVENTION, which LIBERO pins
SOURCE_KIND = "libero-hdf5"


def _h5py() -> Any:
    try:
        import h5py
    except ImportError:
        raise MissingDependencyError('reading LIBERO files needs h5py: pip install h5py (or "wmzoo[libero]", '
                                     "which adds LIBERO's simulator)") from None
    return h5py


@dataclass(frozen=True)
class LiberoFile:
    """What :func:`read_header` found in one LIBERO file (nothing of the demonstrations' data)."""

    path: str
    instruction: str
    suite: str | None  # wmzoo's env name of the suite, where the file says or its folder is named so
    demos: tuple[str, ...]  # demo_0, demo_1, ... in the order of their numbers
    convention: str  # the images' convention: recorded, or DEFAULT_CONVENTION where the file says none
    action_dim: int
    bytes: int


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, np.bytes_)) else str(value)


def _instruction(path: Path, data: Any) -> str:
    where = f"{path}: data.attrs['problem_info']"
    if "problem_info" not in data.attrs:
        raise WmzooError(f"{path}: not a LIBERO demonstration file (data has no attribute 'problem_info' "
                         "with the task's language_instruction)")
    try:
        info = json.loads(_text(data.attrs["problem_info"]))
        instruction = info["language_instruction"]
    except (ValueError, TypeError, KeyError) as exc:
        raise WmzooError(f"{where} is not LIBERO's JSON with a language_instruction "
                         f"({type(exc).__name__}: {exc})") from None
    if isinstance(instruction, list):  # as LIBERO's get_dataset_info.py reads it
        instruction = "".join(map(str, instruction))
    instruction = str(instruction).strip().strip('"').strip()
    if not instruction:
        raise WmzooError(f"{where}: the language_instruction is empty")
    return instruction


def _suite(path: Path, data: Any) -> str | None:
    bddl = _text(data.attrs["bddl_file_name"]) if "bddl_file_name" in data.attrs else ""
    for part in [*reversed(Path(bddl).parts), path.resolve().parent.name]:
        if part in SUITES:
            return SUITES[part]
    return None


def _demo_number(name: str) -> int:
    try:
        return int(name.removeprefix("demo_"))
    except ValueError:
        return -1


def read_header(path: str | Path, camera: str = CAMERA) -> LiberoFile:
    """Check that ``path`` is a LIBERO demonstration file with ``camera`` images (every demo's
    arrays, their shapes and dtypes, without reading them) and return what it holds; one-line
    :class:`~wmzoo.errors.WmzooError` otherwise."""
    h5py = _h5py()
    path = Path(path)
    if not path.is_file():
        raise WmzooError(f"{path}: no such file")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise WmzooError(f"{path}: not an HDF5 file ({exc}); expected a LIBERO demonstration file") from None
    with f:
        data = f.get("data")
        if not isinstance(data, h5py.Group):
            raise WmzooError(f"{path}: not a LIBERO demonstration file (no group 'data'; it has "
                             f"{sorted(f.keys()) or 'nothing'})")
        demos = tuple(sorted((k for k in data if k.startswith("demo_") and _demo_number(k) >= 0), key=_demo_number))
        if not demos:
            raise WmzooError(f"{path}: not a LIBERO demonstration file (no data/demo_<i> groups)")
        instruction = _instruction(path, data)
        action_dim = 0
        for demo in demos:
            action_dim = _check_demo(path, data[demo], demo, camera, action_dim)
        recorded = data.attrs.get("macros_image_convention")
        convention = _text(recorded) if recorded is not None else DEFAULT_CONVENTION
        if convention not in CONVENTIONS[1:]:
            raise WmzooError(f"{path}: data.attrs['macros_image_convention'] is {convention!r}, expected "
                             "'opengl' or 'opencv'; pass --image-convention to say which")
        return LiberoFile(str(path), instruction, _suite(path, data), demos, convention, action_dim,
                          path.stat().st_size)


def _check_demo(path: Path, group: Any, demo: str, camera: str, action_dim: int) -> int:
    """The demo's action dimension, after checking its arrays' shapes (and that it equals the
    other demos' ``action_dim`` when that is not 0)."""
    where = f"{path}: data/{demo}"
    for key in ("actions", "rewards", "dones", "obs"):
        if key not in group:
            raise WmzooError(f"{where} has no '{key}' (not a LIBERO demonstration file)")
    obs = group["obs"]
    if camera not in obs:
        images = sorted(k for k in obs if k.endswith(("_rgb", "_image"))) or sorted(obs)
        raise WmzooError(f"{where}/obs has no camera '{camera}'; it has {', '.join(images)}: pass --camera NAME")
    actions, frames = group["actions"], obs[camera]
    steps = actions.shape[0] if actions.ndim == 2 else 0
    if steps < 2 or actions.dtype.kind != "f":
        raise WmzooError(f"{where}/actions is {actions.dtype} {list(actions.shape)}; expected float [T, A] with T >= 2")
    if action_dim and actions.shape[1] != action_dim:
        raise WmzooError(f"{where}/actions has {actions.shape[1]} dimensions, the demos before it {action_dim}")
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] != steps:
        raise WmzooError(f"{where}/obs/{camera} is {frames.dtype} {list(frames.shape)}; expected uint8 "
                         f"[{steps}, H, W, 3] (one RGB frame per action)")
    for key in ("rewards", "dones"):
        if group[key].shape != (steps,):
            raise WmzooError(f"{where}/{key} has shape {list(group[key].shape)}; expected [{steps}]")
    return int(actions.shape[1])


def demo_rows(group: Any, camera: str, size: int, flip: bool, align: str, instruction: str
              ) -> dict[str, np.ndarray]:
    """One demonstration (an h5py group ``data/demo_<i>``) as episode rows; see the module
    docstring for the alignment, the flip and the rewards."""
    actions = np.asarray(group["actions"], np.float32)
    frames = np.asarray(group["obs"][camera])
    rewards = np.asarray(group["rewards"], np.float32)
    dones = np.asarray(group["dones"]) != 0
    if flip:
        frames = frames[:, ::-1]
    rows = len(actions)
    if frames.shape[1:3] != (size, size):
        frames = np.stack([resize_rgb(np.ascontiguousarray(frame), size) for frame in frames])
    obs = frames.transpose(0, 3, 1, 2)
    action = np.zeros_like(actions)
    action[:-1] = actions[:-1] if align == "libero" else actions[1:]
    reward = np.zeros(rows, np.float32)
    reward[:-1] = rewards[1:]
    terminal = np.zeros(rows, np.bool_)
    terminal[:-1] = dones[1:]
    return {
        "obs": np.ascontiguousarray(obs, np.uint8),
        "action": action,
        "reward": reward,
        "terminal": terminal,
        "is_first": np.arange(rows) == 0,
        "mission": np.asarray([instruction] * rows, np.str_),
    }


def _env_name(headers: list[LiberoFile], env: str | None) -> str:
    if env is not None:
        if env not in SUITES.values():
            raise WmzooError(f"--env {env}: not a LIBERO suite; expected one of {', '.join(SUITES.values())}")
        return env
    suites = {h.suite for h in headers}
    if None in suites:
        path = next(h.path for h in headers if h.suite is None)
        raise WmzooError(f"{path}: cannot tell its LIBERO suite (neither bddl_file_name nor its folder names one); "
                         f"pass --env, one of {', '.join(SUITES.values())}")
    if len(suites) > 1:
        raise WmzooError(f"the files come from several LIBERO suites ({', '.join(sorted(map(str, suites)))}); "
                         "import each suite into its own dataset, or pass --env to name one for all")
    return str(suites.pop())


def _source(headers: list[LiberoFile], camera: str, align: str, image_convention: str,
            order: list[tuple[int, str]]) -> dict[str, Any]:
    files = [{k: v for k, v in asdict(h).items() if k not in ("path", "demos")} | {"name": Path(h.path).name,
              "demos": len(h.demos)} for h in headers]
    return {"kind": SOURCE_KIND, "camera": camera, "align": align, "image_convention": image_convention,
            "files": files, "episodes": [[i, demo] for i, demo in order]}


def _check_same_source(old: dict[str, Any] | None, new: dict[str, Any], root: Path) -> None:
    if old is None or old.get("kind") != SOURCE_KIND:
        raise WmzooError(f"{root} holds a dataset not imported from LIBERO files; choose another --out")
    for key, option in (("camera", "--camera"), ("align", "--align"), ("image_convention", "--image-convention")):
        if old.get(key) != new[key]:
            raise WmzooError(f"{root} holds a dataset imported with {option} {old.get(key)}, not {new[key]}; "
                             "pass the same arguments to resume it or choose another --out")
    if old.get("files") != new["files"] or old.get("episodes") != new["episodes"]:
        names = ", ".join(f["name"] for f in old.get("files", []))
        raise WmzooError(f"{root} holds a dataset imported from other files ({names}); "
                         "pass the same files to resume it or choose another --out")


def import_libero(
    files: Sequence[str | Path],
    out: str | Path,
    *,
    env: str | None = None,
    size: int = 64,
    camera: str = CAMERA,
    seed: int = 0,
    split: Sequence[float] = PAPER_SPLIT,
    align: str = "libero",
    image_convention: str = "auto",
    log: Any = print,
) -> Manifest:
    """Import the demonstrations of the LIBERO ``files`` into the dataset folder ``out`` (see the
    module docstring); resumes an existing import made with the same arguments. Every file is
    checked before anything is written."""
    if not files:
        raise WmzooError("name at least one LIBERO .hdf5 file")
    check_option(size, TrainSpec, "image_size", "--size")  # a run's bounds
    if align not in ALIGNS:
        raise WmzooError(f"--align {align}: expected one of {', '.join(ALIGNS)}")
    if image_convention not in CONVENTIONS:
        raise WmzooError(f"--image-convention {image_convention}: expected one of {', '.join(CONVENTIONS)}")
    headers = [read_header(path, camera) for path in files]
    if len({h.action_dim for h in headers}) > 1:
        raise WmzooError(f"the files' actions differ in dimension ({sorted({h.action_dim for h in headers})})")
    name = _env_name(headers, env)
    demos = [(i, demo) for i, h in enumerate(headers) for demo in h.demos]
    order = [demos[j] for j in np.random.default_rng(seed).permutation(len(demos))]
    root = check_output_folder(out, MANIFEST, "--out")
    args = Arguments(name, len(demos), size, seed, normalise_split(split))
    source = _source(headers, camera, align, image_convention, order)
    existing = Manifest.read(root) if (root / MANIFEST).exists() else None
    if existing is not None:
        _check_same_source(existing.source, source, root)
        check_same(existing.args, args, root)
    info = EnvInfo(name, (3, size, size), headers[0].action_dim, discrete=False)
    manifest = Manifest(args, "human", info, None, None, {}, source)
    todo = prepare(root, manifest, existing, log)
    if not todo:
        log(f"{root}: all {len(demos)} episodes already complete (checksums verified)")
        return manifest
    h5py = _h5py()
    with recording(manifest, root, todo, "importing", log, f", {len(headers)} LIBERO file(s)") as add:
        opened: dict[int, Any] = {}
        try:
            for index in todo:
                i, demo = order[index]
                if i not in opened:
                    opened[i] = h5py.File(headers[i].path, "r")
                convention = headers[i].convention if image_convention == "auto" else image_convention
                data = demo_rows(opened[i]["data"][demo], camera, size, convention == "opengl", align,
                                 headers[i].instruction)
                add(write_episode_file(root, args, index, data))
        finally:
            for f in opened.values():
                f.close()
    return manifest
