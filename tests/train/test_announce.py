"""The header line of `wmzoo run`: what was resolved and the budget, before any training; a
budget that leaves no world-model update is one warning line; third-party banners stay quiet."""

from __future__ import annotations

import subprocess
import sys

import pytest

from wmzoo.cli import main


def _run(tmp_path, capsys, *extra: str) -> tuple[list[str], list[str]]:
    argv = ["run", "--backbone", "rssm", "--env", "minigrid-empty-5x5", "--preset", "tiny", "--no-progress",
            "--logdir", str(tmp_path / "run"), *extra]
    assert main(argv) == 0
    captured = capsys.readouterr()
    return captured.out.splitlines(), [line for line in captured.err.splitlines() if line.strip()]


def test_the_first_line_names_the_run_and_its_budget(tmp_path, capsys):
    # Catches: a run that never says what it resolved (backbone:preset, env, logdir, size, device)
    # or how many world-model updates its --steps make (the tiny prefill is 200 env steps, then
    # train_ratio 64 over batch 4 x 16 = one update per env step: 202 steps -> 2 updates).
    out, err = _run(tmp_path, capsys, "--steps", "202")
    assert out[0].startswith(f"wmzoo run: rssm:tiny on minigrid-empty-5x5 in {tmp_path / 'run'} | ")
    assert "parameters | cpu fp32 | budget 202 env steps (prefill 200; about 2 world-model updates" in out[0]
    assert not [line for line in err if line.startswith("wmzoo: warning")], err


def test_a_budget_inside_the_prefill_is_one_warning(tmp_path, capsys):
    # Catches: `--steps` at or below train.prefill making 0 updates and writing an untrained
    # model's checkpoint and GIF without a word (the mission's `--steps 200` at tiny did).
    out, err = _run(tmp_path, capsys, "--steps", "200")
    assert "about 0 world-model updates" in out[0]
    warnings = [line for line in err if line.startswith("wmzoo: warning")]
    assert len(warnings) == 1 and "--steps 200 leaves no world-model update" in warnings[0]
    assert "train.prefill=200" in warnings[0]


def test_an_offline_budget_counts_updates(tmp_path, capsys):
    # Catches: the offline header counting env steps (offline --steps are updates) or a resumed
    # run announcing the whole budget as still to do.
    data = tmp_path / "data"
    assert main(["data", "generate", "--env", "minigrid-empty-5x5", "--episodes", "2", "--size", "16",
                 "--out", str(data)]) == 0
    capsys.readouterr()
    out, _ = _run(tmp_path, capsys, "--offline", str(data), "--steps", "2")
    assert "budget 2 updates (offline, no env steps)" in out[0] and "resumed" not in out[0]
    assert main(["run", "--logdir", str(tmp_path / "run"), "--resume", "--steps", "3", "--no-progress"]) == 0
    assert "budget 3 updates (offline, no env steps), resumed at 2" in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize("module", ["gym"])
def test_env_imports_print_no_third_party_banner(module):
    # Catches: legacy gym's "unmaintained since 2022" banner (imported by Memory Maze and
    # Crafter) reaching the user through wmzoo's env import.
    pytest.importorskip(module)
    code = f"from wmzoo.envs.wrappers import require; require({module!r}, 'memory-maze', 'memory-maze')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "unmaintained" not in done.stderr and done.stderr.strip() == "", done.stderr


@pytest.mark.slow  # about 30 s: a real run, interrupted
def test_a_run_started_with_sigint_ignored_still_stops_on_it(tmp_path):
    # Catches: a run a script starts in the background (which inherits SIGINT ignored) going on
    # through `kill -INT`, instead of checkpointing and stopping as on Ctrl-C.
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "wmzoo.cli", "run", "--backbone", "rssm", "--env", "minigrid-empty-5x5",
         "--preset", "tiny", "--steps", "100000", "--no-progress", "--logdir", str(tmp_path / "run")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.stdout is not None
    header = proc.stdout.readline()  # printed once the agent is built, before the first env step
    assert header.startswith("wmzoo run:"), header
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "interrupted" in err, (proc.returncode, err)
    assert (tmp_path / "run" / "checkpoint.safetensors").is_file()
