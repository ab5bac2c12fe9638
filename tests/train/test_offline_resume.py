"""Resuming an offline run (``wmzoo run --offline DATA``, then ``--resume``): the checkpoint's
weights, optimizer state and counters continue to the total number of updates, on the data
recorded in ``<logdir>/offline.json`` only; bad resumes are one line and change no file."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from wmzoo.cli import main
from wmzoo.config import run_spec
from wmzoo.data import Replay
from wmzoo.errors import WmzooError
from wmzoo.train import loop
from wmzoo.train.checkpoint import load_checkpoint

SEED = 0  # run_spec's default seed


def _generate(out: Path, seed: int) -> Path:
    assert main(["data", "generate", "--env", "minigrid-empty-5x5", "--episodes", "2", "--split", "1,0,0",
                 "--seed", str(seed), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _generate(tmp_path_factory.mktemp("offline-data") / "data", seed=0)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["run", *argv, "--no-progress"])
    return code, capsys.readouterr().err


def _weights(logdir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(logdir / "checkpoint.safetensors")["world_model"]


def _adam_steps(logdir: Path) -> set[float]:
    state = load_checkpoint(logdir / "checkpoint.safetensors")["world_model_optim"]["model"]["opt"]["state"]
    return {float(s["step"]) for s in state.values()}


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_resume_continues_weights_optimizer_and_counters_to_the_total(data, tmp_path, monkeypatch):
    # Catches: a resume that starts from fresh weights or a fresh optimizer (Adam's step count
    # would restart), counters that restart (it would stop at k + N, or log from update 1), a
    # resume that ignores the checkpoint entirely (weights equal to a new run's), and a replay
    # re-seeded with run.seed, which would replay the very batches of updates 1..k.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = run_spec("rssm", "minigrid-empty-5x5", "tiny", overrides=["train.checkpoint_every=1"])
    logdir = tmp_path / "run"
    loop.train_offline(run, data, logdir, updates=2, show_progress=False)
    two = _weights(logdir)
    assert _adam_steps(logdir) == {2.0}
    seeds: list[int] = []
    original = Replay.load.__func__  # type: ignore[attr-defined]

    def load(cls, directory, capacity=None, seed=0, **kw):
        seeds.append(seed)
        return original(cls, directory, capacity, seed, **kw)

    monkeypatch.setattr(Replay, "load", classmethod(load))
    path = loop.train_offline(run, data, logdir, updates=5, resume=True, show_progress=False)
    assert seeds == [SEED + 2]
    tree = load_checkpoint(path)
    assert tree["progress"]["updates"] == 5 and tree["progress"]["env_steps"] == 0
    assert _adam_steps(logdir) == {5.0}  # 2 restored + 3 more
    five = tree["world_model"]
    assert any(not torch.equal(two[k], five[k]) for k in two)
    # the same TensorBoard folder, the update count continuing (2 then 5, never 3)
    steps = [e.step for e in EventAccumulator(str(logdir / "tb")).Reload().Scalars("train/nonfinite_steps")]
    assert steps == [2, 5], steps


def test_cli_resumes_on_the_recorded_data_and_on_the_same_data_moved(data, tmp_path, capsys):
    # Catches: `--resume` of an offline run going online (it would collect env steps), an
    # `--offline DATA --resume` of the same data refused, the spelling of the path (dataset root
    # vs its train split) or a move making the same data look different, and offline.json still
    # pointing at the old folder after a move (the next plain --resume would fail).
    logdir = tmp_path / "run"
    code, err = _run(capsys, "--offline", str(data), "--logdir", str(logdir), "--steps", "2",
                     "--set", "train.checkpoint_every=1")
    assert code == 0, err
    two = _weights(logdir)
    code, err = _run(capsys, "--logdir", str(logdir), "--resume", "--steps", "4")
    assert code == 0, err
    tree = load_checkpoint(logdir / "checkpoint.safetensors")
    assert tree["progress"]["updates"] == 4 and tree["progress"]["env_steps"] == 0
    assert not (logdir / "replay").exists()  # no online collection
    assert any(not torch.equal(two[k], tree["world_model"][k]) for k in two)
    code, err = _run(capsys, "--offline", str(data / "train"), "--logdir", str(logdir), "--resume", "--steps", "5")
    assert code == 0, err
    moved = tmp_path / "moved"
    shutil.copytree(data, moved)
    code, err = _run(capsys, "--offline", str(moved), "--logdir", str(logdir), "--resume", "--steps", "6")
    assert code == 0, err
    assert json.loads((logdir / "offline.json").read_text())["data"] == str((moved / "train").resolve())
    shutil.rmtree(moved / "val")  # the recorded folder is used, whatever lies beside it
    code, err = _run(capsys, "--logdir", str(logdir), "--resume", "--steps", "7")
    assert code == 0, err
    assert load_checkpoint(logdir / "checkpoint.safetensors")["progress"]["updates"] == 7


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, data: Path) -> dict[str, Path]:
    """An offline run at update 2, a dataset of another seed, and broken copies of the run."""
    root = tmp_path_factory.mktemp("offline-resume")
    shutil.copytree(data, root / "data")
    _generate(root / "other", seed=1)
    run = root / "run"
    assert main(["run", "--offline", str(root / "data"), "--logdir", str(run), "--steps", "2", "--no-progress"]) == 0
    shutil.copytree(run, root / "legacy")  # an offline run written before offline.json existed
    (root / "legacy" / "offline.json").unlink()
    shutil.copytree(root / "data", root / "shrunk-data")  # a run's data losing an episode since
    assert main(["run", "--offline", str(root / "shrunk-data"), "--logdir", str(root / "shrunk"), "--steps", "2",
                 "--no-progress"]) == 0
    min(root.glob("shrunk-data/train/*.npz")).unlink()
    shutil.copytree(run, root / "gone")  # its data deleted
    record = json.loads((run / "offline.json").read_text())
    record["data"] = str(root / "nowhere" / "train")
    (root / "gone" / "offline.json").write_text(json.dumps(record))
    (root / "empty").mkdir()
    return {"root": root}


BAD = [
    # (what is wrong, argv after `wmzoo run`, what the line must say)
    ("another dataset", "--logdir {root}/run --resume --offline {root}/other --steps 5",
     "other/train (2 chunk files, "),
    ("the recorded data changed in place", "--logdir {root}/shrunk --resume --steps 5",
     "shrunk-data/train (1 chunk files, "),
    ("no more updates", "--logdir {root}/run --resume --steps 2", "is at update 2; --steps 2 asks for nothing more"),
    ("fewer updates", "--logdir {root}/run --resume --steps 1", "pass --steps above 2"),
    ("no checkpoint", "--logdir {root}/empty --resume --steps 5", "holds no checkpoint.safetensors"),
    ("an offline run without offline.json", "--logdir {root}/legacy --resume --steps 5",
     "trained offline before offline runs recorded their data"),
    ("an offline run without offline.json, --offline given", "--logdir {root}/legacy --resume --offline {root}/data",
     "--offline cannot change on resume"),
    ("the recorded data deleted", "--logdir {root}/gone --resume --steps 5", "nowhere/train: no such folder"),
]


@pytest.mark.parametrize(("kind", "argv", "says"), BAD, ids=[case[0] for case in BAD])
def test_a_bad_resume_is_one_line_and_changes_no_file(world, capsys, kind, argv, says):
    # Catches: training on data other than the run's (a model of two datasets no one asked for),
    # a resume that rewrites run.yaml, offline.json or the checkpoint before refusing, a
    # traceback or exit code other than 2, and a legacy offline run resumed as an online one.
    before = _hashes(world["root"])
    code, err = _run(capsys, *argv.format(root=world["root"]).split())
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("wmzoo: error:"), f"{kind}: {err}"
    assert says in lines[0], f"{kind}: {lines[0]!r} does not say {says!r}"
    assert _hashes(world["root"]) == before, f"{kind}: files changed"


def test_the_function_refuses_a_resume_without_a_checkpoint(world, tmp_path):
    # Catches: train_offline(resume=True) on an empty folder training a new run from scratch
    # (the caller asked to continue one) or writing run.yaml and offline.json into it.
    run = run_spec("rssm", "minigrid-empty-5x5", "tiny")
    with pytest.raises(WmzooError, match="holds no checkpoint.safetensors to continue from"):
        loop.train_offline(run, world["root"] / "data", tmp_path, updates=3, resume=True, show_progress=False)
    assert list(tmp_path.iterdir()) == []
