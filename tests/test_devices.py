"""--device cpu|cuda|auto through run, eval, imagine, evaluate and bench (wmzoo.device)."""

from __future__ import annotations

import pytest
import torch
import yaml

from wmzoo.cli import main
from wmzoo.device import device_name, resolve_device
from wmzoo.errors import WmzooError

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def test_auto_is_cuda_where_there_is_a_gpu(monkeypatch):
    # Catches: auto not resolved (a torch error), or resolved to cuda without a GPU.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device_name("auto") == "cuda"


@NO_CUDA
@pytest.mark.parametrize("argv", [
    ["run", "--steps", "5", "--device", "cuda"],
    ["bench", "--backbones", "rssm", "--mode", "train", "--device", "cuda"],
    ["eval", "--checkpoint", "nowhere.safetensors", "--device", "cuda"],
])
def test_cuda_on_a_machine_without_one_is_one_line(argv, tmp_path, capsys):
    # Catches: --device cuda ending in a torch traceback (or training on the CPU regardless);
    # eval names the device before it reads the checkpoint.
    if argv[0] == "run":
        argv = [*argv, "--logdir", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA GPU" in err[0] and "--device" in err[0], err
    assert not (tmp_path / "run").exists()


def test_bad_device_names_are_one_line(capsys):
    with pytest.raises(WmzooError, match="not a device"):
        resolve_device("gpu0", "--device")
    from wmzoo.config import run_spec

    with pytest.raises(WmzooError, match="train.device"):
        run_spec("rssm", "minigrid-empty-5x5", "tiny", overrides=["train.device=tpu"])


def test_run_flags_reach_the_recorded_run(tmp_path, capsys):
    # Catches: --device / --precision accepted by the parser but not given to the run.
    logdir = tmp_path / "run"
    code = main(["run", "--backbone", "rssm", "--env", "minigrid-empty-5x5", "--preset", "tiny",
                 "--steps", "5", "--device", "auto", "--precision", "bf16", "--logdir", str(logdir), "--no-progress"])
    assert code == 0
    train = yaml.safe_load((logdir / "run.yaml").read_text())["train"]
    assert train["device"] == "auto" and train["precision"] == "bf16" and train["compile"] is False
    # eval on an explicit device, and the recorded one
    assert main(["eval", "--checkpoint", str(logdir / "checkpoint.safetensors"), "--episodes", "1",
                 "--max-steps", "5", "--device", "cpu"]) == 0
