"""Data-parallel training (``wmzoo.distributed``): gloo ranks on CPU, one thread each.

The exactness check runs ``tests/train/ddp_worker.py`` as two ranks (the environment torchrun
gives: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``) and as one process on the two
ranks' batches concatenated; the end-to-end check runs ``wmzoo run --nproc 2`` (torchrun)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from wmzoo import distributed
from wmzoo.interfaces import EnvInfo
from wmzoo.train.checkpoint import load_checkpoint

WORKER = Path(__file__).with_name("ddp_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return {**env, "OMP_NUM_THREADS": "1", "MKL_DISABLE_FAST_MM": "1", **extra}


def test_two_gloo_ranks_hold_the_parameters_of_one_process_on_the_concatenated_batch(tmp_path):
    # Catches: gradients clipped before the all-reduce (the grad norms would be each rank's own,
    # not the concatenated batch's, and the clipped steps differ), a rank or a component skipping
    # the all-reduce (the ranks' parameters would differ, the world model's or the policy's),
    # gradients summed rather than averaged (norms twice the one-process ones), and the ranks'
    # losses not agreeing on a skip.
    port = str(_free_port())
    ranks = [subprocess.Popen([sys.executable, str(WORKER), str(tmp_path / f"rank{r}.pt")], env=_env(
        RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
        for r in range(2)]
    single = subprocess.run([sys.executable, str(WORKER), str(tmp_path / "single.pt")], env=_env(), timeout=300)
    assert [p.wait(timeout=300) for p in ranks] == [0, 0] and single.returncode == 0
    r0, r1, one = (torch.load(tmp_path / f"{name}.pt") for name in ("rank0", "rank1", "single"))
    assert r0["params"].keys() == one["params"].keys()
    assert any(k.startswith("policy.") for k in one["params"]) and any(k.startswith("world_model.") for k in one["params"])
    for name, value in r0["params"].items():
        assert torch.equal(value, r1["params"][name]), f"ranks differ in {name}"
        torch.testing.assert_close(value, one["params"][name], rtol=1e-5, atol=1e-6, msg=f"{name} differs")
    for mine, theirs in zip(r0["norms"], one["norms"]):
        assert mine.keys() == theirs.keys() and len(mine) >= 3  # the world model, actor and critic
        for key in mine:
            assert mine[key] == pytest.approx(theirs[key], rel=1e-4), key


def test_only_rank_0_writes_the_run_files(tmp_path, monkeypatch):
    # Catches: rank 1 writing a checkpoint, run.yaml or offline.json, or opening a tracker (a
    # second TensorBoard event file), or sharing rank 0's replay folder; and rank 1 clearing the
    # run folder's temporaries (it deleted the run.yaml rank 0 was writing: a crash at start).
    from wmzoo.config import run_spec
    from wmzoo.train import rundir
    from wmzoo.train.logger import Logger

    monkeypatch.setattr(distributed, "rank", lambda: 1)
    writing = tmp_path / ".run.yaml.123.tmp"  # rank 0's run.yaml on its way
    writing.write_text("x")
    rundir.write_run_spec(tmp_path, run_spec("rssm", "minigrid-empty-5x5", "tiny"))
    assert list(tmp_path.iterdir()) == [writing]
    writing.unlink()

    class Agent:  # what save_run reads of an agent
        run = SimpleNamespace(model_dump=dict)
        env = EnvInfo("fake", (3, 8, 8), 2)

        def state_tree(self):
            return {"world_model": {"w": torch.zeros(2)}}

    assert rundir.save_run(tmp_path, Agent(), {"updates": 1}) == tmp_path / rundir.CHECKPOINT  # type: ignore[arg-type]
    rundir.write_offline_record(tmp_path, {"data": "x"})
    assert Logger(tmp_path).trackers == []
    assert rundir.replay_dir(tmp_path) == tmp_path / "replay-rank1"
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(distributed, "rank", lambda: 0)
    assert rundir.replay_dir(tmp_path) == tmp_path / "replay"


def test_rank_seeds_differ_beyond_what_a_run_adds_itself(monkeypatch):
    # Catches: the rank offset missing (both ranks would collect the same episodes) or too small
    # (rank 1's replay seed at update u equal to rank 0's at update u + 1).
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    assert distributed.rank_seed(5) - 5 > 10**6


def _chunk_obs(folder: Path) -> np.ndarray:
    first = sorted(p for p in folder.glob("*.npz"))[0]
    with np.load(first, allow_pickle=False) as data:
        return data["obs"]


@pytest.mark.slow
def test_wmzoo_run_nproc_2_end_to_end_and_resume(tmp_path):
    # Catches: rank 1 writing the run's files (a second TensorBoard event file, stray files), both
    # ranks collecting the same episodes (rank seed offset missing), a replay shared by the ranks,
    # the world size not recorded, and --resume of a 2-process run not restoring every rank.
    logdir = tmp_path / "run"
    base = [sys.executable, "-m", "wmzoo.cli", "run", "--backbone", "rssm", "--env", "minigrid-empty-5x5",
            "--preset", "tiny", "--logdir", str(logdir), "--no-progress", "--nproc", "2"]
    done = subprocess.run([*base, "--steps", "300"], env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("checkpoint:") == 1  # rank 0 alone reports
    assert sorted(p.name for p in logdir.iterdir()) == [
        "checkpoint.safetensors", "imagination.gif", "progress.json", "replay", "replay-rank1", "run.yaml", "tb"]
    assert len([p for p in (logdir / "tb").rglob("*") if p.is_file()]) == 1
    assert not any(p.name.endswith(".tmp") for p in logdir.rglob("*"))
    assert not np.array_equal(_chunk_obs(logdir / "replay"), _chunk_obs(logdir / "replay-rank1"))
    progress = load_checkpoint(logdir / "checkpoint.safetensors")["progress"]
    assert progress["world_size"] == 2 and progress["env_steps"] == 300 and progress["updates"] > 0
    chunks = len(list((logdir / "replay-rank1").glob("*.npz")))

    resume = [a for a in base if a not in ("--backbone", "rssm", "--env", "minigrid-empty-5x5", "--preset", "tiny")]
    again = subprocess.run([*resume, "--resume", "--steps", "360"], env=_env(), capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    after = load_checkpoint(logdir / "checkpoint.safetensors")["progress"]
    assert after["env_steps"] == 360 and after["updates"] > progress["updates"] and after["world_size"] == 2
    assert len(list((logdir / "replay-rank1").glob("*.npz"))) > chunks  # rank 1 collected on

    one = subprocess.run([a for a in resume if a not in ("--nproc", "2")] + ["--resume", "--steps", "400"],
                         env=_env(), capture_output=True, text=True, timeout=600)
    assert one.returncode == 2
    assert one.stderr.strip().splitlines() == [
        f"wmzoo: error: --resume: the run in {logdir} trained on 2 process(es), not 1; resume it --nproc 2 "
        "(its global batch and per-rank replays depend on it)"]


TORCHRUN_STDERR = b"""\
progress 10%\rprogress 20%\r[rank0]: Traceback (most recent call last):
[rank0]:   File "/work/main/wmzoo/distributed.py", line 94, in average_gradients
[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:59624: Connection reset by peer.
W1128 02:00:58.494000 26877 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 26886 closing signal SIGTERM
E1128 02:00:58.534000 26877 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1
wmzoo: error: interrupted
Traceback (most recent call last):
  File "/work/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1032, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
wmzoo.cli FAILED
-------------------------------------------------------
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 26886)  (SIGTERM)
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 26887)  (SIGKILL)
  traceback : Signal 9 (SIGKILL) received by PID 26887
=======================================================
"""


def test_torchruns_tracebacks_are_kept_back_and_its_root_cause_read(tmp_path):
    # Catches: torchrun's 84 lines (rank tracebacks, agent logs, the ChildFailedError summary)
    # reaching the user, progress bars held until a newline, the root cause read from the
    # "Failures" section (rank 0, SIGTERM) instead of "Root Cause" (rank 1, SIGKILL), or the
    # lost-rank line not naming the checkpoint to resume from.
    import io

    from wmzoo.launcher import RankOutput, lost_rank_line

    sink = io.BytesIO()
    output = RankOutput(io.BufferedReader(io.BytesIO(TORCHRUN_STDERR)), sink)
    output.join()
    assert sink.getvalue() == b"progress 10%\rprogress 20%\r"
    assert (output.failure.rank, output.failure.exitcode) == (1, -9)
    assert output.errors == ["wmzoo: error: interrupted"]
    (tmp_path / "checkpoint.safetensors").write_bytes(b"x")
    assert lost_rank_line(output.failure, 2, tmp_path) == (
        f"rank 1 of 2 stopped (killed by SIGKILL), so the data-parallel run stopped; the last checkpoint is "
        f"{tmp_path / 'checkpoint.safetensors'}: continue with `wmzoo run --logdir {tmp_path} --resume --nproc 2`")


@pytest.mark.heavy  # a real 2-rank run, one rank killed
def test_a_lost_rank_is_one_line_naming_it_and_the_run_resumes(tmp_path):
    # Catches: a rank lost to SIGKILL ending in 84 lines of torchrun's and the survivor's
    # tracebacks with no `wmzoo: error:` line, or in a line that names neither the rank nor the
    # checkpoint; and the kept checkpoint not resuming.
    import signal
    import time

    logdir = tmp_path / "run"
    argv = [sys.executable, "-m", "wmzoo.cli", "run", "--backbone", "rssm", "--env", "minigrid-empty-5x5",
            "--preset", "tiny", "--logdir", str(logdir), "--no-progress", "--nproc", "2", "--steps", "100000",
            "--set", "train.checkpoint_every=200"]
    proc = subprocess.Popen(argv, env=_env(WMZOO_TEST_RUN=str(tmp_path)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not (logdir / "checkpoint.safetensors").is_file() and time.time() < deadline:
        time.sleep(0.5)
    rank1 = [pid for pid in os.listdir("/proc") if pid.isdigit() and _environ(pid).get("RANK") == "1"
             and _environ(pid).get("WMZOO_TEST_RUN") == str(tmp_path)]
    assert len(rank1) == 1, rank1
    os.kill(int(rank1[0]), signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("wmzoo: error: rank 1 of 2 stopped (killed by SIGKILL)") and "--resume --nproc 2" in lines[0]
    assert "Traceback" not in err
    resumed = subprocess.run([sys.executable, "-m", "wmzoo.cli", "run", "--logdir", str(logdir), "--resume", "--nproc",
                              "2", "--steps", "400", "--no-progress"], env=_env(), capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert load_checkpoint(logdir / "checkpoint.safetensors")["progress"]["env_steps"] == 400


def _environ(pid: str) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
