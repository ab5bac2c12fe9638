"""``wmzoo data import-libero``: LIBERO's HDF5 demonstrations (robomimic layout, written here in
LIBERO's exact layout: LIBERO's own files cannot be downloaded) as a wmzoo dataset, checked row by
row against the file; training on it end to end; bad input is one line."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from wmzoo.cli import main
from wmzoo.data.dataset import Manifest, iter_episodes, recorded_env_info

from libero_fakes import write_libero  # noqa: E402

h5py = pytest.importorskip("h5py")

SPATIAL = "pick up the black bowl between the plate and the ramekin and place it on the plate"
GOAL = "open the middle drawer of the cabinet"


@pytest.fixture
def files(tmp_path: Path) -> tuple[list[Path], list[dict], list[str]]:
    a, b = tmp_path / "libero_spatial_task0_demo.hdf5", tmp_path / "libero_spatial_task1_demo.hdf5"
    demos = [write_libero(a, [4, 6, 5], SPATIAL, seed=1), write_libero(b, [7, 3], GOAL, seed=2)]
    return [a, b], demos, [SPATIAL, GOAL]


def _import(out: Path, paths: list[Path], *extra: str) -> int:
    return main(["data", "import-libero", *map(str, paths), "--out", str(out), "--size", "16",
                 "--split", "1,0,0", *extra])


def _episodes(out: Path) -> list[tuple[tuple[int, str], dict[str, np.ndarray]]]:
    """Every imported episode with the (file, demo) the manifest says it came from."""
    manifest = Manifest.read(out)
    origin = manifest.source["episodes"]
    return [(tuple(origin[i]), e) for i, e in enumerate(iter_episodes(out, "train"))]


def test_rows_match_the_file(files, tmp_path):
    # catches: actions shifted one row, the final row given an action (or the last action kept),
    # frames left upside down (LIBERO's "opengl" images), flipped left-right or transposed, channels
    # last, the reward/terminal of the final step lost or put on the last row, a file's instruction
    # given to another file's demos, a demo imported twice or left out
    paths, demos, instructions = files
    out = tmp_path / "data"
    assert _import(out, paths) == 0
    seen = set()
    for (i, demo), episode in _episodes(out):
        seen.add((i, demo))
        src = demos[i][demo]
        steps = len(src["actions"])
        assert len(episode["obs"]) == steps  # T frames: T rows, T - 1 steps
        upright = src["frames"][:, ::-1]  # rows reversed, columns kept (robosuite's opengl convention)
        np.testing.assert_array_equal(episode["obs"], upright.transpose(0, 3, 1, 2))
        assert episode["obs"][0, 1, 0, 0] == 7 * 15  # green = row: the stored last row is now the first
        assert episode["action"].dtype == np.float32 and episode["action"].shape == (steps, 7)
        np.testing.assert_array_equal(episode["action"][:-1], src["actions"][:-1].astype(np.float32))
        np.testing.assert_array_equal(episode["action"][-1], np.zeros(7, np.float32))
        assert episode["reward"].tolist() == [0.0] * (steps - 2) + [1.0, 0.0]
        assert episode["terminal"].tolist() == [False] * (steps - 2) + [True, False]
        assert episode["is_first"].tolist() == [True] + [False] * (steps - 1)
        assert episode["mission"].tolist() == [instructions[i]] * steps
    assert seen == {(0, "demo_0"), (0, "demo_1"), (0, "demo_2"), (1, "demo_0"), (1, "demo_1")}
    manifest = Manifest.read(out)
    assert manifest.policy == "human" and manifest.complete and manifest.counts["train"] == 5
    info = recorded_env_info(out)
    assert (info.name, info.obs_shape, info.num_actions, info.discrete) == ("libero-spatial", (3, 16, 16), 7, False)


def test_causal_alignment_opencv_files_resizing_and_the_other_camera(tmp_path):
    # catches: --align causal not taking the next action (or the default's), an "opencv" file
    # flipped (it is upright already), --camera ignored, --size ignored
    path = tmp_path / "libero_goal" / "task_demo.hdf5"  # the suite from the folder: no bddl suite
    path.parent.mkdir()
    demos = write_libero(path, [5], GOAL, suite="elsewhere", convention="opencv", size=32)
    out = tmp_path / "data"
    assert main(["data", "import-libero", str(path), "--out", str(out), "--size", "16", "--split", "1,0,0",
                 "--align", "causal", "--camera", "eye_in_hand_rgb"]) == 0
    [(_, episode)] = _episodes(out)
    src = demos["demo_0"]
    np.testing.assert_array_equal(episode["action"][:-1], src["actions"][1:].astype(np.float32))
    assert not episode["action"][-1].any()
    eye = src["frames"][:, ::-1, ::-1]  # the eye-in-hand images as stored, kept as stored (opencv)
    # 32 -> 16 with PIL's box filter: each output pixel is the mean of a 2x2 block
    expected = eye.reshape(5, 16, 2, 16, 2, 3).mean((2, 4))
    assert np.abs(episode["obs"].transpose(0, 2, 3, 1) - expected).max() <= 1
    assert recorded_env_info(out).name == "libero-goal"


def test_resume_verifies_and_repairs_and_refuses_other_arguments(files, tmp_path, capsys):
    # catches: a re-run that rewrites or duplicates finished episodes, a deleted episode not
    # imported again (or imported with other bytes), a re-run with another camera mixing frames
    paths, _, _ = files
    out = tmp_path / "data"
    assert _import(out, paths) == 0
    before = {e.file: e.sha256 for e in Manifest.read(out).files.values()}
    victim = out / sorted(before)[2]
    victim.unlink()
    capsys.readouterr()
    assert _import(out, paths) == 0
    assert "importing 1 of 5" in capsys.readouterr().out
    assert {e.file: e.sha256 for e in Manifest.read(out).files.values()} == before
    assert _import(out, paths) == 0
    assert "already complete" in capsys.readouterr().out
    assert _import(out, paths, "--camera", "eye_in_hand_rgb") == 2
    assert "imported with --camera agentview_rgb, not eye_in_hand_rgb" in capsys.readouterr().err
    assert _import(out, paths[:1]) == 2
    assert "imported from other files" in capsys.readouterr().err


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("wmzoo: error: "), err
    return err


def test_bad_input_is_one_line_and_writes_nothing(files, tmp_path, capsys, monkeypatch):
    # catches: a traceback instead of one line, a folder written before the input was checked,
    # the available cameras not named, a missing h5py surfacing as ImportError
    paths, _, _ = files
    out = tmp_path / "data"
    text = tmp_path / "notes.hdf5"
    text.write_text("not hdf5")
    foreign = tmp_path / "other.hdf5"
    with h5py.File(foreign, "w") as f:
        f.create_dataset("x", data=np.zeros(3))
    no_instruction = tmp_path / "libero_spatial_x.hdf5"
    write_libero(no_instruction, [3], SPATIAL)
    with h5py.File(no_instruction, "a") as f:
        del f["data"].attrs["problem_info"]
    cases = [
        ([str(tmp_path / "missing.hdf5")], "no such file"),
        ([str(text)], "not an HDF5 file"),
        ([str(foreign)], "not a LIBERO demonstration file (no group 'data'"),
        ([str(no_instruction)], "no attribute 'problem_info'"),
        ([str(paths[0]), "--camera", "frontview_rgb"], "has no camera 'frontview_rgb'; it has agentview_rgb, eye_in_hand_rgb"),
        ([str(paths[0]), "--env", "libero-100"], "--env libero-100: not a LIBERO suite"),
    ]
    for argv, message in cases:
        assert main(["data", "import-libero", *argv, "--out", str(out)]) == 2
        assert message in _one_error(capsys), message
        assert not out.exists()
    monkeypatch.setitem(sys.modules, "h5py", None)  # makes `import h5py` fail
    assert main(["data", "import-libero", str(paths[0]), "--out", str(out)]) == 2
    assert "reading LIBERO files needs h5py: pip install h5py" in _one_error(capsys)
    assert not out.exists()


@pytest.mark.parametrize("backbone", ["tokenwm", "rssm"])
def test_imitation_trains_on_imported_demonstrations(files, tmp_path, capsys, backbone):
    # catches: the recorded env (libero-spatial) refused by wmzoo run, continuous 7-D actions not
    # binned between the data's percentiles, the missions not read into the vocabulary; and
    # wmzoo eval on the checkpoint failing with anything but one line saying LIBERO is missing
    from wmzoo.config import load_run
    from wmzoo.train.checkpoint import load_checkpoint

    paths, demos, _ = files
    out = tmp_path / "data"
    assert _import(out, paths) == 0
    logdir = tmp_path / backbone
    assert main(["run", "--backbone", backbone, "--imitation", str(out), "--steps", "2", "--logdir", str(logdir),
                 "--no-progress"]) == 0
    run = load_run(load_checkpoint(logdir / "checkpoint.safetensors")["run"])
    assert run.env == "libero-spatial" and run.train.image_size == 16
    acted = np.concatenate([d["actions"][:-1] for f in demos for d in f.values()]).astype(np.float32)
    np.testing.assert_allclose(run.policy.action_low, np.percentile(acted, 1, axis=0), rtol=1e-5)
    np.testing.assert_allclose(run.policy.action_high, np.percentile(acted, 99, axis=0), rtol=1e-5)
    assert {"bowl", "drawer", "ramekin"} <= set(run.policy.vocabulary)
    capsys.readouterr()
    if importlib.util.find_spec("libero") is None:
        assert main(["eval", "--checkpoint", str(logdir / "checkpoint.safetensors"), "--episodes", "1"]) == 2
        assert "environment 'libero-spatial' is unavailable: missing module libero" in _one_error(capsys)


def test_an_interrupted_import_resumes_to_the_same_bytes(files, tmp_path, capsys, monkeypatch):
    # catches: an interruption that loses the finished episodes from the manifest, leaves a
    # partial file or a traceback; a resumed import whose files differ from an uninterrupted one
    import wmzoo.data.libero as libero

    paths, _, _ = files
    assert _import(tmp_path / "whole", paths) == 0
    whole = {e.index: e.sha256 for e in Manifest.read(tmp_path / "whole").files.values()}
    real, calls = libero.demo_rows, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(libero, "demo_rows", interrupted)
    out = tmp_path / "data"
    capsys.readouterr()
    assert _import(out, paths) == 2
    assert "interrupted after 2 of 5 episodes; run the same command again" in _one_error(capsys)
    assert len(Manifest.read(out).files) == 2 and not list(out.rglob("*.tmp"))
    monkeypatch.setattr(libero, "demo_rows", real)
    assert _import(out, paths) == 0
    assert {e.index: e.sha256 for e in Manifest.read(out).files.values()} == whole
