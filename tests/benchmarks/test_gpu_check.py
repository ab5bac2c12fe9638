"""``benchmarks/gpu_check.sh``: its arguments, and that every command it would run is one the CLI
accepts (the script itself runs where a GPU is lent; on a machine without one it says so)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import torch

from wmzoo.cli import build_parser

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gpu_check.sh"


def gpu_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def commands(*args: str) -> list[list[str]]:
    """The ``wmzoo`` argument lists of ``--dry-run``: each printed line ``$ timeout N python -m wmzoo.cli ...``."""
    done = gpu_check("--dry-run", *args)
    assert done.returncode == 0, done.stderr
    lines = [shlex.split(line[2:]) for line in done.stdout.splitlines() if line.startswith("$ ")]
    return [words[words.index("wmzoo.cli") + 1:] for words in lines]


def test_every_command_parses_with_the_cli_and_takes_the_device_and_out_folder(tmp_path):
    # Catches: a flag renamed in `wmzoo bench`/`wmzoo run` and not here (the lent GPU's minutes
    # lost to a usage error), --device or --out not passed on, a check dropped from the default set.
    argvs = commands("--device", "cuda:1", "--out", str(tmp_path))
    assert [a[0] for a in argvs] == ["bench", "bench", "run"]
    for argv in argvs:
        args = build_parser().parse_args(argv)
        assert args.device == "cuda:1"
    imagine, train, nccl = (build_parser().parse_args(a) for a in argvs)
    assert imagine.mode == "imagine" and imagine.backbones == "iris:paper,rem:paper"
    assert imagine.json_path == str(tmp_path / "imagine_paper.json")
    assert train.mode == "train" and train.compile and train.precision == "fp32,bf16"
    assert len(train.backbones.split(",")) == 7
    assert nccl.nproc == 2


def test_only_and_seconds_choose_the_checks_and_their_time_limits():
    # Catches: --only ignored, the time shares not following --seconds (a check outliving the lease).
    done = gpu_check("--dry-run", "--only", "train", "--seconds", "100")
    lines = [line for line in done.stdout.splitlines() if line.startswith("$ ")]
    assert len(lines) == 1 and lines[0].startswith("$ timeout 55 ") and "--mode train" in lines[0]


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "unknown argument --bogus"),
    (["--only", "imagine,speed"], "unknown check speed"),
    (["--seconds", "ten"], "--seconds ten"),
    (["--seconds", "5"], "at least 30"),
    (["--device"], "--device needs a value"),
])
def test_bad_arguments_are_one_line_and_exit_2(args, message):
    done = gpu_check(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_says_so_in_one_line_and_runs_nothing(tmp_path):
    done = gpu_check("--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "no CUDA GPU here" in done.stderr
    assert not (tmp_path / "out").exists()


def test_help_names_every_check():
    done = gpu_check("--help")
    assert done.returncode == 0 and all(check in done.stdout for check in ("imagine", "train", "nccl"))
