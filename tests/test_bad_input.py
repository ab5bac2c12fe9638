"""Every CLI command x every class of bad value: exit 2, one line on stderr starting
``wmzoo: error:``, no traceback, and no file changed (a hash of every file of the run and the
dataset before and after).

The artefacts are real and built once: a tiny rssm run on minigrid-empty-5x5 and corrupt copies
of its checkpoint. Each case names the class of bad input it stands for."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from wmzoo.cli import main


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad-input")
    run = root / "run"
    assert main(["run", "--backbone", "rssm", "--env", "minigrid-empty-5x5", "--preset", "tiny",
                 "--steps", "40", "--logdir", str(run), "--no-progress"]) == 0
    ckpt = run / "checkpoint.safetensors"
    truncated = root / "truncated.safetensors"
    truncated.write_bytes(ckpt.read_bytes()[:5000])
    garbage = root / "garbage.safetensors"
    garbage.write_bytes(b"\x00" * 64)
    pickled = root / "pickled.safetensors"  # a torch pickle renamed: must never be unpickled
    pickled.write_bytes(b"\x80\x04\x95" + b"\x00" * 100)
    text = root / "config.yaml"
    text.write_text("model: [1, 2]\n")  # a list where a mapping belongs
    number = root / "number.yaml"
    number.write_text("train:\n  steps: many\n")
    (root / "number-backbone.yaml").write_text("backbone: 5\n")  # a scalar of the wrong type
    (root / "list-env.yaml").write_text("env: [a, b]\n")
    from safetensors import safe_open
    from safetensors.torch import save_file

    nan = root / "nan.safetensors"  # parses, but a diverged run's weights
    with safe_open(str(ckpt), "pt") as f:
        tensors = {key: f.get_tensor(key) for key in f.keys()}
        meta = f.metadata()
    first = next(k for k, v in tensors.items() if k.startswith("/world_model") and v.is_floating_point())
    tensors[first] = tensors[first] * float("nan")
    save_file(tensors, str(nan), metadata=meta)
    for name, content in (("badenv-json", "{not json"), ("badenv-fields", '{"name": 3}')):
        data = root / name
        shutil.copytree(run / "replay", data)
        (data / "env.json").write_text(content)
    yaml_mismatch = root / "yaml-mismatch"
    shutil.copytree(run, yaml_mismatch)
    saved = (yaml_mismatch / "run.yaml").read_text()
    (yaml_mismatch / "run.yaml").write_text(saved.replace("  deter: ", "  deter: 1", 1))
    a_file = root / "a-file"
    a_file.write_text("x")
    (root / "results").mkdir()
    return {"root": root, "run": run, "ckpt": ckpt, "truncated": truncated, "garbage": garbage,
            "pickled": pickled, "nan": nan, "yaml_mismatch": yaml_mismatch, "list_yaml": text, "number_yaml": number, "a_file": a_file,
            "dir": root / "results"}


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


CASES = [
    # (class of bad input, argv with {placeholders}, what the line must say)
    ("unknown backbone", "run --backbone rsm --env minigrid-empty-5x5 --logdir {root}/new", "did you mean"),
    ("unknown env", "run --backbone rssm --env minigrid-empty-55 --logdir {root}/new", "environment"),
    ("unknown preset", "run --backbone rssm --preset huge --logdir {root}/new", "preset"),
    ("unknown field", "run --backbone rssm --set model.detr=3 --logdir {root}/new", "did you mean deter"),
    ("out-of-range value", "run --backbone rssm --set model.deter=-1 --logdir {root}/new", "model.deter"),
    ("value failing on build", "run --backbone rssm --env minigrid-empty-5x5 --preset tiny --set model.cnn_stages=7 --logdir {root}/new", "cnn_stages"),
    ("replay smaller than a batch", "run --backbone rssm --preset tiny --set train.replay_capacity=3 --logdir {root}/new", "replay_capacity"),
    ("device the machine lacks", "run --backbone rssm --preset tiny --set train.device=foo --logdir {root}/new", "train.device"),
    ("negative seed", "run --backbone rssm --preset tiny --seed -1 --logdir {root}/new", "seed"),
    ("huge seed", "run --backbone rssm --preset tiny --seed 9223372036854775808 --logdir {root}/new", "seed"),
    ("logdir that is a file", "run --backbone rssm --preset tiny --steps 5 --logdir {a_file}", "a-file"),
    ("logdir holding a run", "run --backbone rssm --preset tiny --steps 5 --logdir {run}", "--resume"),
    ("config a folder", "run --backbone rssm --config {dir} --logdir {root}/new", "results"),
    ("config missing", "run --backbone rssm --config {root}/nope.yaml --logdir {root}/new", "nope.yaml"),
    ("config section of the wrong type", "run --backbone rssm --config {list_yaml} --logdir {root}/new", "model"),
    ("config value of the wrong type", "run --backbone rssm --config {number_yaml} --logdir {root}/new", "train.steps"),
    ("resume changing a fixed field", "run --logdir {run} --resume --set model.deter=64", "cannot change on --resume"),
    ("resume with --backbone", "run --logdir {run} --resume --backbone s4wm", "--backbone"),
    ("resume of nothing", "run --logdir {root}/empty --resume", "--resume"),
    ("resume of an online run with --offline", "run --logdir {run} --resume --offline {run}/replay", "--offline cannot change"),
    ("no processes", "run --backbone rssm --preset tiny --nproc 0 --logdir {root}/new", "--nproc 0"),
    ("processes sharing one device", "run --backbone rssm --preset tiny --nproc 2 --set train.device=mps --logdir {root}/new", "train.device=mps"),
    ("resume on another number of processes", "run --logdir {run} --resume --steps 80 --nproc 2", "trained on 1 process"),
    ("run.yaml edited away from its checkpoint", "run --logdir {yaml_mismatch} --resume --steps 80", "does not fit"),
    ("offline env.json not JSON", "run --offline {root}/badenv-json --logdir {root}/new --steps 5", "not a valid env.json"),
    ("offline env.json of the wrong fields", "run --offline {root}/badenv-fields --logdir {root}/new --steps 5", "not a valid env.json"),
    ("checkpoint missing", "eval --checkpoint {root}/nope.safetensors", "nope"),
    ("checkpoint truncated", "eval --checkpoint {truncated}", "truncated"),
    ("checkpoint garbage", "eval --checkpoint {garbage}", "garbage"),
    ("checkpoint a pickle", "eval --checkpoint {pickled}", "pickled"),
    ("checkpoint a folder", "eval --checkpoint {dir}", "results"),
    ("checkpoint with NaN weights", "eval --checkpoint {nan}", "NaN or inf"),
    ("eval temperature", "eval --checkpoint {ckpt} --temperature 0", "--temperature"),
    ("eval episodes", "eval --checkpoint {ckpt} --episodes 0", "--episodes"),
    ("imagine checkpoint truncated", "imagine --checkpoint {truncated} --out {root}/x.gif", "truncated"),
    ("imagine output kind", "imagine --checkpoint {ckpt} --out {root}/x.txt", "x.txt"),
    ("imagine out a folder", "imagine --checkpoint {ckpt} --out {dir}", "results"),
    ("evaluate checkpoint garbage", "evaluate --checkpoint {garbage} --protocol imagination --data {root}/nodata", "bad-input"),
    ("evaluate data missing", "evaluate --checkpoint {ckpt} --protocol imagination --data {root}/nodata", "nodata"),
    ("bench unknown backbone", "bench --backbones rsm:tiny --mode train", "did you mean"),
    ("bench threads", "bench --backbones rssm:tiny --mode train --threads -1", "--threads"),
    ("bench iters", "bench --backbones rssm:tiny --mode train --iters 0", "--iters"),
    ("spec unknown field", "spec --backbone rssm --set model.detr=1", "did you mean deter"),
    ("list unknown kind", "list --kind backbonez", "unknown kind"),
    ("data unknown env", "data generate --env nope-env --episodes 1 --out {root}/data", "nope-env"),
    ("data episodes", "data generate --env minigrid-empty-5x5 --episodes 0 --out {root}/data", "episodes"),
    ("aggregate missing file", "aggregate {root}/nope.json", "nope.json"),
    ("aggregate not json", "aggregate {list_yaml}", "config.yaml"),
    ("config name of the wrong type", "run --config {root}/number-backbone.yaml --logdir {root}/new", "backbone must be a name"),
    ("config name a list", "run --config {root}/list-env.yaml --logdir {root}/new", "env must be a name"),
    ("eval negative seed", "eval --checkpoint {ckpt} --seed -1", "--seed -1"),
    ("imagine negative seed", "imagine --checkpoint {ckpt} --out {root}/x.gif --seed -1", "--seed -1"),
    ("data negative seed", "data generate --env minigrid-empty-5x5 --episodes 1 --seed -1 --out {root}/data", "--seed -1"),
    ("aggregate negative seed", "aggregate {root}/nope.json --seed -1", "--seed -1"),
    ("eval temperature below float32's reach", "eval --checkpoint {ckpt} --temperature 1e-45", "between 0.001 and 1000"),
    ("eval temperature infinite", "eval --checkpoint {ckpt} --temperature inf", "between 0.001 and 1000"),
    ("bench precision empty entries", "bench --backbones rssm:tiny --mode train --precision ,", "empty entry"),
    ("bench backbones trailing comma", "bench --backbones rssm:tiny, --mode train", "--backbones 'rssm:tiny,': an empty entry"),
    ("bench env given twice", "bench --backbones rssm:tiny --mode train --env minigrid-empty-5x5,minigrid-empty-5x5",
     "minigrid-empty-5x5 is given twice"),
    ("bench batch huge", "bench --backbones rssm:tiny --mode train --batch 100000000", "model.batch_size"),
    ("bench seq-len huge", "bench --backbones rssm:tiny --mode train --seq-len 100000000", "model.seq_len"),
    ("bench sizes beyond memory", "bench --backbones rssm:tiny --mode imagine --batch 4096 --seq-len 100000", "GiB"),
    ("bench envs huge", "bench --mode env --env minigrid-empty-5x5 --envs 100000", "train.envs"),
    ("data image size huge", "data generate --env minigrid-empty-5x5 --episodes 1 --size 100000 --out {root}/data", "train.image_size"),
    ("data workers huge", "data generate --env minigrid-empty-5x5 --episodes 1 --workers 100000 --out {root}/data", "train.envs"),
    ("imagine frames huge", "imagine --checkpoint {ckpt} --out {root}/x.gif --horizon 100000", "at most 10,000 frames"),
    ("run gif horizon huge", "run --backbone rssm --preset tiny --set train.gif_horizon=100000 --logdir {root}/new", "gif_horizon"),
    ("libero image size huge", "data import-libero {a_file} --size 100000 --out {root}/data", "train.image_size"),
]


@pytest.mark.parametrize(("kind", "argv", "says"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(world, capsys, kind, argv, says):
    # Catches: a traceback (any uncaught exception) or a second line for bad input, exit codes
    # other than 2, a run or dataset file written or deleted before the input was refused.
    paths = {key: str(value) for key, value in world.items()}
    before = _hashes(world["root"])
    capsys.readouterr()
    code = main(argv.format(**paths).split())
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and "Warning" not in line]
    assert code == 2, f"{kind}: exit {code}\n{err}"
    assert len(lines) == 1 and lines[0].startswith("wmzoo: error:"), f"{kind}: {err}"
    assert "Traceback" not in err
    assert says in lines[0], f"{kind}: {lines[0]!r} does not say {says!r}"
    assert _hashes(world["root"]) == before, f"{kind}: files changed"
    for leftover in ("new", "data", "empty"):
        shutil.rmtree(world["root"] / leftover, ignore_errors=True)


def test_resume_asking_for_nothing_more_is_one_line(world, capsys):
    # Catches: `--resume --steps N` at or below the checkpointed step silently rewriting the run.
    before = _hashes(world["root"])
    code = main(["run", "--logdir", str(world["run"]), "--resume", "--steps", "20"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "at env step 40" in err[0] and "--steps above 40" in err[0]
    assert _hashes(world["root"]) == before


def test_a_model_too_big_for_memory_is_refused_with_the_figure(world, capsys, monkeypatch):
    # Catches: sizes that cannot fit starting a run that dies later (or swaps the machine to a
    # halt). The machine's memory is made 1 GiB so a modest model exceeds it.
    import os

    real = os.sysconf
    monkeypatch.setattr(os, "sysconf", lambda name: 2**18 if name == "SC_PHYS_PAGES" else real(name))
    before = _hashes(world["root"])
    code = main(["run", "--backbone", "rssm", "--preset", "tiny", "--set", "model.deter=4096",
                 "--set", "model.hidden=4096", "--logdir", str(world["root"] / "new")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "GiB" in err[0] and "this machine has 1.0 GiB" in err[0], err
    assert _hashes(world["root"]) == before and not (world["root"] / "new").exists()


@pytest.mark.parametrize("failing", ["save_checkpoint", "safetensors"])
def test_a_full_disk_mid_run_is_one_line_and_keeps_the_last_checkpoint(world, capsys, monkeypatch, tmp_path, failing):
    # Catches: ENOSPC while writing a checkpoint ending in a traceback, or the half-written file
    # replacing the last good checkpoint. "safetensors": the write fails inside safetensors, which
    # raises its SafetensorError (not an OSError) naming the OS error: a 20-line traceback, exit 1.
    import errno

    import wmzoo.train.checkpoint as checkpoint
    import wmzoo.train.rundir as rundir
    from safetensors import SafetensorError

    logdir = tmp_path / "full"
    shutil.copytree(world["run"], logdir)
    before = (logdir / "checkpoint.safetensors").read_bytes()

    def no_space(path, tree):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    def safetensors_no_space(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 100)  # a part written before the disk filled
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    if failing == "save_checkpoint":
        monkeypatch.setattr(rundir, "save_checkpoint", no_space)
    else:
        monkeypatch.setattr(checkpoint, "save_file", safetensors_no_space)
    code = main(["run", "--logdir", str(logdir), "--resume", "--steps", "60", "--no-progress"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("wmzoo: error", "Traceback"))]
    assert code == 2 and err == [f"wmzoo: error: No space left on device: {logdir / 'checkpoint.safetensors'}; "
                                 "free some space (the last checkpoint written is intact) and --resume"], err
    assert (logdir / "checkpoint.safetensors").read_bytes() == before
    assert not [p.name for p in logdir.iterdir() if p.name.endswith(".tmp")]


def test_a_write_refused_by_the_os_inside_safetensors_is_one_line(world, tmp_path):
    # Catches: a real failed checkpoint write (here `ulimit -f` below the checkpoint's size, so
    # safetensors' own write fails with EFBIG) ending in SafetensorError's traceback, exit 1, or
    # the previous checkpoint lost. In a subprocess: the limit is the process's.
    import resource
    import signal
    import subprocess
    import sys

    logdir = tmp_path / "limited"
    shutil.copytree(world["run"], logdir)
    before = (logdir / "checkpoint.safetensors").read_bytes()
    limit = len(before) * 2 // 3  # the replay's new chunk and run.yaml fit, the checkpoint does not

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run([sys.executable, "-m", "wmzoo.cli", "run", "--logdir", str(logdir), "--resume",
                           "--steps", "60", "--no-progress"], capture_output=True, text=True, timeout=300,
                          preexec_fn=limited)
    lines = [line for line in done.stderr.splitlines()
             if line.strip() and "Warning" not in line and not line.startswith("wmzoo: warning")]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0] == (f"wmzoo: error: File too large: {logdir / 'checkpoint.safetensors'}; allow larger files "
                        "(another filesystem, or a higher `ulimit -f`) (the last checkpoint written is intact) "
                        "and --resume"), lines
    assert (logdir / "checkpoint.safetensors").read_bytes() == before


def test_a_full_disk_while_generating_data_says_to_run_the_command_again(monkeypatch, capsys, tmp_path):
    # Catches: data generate's full disk advising checkpoints and --resume (a run's hint), which
    # the command does not have: it resumes by being run again.
    import errno

    import wmzoo.data.generate as generate

    def no_space(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(generate, "write_episode", no_space)
    code = main(["data", "generate", "--env", "minigrid-empty-5x5", "--episodes", "2", "--size", "16",
                 "--out", str(tmp_path / "data")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("wmzoo", "Traceback"))]
    assert code == 2 and len(err) == 1 and "No space left on device" in err[0], err
    assert "run the same command again" in err[0] and "--resume" not in err[0] and "checkpoint" not in err[0], err


@pytest.mark.parametrize("bad", ["corrupt safetensors", "pickle", "a file"])
def test_a_bad_pretrained_encoder_names_the_field_and_the_file(capsys, tmp_path, bad):
    # Catches: a corrupt model.safetensors or a pickled pytorch_model.bin in model.encoder_weights
    # reported as "backbone could not be built" without naming the field or the file, and torch's
    # advice to set weights_only=False (which would run the pickle's code) quoted to the user.
    pytest.importorskip("transformers")
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    import torch
    from pretrained_fakes import write_dinov2

    folder = write_dinov2(tmp_path / "dinov2", size=8, patch=4, width=24)
    weights = folder / "model.safetensors"
    if bad == "corrupt safetensors":
        weights.write_bytes(b"\0" * 64)
    elif bad == "pickle":  # a pickle that weights_only refuses (it names a class)
        weights.unlink()
        weights = folder / "pytorch_model.bin"
        torch.save({"x": torch.zeros(2), "kind": torch.nn.Linear}, weights)
    else:
        weights = folder / "config.json"
    capsys.readouterr()
    code = main(["run", "--backbone", "tokenwm", "--preset", "tiny", "--steps", "2", "--no-progress",
                 "--logdir", str(tmp_path / "run"), "--set", f"model.encoder_weights={weights if bad == 'a file' else folder}",
                 "--set", "model.encoder_size=8", "--set", "model.target=features"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "Warning" not in line]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("wmzoo: error: model.encoder_weights"), lines
    assert str(weights) in lines[0] and "weights_only" not in lines[0], lines


SIGTERM_CASES = [
    # (command, argv with {placeholders}): each is still importing, building or loading after 1.5 s
    ("run while building", "run --backbone rssm --preset tiny --steps 40 --no-progress --logdir {root}/new"),
    ("eval", "eval --checkpoint {ckpt} --episodes 50"),
    ("imagine", "imagine --checkpoint {ckpt} --out {root}/new/x.gif"),
    ("evaluate", "evaluate --checkpoint {ckpt} --protocol imagination --data {root}/nodata --out {root}/new"),
    ("bench", "bench --backbones rssm:tiny --mode train --iters 100"),
    ("data generate", "data generate --env minigrid-empty-5x5 --episodes 100000 --size 16 --out {root}/new"),
    ("data import-libero", "data import-libero {a_file} --out {root}/new"),
    ("aggregate", "aggregate {root}/nope.json"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "argv"), SIGTERM_CASES, ids=[c[0] for c in SIGTERM_CASES])
def test_sigterm_is_one_line_exit_2_within_seconds(world, kind, argv):
    # Catches: SIGTERM before a command installs its own handler (a run still building, eval
    # loading its checkpoint, every other command) killing it silently at -15, a traceback, or a
    # process that lingers; and any file of the run changed.
    import signal
    import subprocess
    import sys
    import time

    paths = {key: str(value) for key, value in world.items()}
    before = _hashes(world["run"])
    child = subprocess.Popen([sys.executable, "-m", "wmzoo.cli", *argv.format(**paths).split()],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    child.send_signal(signal.SIGTERM)
    sent = time.time()
    _, err = child.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line.strip() and "Warning" not in line]
    shutil.rmtree(world["root"] / "new", ignore_errors=True)
    assert time.time() - sent < 15, f"{kind}: exited {time.time() - sent:.0f} s after SIGTERM"
    if child.returncode == 2 and lines and "interrupted" not in lines[0]:
        return  # finished (its own one-line error) before the signal came: nothing to see
    assert child.returncode == 2, f"{kind}: exit {child.returncode}\n{err}"
    assert len(lines) == 1 and lines[0].startswith("wmzoo: error: interrupted"), f"{kind}: {err}"
    assert _hashes(world["run"]) == before


def test_sigterm_while_parsing_is_one_line_exit_2(monkeypatch, capsys):
    # Catches: the SIGTERM handler installed only after the arguments are parsed (a signal then
    # killed wmzoo at -15 without a word). Before main() runs (the interpreter's start-up and
    # wmzoo.cli's imports: 0.06-0.15 s measured on a loaded 2-core machine) nothing is read or
    # written, and no Python handler can be in place yet.
    import os
    import signal

    import wmzoo.cli

    real = wmzoo.cli.build_parser

    class Parser:
        def parse_args(self, argv):
            os.kill(os.getpid(), signal.SIGTERM)  # delivered at the next bytecode boundary
            return real().parse_args(argv)

    monkeypatch.setattr(wmzoo.cli, "build_parser", Parser)
    before = signal.getsignal(signal.SIGTERM)
    assert wmzoo.cli.main(["list"]) == 2
    assert capsys.readouterr().err.strip() == "wmzoo: error: interrupted"
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is given back


# --------------------------------------------------------------------------- output paths

ARTEFACTS = {  # what a user must never lose to a mistyped output path
    "checkpoint": "{ckpt}", "run.yaml": "{run}/run.yaml", "replay chunk": "{chunk}",
    "dataset manifest": "{dataset}/manifest.json", "dataset chunk": "{dataset_chunk}",
}
FILE_OUTPUTS = {  # every command's file-valued output flag, {target} the path it is given
    "eval --json": "eval --checkpoint {ckpt} --episodes 1 --max-steps 3 --json {target}",
    "bench --json": "bench --backbones rssm:tiny --mode train --batch 2 --seq-len 4 --iters 1 --warmup 0 --json {target}",
    "bench --mode env --json": "bench --mode env --env minigrid-empty-5x5 --envs 1 --steps 3 --json {target}",
    "aggregate --json": "aggregate {eval_json} --json {target}",
    "imagine --out": "imagine --checkpoint {ckpt} --context 2 --horizon 2 --out {target}",
    "study init": "study init {target}",
}
FOLDER_OUTPUTS = {  # every command's folder-valued output flag
    "run --logdir": "run --backbone rssm --preset tiny --steps 5 --no-progress --logdir {target}",
    "evaluate --out": "evaluate --checkpoint {ckpt} --protocol imagination --data {dataset} --out {target}",
    "data generate --out": "data generate --env minigrid-empty-5x5 --episodes 1 --size 16 --out {target}",
    "data import-libero --out": "data import-libero {libero} --out {target}",
    "study run --out": "study run {study_yaml} --out {target} --no-progress",
    "study report": "study report {target} --no-bench --no-video",
}
FOREIGN_FOLDERS = {  # folders of another kind, for the commands that write folders of their own
    "run folder": ("{run}", ("data generate --out", "data import-libero --out", "study run --out")),
    "replay folder": ("{run}/replay", ("data generate --out", "data import-libero --out", "study run --out")),
    "dataset folder": ("{dataset}", ("run --logdir", "study run --out")),
}
OUTPUT_CASES = (
    [(f"{flag} at a {what}", argv, target) for flag, argv in {**FILE_OUTPUTS, **FOLDER_OUTPUTS}.items()
     for what, target in ARTEFACTS.items()]
    + [(f"{flag} at a {what}", FOLDER_OUTPUTS[flag], target) for what, (target, flags) in FOREIGN_FOLDERS.items()
       for flag in flags]
    + [(f"{flag} at a checkpoint renamed {name}", FILE_OUTPUTS[flag], "{root}/renamed/" + name)
       for flag, name in (("imagine --out", "x.gif"), ("imagine --out", "x.png"), ("eval --json", "x.json"),
                          ("bench --json", "x.json"), ("aggregate --json", "x.json"))]
    + [("eval --json at a JSON of another command", FILE_OUTPUTS["eval --json"], "{bench_json}"),
       ("bench --json at a JSON of another command", FILE_OUTPUTS["bench --json"], "{eval_json}")]
)


@pytest.fixture(scope="module")
def outputs(world: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The bad-input world plus a dataset, a LIBERO file, a study YAML, an eval and a bench JSON
    and a checkpoint copied under output names (``renamed/``)."""
    from libero_fakes import write_libero

    root = world["root"]
    dataset = root / "dataset"
    assert main(["data", "generate", "--env", "minigrid-empty-5x5", "--episodes", "2", "--size", "16",
                 "--out", str(dataset)]) == 0
    eval_json, bench_json = root / "eval.json", root / "bench.json"
    assert main(FILE_OUTPUTS["eval --json"].format(ckpt=world["ckpt"], target=eval_json).split()) == 0
    assert main(FILE_OUTPUTS["bench --json"].format(target=bench_json).split()) == 0
    renamed = root / "renamed"
    renamed.mkdir(exist_ok=True)
    for name in ("x.gif", "x.png", "x.json"):
        shutil.copyfile(world["ckpt"], renamed / name)
    libero = tmp_path_factory.mktemp("libero") / "pick_up_the_bowl_demo.hdf5"
    write_libero(libero, [5], "pick up the bowl")
    study_yaml = tmp_path_factory.mktemp("study") / "study.yaml"
    assert main(["study", "init", str(study_yaml)]) == 0
    return {**world, "dataset": dataset, "eval_json": eval_json, "bench_json": bench_json, "libero": libero,
            "study_yaml": study_yaml, "chunk": next((world["run"] / "replay").glob("*.npz")),
            "dataset_chunk": next((dataset / "train").glob("*.npz"))}


@pytest.mark.parametrize(("case", "argv", "target"), OUTPUT_CASES, ids=[c[0] for c in OUTPUT_CASES])
def test_no_output_path_overwrites_what_the_command_did_not_write(outputs, capsys, case, argv, target):
    # Catches: an output flag pointed (by a typo or tab completion) at a checkpoint, run.yaml,
    # replay chunk, dataset file or a foreign folder replacing or polluting it, exit 0 (`eval
    # --json <checkpoint>` replaced a 4.9 MB checkpoint with 428 bytes of JSON), or work done
    # before the refusal.
    paths = {key: str(value) for key, value in outputs.items()}
    target = target.format(**paths)
    before = _hashes(outputs["root"])
    capsys.readouterr()
    code = main(argv.format(**paths, target=target).split())
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and "Warning" not in line]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("wmzoo: error:"), f"{case}: exit {code}\n{err}"
    assert Path(target).name in lines[0], lines[0]
    assert _hashes(outputs["root"]) == before, f"{case}: files changed"


def test_a_command_rewrites_its_own_earlier_output(outputs, capsys, tmp_path):
    # Catches: the output rule refusing what it should allow — re-running a command over its own
    # earlier output (the usual workflow) — or a new file not being written at all.
    for flag, name in (("eval --json", "again.json"), ("bench --json", "again.json"),
                       ("imagine --out", "again.gif"), ("aggregate --json", "agg.json")):
        target = tmp_path / flag.split()[0] / name
        argv = FILE_OUTPUTS[flag].format(**{k: str(v) for k, v in outputs.items()}, target=target).split()
        assert main(argv) == 0 and target.is_file()
        first = target.stat().st_mtime_ns
        assert main(argv) == 0, f"{flag}: {capsys.readouterr().err}"
        assert target.stat().st_mtime_ns >= first and target.stat().st_size > 0


def test_checkpoint_tensors_of_another_dtype_or_shape_are_refused(world, capsys, tmp_path):
    # Catches: a safetensors header that declares an integer dtype for a float weight of the same
    # byte size loading as garbage weights (eval, imagine and --resume exited 0); the same bytes
    # declared as twice as many half floats. (Optimizer moments: tests/test_optim.py.)
    import json
    import struct

    raw = world["ckpt"].read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    tree = json.loads(header["__metadata__"]["tree"])
    cases = {}
    for name, dtype in (("weight-int32", "I32"), ("weight-float16-pairs", "F16")):
        key = next(k for k, v in header.items() if k.startswith("/world_model/") and v.get("dtype") == "F32"
                   and len(v["shape"]) == 2)
        change = {"dtype": dtype} if dtype == "I32" else {"dtype": dtype, "shape": [*header[key]["shape"][:-1], 2 * header[key]["shape"][-1]]}
        edited = {**header, key: {**header[key], **change}}
        text = json.dumps(edited).encode()
        text += b" " * (-len(text) % 8)
        path = tmp_path / f"{name}.safetensors"
        path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + size:])
        cases[name] = (path, key)
    assert tree  # the edit keeps wmzoo's own JSON tree
    for name, (path, key) in cases.items():
        for argv in (["eval", "--checkpoint", str(path), "--episodes", "1"],
                     ["imagine", "--checkpoint", str(path), "--out", str(tmp_path / "x.gif")]):
            capsys.readouterr()
            assert main(argv) == 2, name
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and err[0].startswith("wmzoo: error:") and key.split("/")[-1] in err[0], (name, err)
            assert "does not fit" in err[0]
    assert not (tmp_path / "x.gif").exists()


@pytest.mark.parametrize(("damage", "says"), [
    ("no run section", "'run' section"), ("no env section", "'env' section"), ("no progress section", "'progress' section"),
    ("env without obs_shape", "env section"), ("progress as text", "env_steps = 'many'"),
    ("negative progress", "updates = -3"), ("unknown progress counter", "bogus"),
    ("fractional counter", "episodes = 1.5"), ("tree not a mapping", "not a mapping"),
])
def test_checkpoints_with_damaged_sections_are_one_line_everywhere(world, capsys, tmp_path, damage, says):
    # Catches: a checkpoint that parses but lacks its run/env/progress section, or carries edited
    # progress counters, ending in a KeyError/TypeError traceback in eval, imagine, evaluate and
    # --resume (or resuming from nonsense counters).
    import json

    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(world["ckpt"]), "pt") as f:
        tensors = {key: f.get_tensor(key) for key in f.keys()}
        meta = f.metadata()
    tree = dict(json.loads(meta["tree"])["__dict__"])
    if damage.startswith("no "):
        tree.pop(damage.split()[1])
    elif damage == "env without obs_shape":
        tree["env"] = {"__dict__": [kv for kv in tree["env"]["__dict__"] if kv[0] != "obs_shape"]}
    elif damage == "tree not a mapping":
        tree = None
    else:
        counters = dict(tree["progress"]["__dict__"])
        counters.update({"progress as text": {"env_steps": "many"}, "negative progress": {"updates": -3},
                         "unknown progress counter": {"bogus": 1}, "fractional counter": {"episodes": 1.5}}[damage])
        tree["progress"] = {"__dict__": list(counters.items())}
    skeleton = None if tree is None else {"__dict__": list(tree.items())}
    logdir = tmp_path / "run"
    shutil.copytree(world["run"], logdir)
    path = logdir / "checkpoint.safetensors"
    save_file(tensors, str(path), metadata={**meta, "tree": json.dumps(skeleton)})
    before = _hashes(tmp_path)
    for argv in (["eval", "--checkpoint", str(path), "--episodes", "1"],
                 ["imagine", "--checkpoint", str(path), "--out", str(tmp_path / "x.gif")],
                 ["evaluate", "--checkpoint", str(path), "--protocol", "imagination", "--data", str(world["run"] / "replay"),
                  "--out", str(tmp_path / "evaluate")],
                 ["run", "--logdir", str(logdir), "--resume", "--steps", "80", "--no-progress"]):
        capsys.readouterr()
        code = main(argv)
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert code == 2 and len(err) == 1 and err[0].startswith("wmzoo: error:"), (argv[0], err)
        assert says in err[0] or argv[0] in ("evaluate",) and "data" in err[0], (argv[0], err[0])
    assert _hashes(tmp_path) == before


def test_a_signal_while_main_is_finishing_is_still_one_line(monkeypatch, capsys):
    # Catches: a SIGTERM that lands in main's finally block (after the command returned, before
    # the handler is given back) escaping as an uncaught KeyboardInterrupt: Python then kills
    # itself with SIGINT (exit -2) and prints a traceback.
    import sys
    import types

    import wmzoo.cli

    def teardown() -> None:
        raise KeyboardInterrupt  # what the SIGTERM handler raises, at that moment

    monkeypatch.setitem(sys.modules, "wmzoo.distributed", types.SimpleNamespace(teardown=teardown))
    assert wmzoo.cli.main(["list", "--kind", "env"]) == 2
    assert capsys.readouterr().err.strip() == "wmzoo: error: interrupted"
