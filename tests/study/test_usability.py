"""`wmzoo study` as a new user meets it (issue 28, item 5): each cell's log and the report's links
to failed ones, progress inside cells and during dataset generation, --threads, attempts and wall
time across resumes, TensorBoard without duplicated steps after a resume, every cell checked
before anything is written, SIGTERM, `set:` fields the study decides itself, and submitit's time
limit and errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from wmzoo.cli import main
from wmzoo.errors import WmzooError
from wmzoo.study.report import scalars, write_report
from wmzoo.study import run as study_run
from wmzoo.study.run import cell_commands, plan_cells, prepare, run_study
from wmzoo.study.spec import study_from_dict

TINY = {"train.image_size": 16, "model.batch_size": 2, "model.seq_len": 8}
ONE = {"name": "u", "backbones": ["rssm"], "envs": ["minigrid-empty-5x5"], "seeds": [0],
       "budget": {"updates": 2, "episodes": 5, "size": 16}, "set": TINY}
CELL = Path("cells/rssm-tiny/minigrid-empty-5x5/seed-0")


def _record(cell: Path) -> dict:
    return json.loads((cell / "cell.json").read_text())


def test_each_cell_keeps_its_log_and_the_report_links_failed_ones(tmp_path: Path):
    # Catches: a cell's output thrown away (only its last stderr line kept), stdout missing from
    # the log, the report naming a failed cell without a way to its log, the threads each cell
    # gets not said (and not passed to training, which then ran on train.threads=1 whatever
    # OMP_NUM_THREADS said), a run without progress.json for `study run` to show.
    study = {**ONE, "seeds": [0, 1]}
    out = tmp_path / "out"
    prepare(study_from_dict(study), study, out, log=lambda _: None)
    bad = out / "cells/rssm-tiny/minigrid-empty-5x5/seed-1"
    bad.mkdir(parents=True)
    (bad / "checkpoint.safetensors").write_bytes(b"not a checkpoint")
    lines: list[str] = []
    records = run_study(study_from_dict(study), study, out, threads=1, show_progress=False, log=lines.append)
    assert [r["state"] for r in records] == ["done", "failed"]
    assert "each cell runs with 1 torch thread (--threads)" in lines
    assert all("--set train.threads=1" in r["commands"][0] for r in records), records[0]["commands"]
    good = (out / CELL / "log.txt").read_text()
    assert "$ wmzoo run --backbone rssm" in good and "checkpoint: " in good  # stdout of the run
    assert "$ wmzoo evaluate --checkpoint" in good
    failed = (bad / "log.txt").read_text()
    assert "$ wmzoo run --logdir" in failed and "wmzoo: error:" in failed  # stderr of the resume
    assert records[1]["log"] == "log.txt"
    progress = json.loads((out / CELL / "progress.json").read_text())
    assert progress == {"step": 2, "total": 2, "unit": "updates"}
    text = write_report(out, reps=50, bench=False, video=False).read_text()
    section = text.split("## Failed cells", 1)[1]
    assert "[rssm:tiny / minigrid-empty-5x5 / seed 1](../cells/rssm-tiny/minigrid-empty-5x5/seed-1/log.txt)" in section
    assert "`wmzoo run` exited 2: wmzoo: error:" in section


def test_the_progress_line_shows_each_running_cells_steps(tmp_path: Path):
    # Catches: a progress line counting finished cells only (an hour-long cell shows nothing),
    # a stale cell of an earlier study process shown as running.
    study = {**ONE, "backbones": ["rssm", "s4wm"], "seeds": [0, 1]}
    cells = plan_cells(study_from_dict(study), log=lambda _: None)
    since = time.time() - 1
    for cell, state, step in zip(cells, ["running", "running", "done", "running"], [3, None, 7, 5]):
        path = tmp_path / cell.path
        path.mkdir(parents=True)
        (path / "cell.json").write_text(json.dumps({"state": state}))
        if step is not None:
            (path / "progress.json").write_text(json.dumps({"step": step, "total": 10, "unit": "updates"}))
    old = tmp_path / cells[3].path / "cell.json"
    os.utime(old, (since - 100, since - 100))  # written by an earlier study process
    assert study_run.cell_progress(tmp_path, cells, since) == "rssm:tiny minigrid-empty-5x5 s0 3/10, rssm:tiny minigrid-empty-5x5 s1 starting"


def test_dataset_generation_shows_its_progress(tmp_path: Path, monkeypatch):
    # Catches: minutes of dataset generation before the first cell with nothing on the screen.
    import wmzoo.data.generate as generate

    monkeypatch.setattr(generate, "_MANIFEST_EVERY_S", 0.0)
    lines: list[str] = []
    prepare(study_from_dict(ONE), ONE, tmp_path / "out", log=lines.append)
    assert any(line.startswith("generating 5 of 5 episodes of minigrid-empty-5x5") for line in lines), lines
    assert any(line.strip().startswith("5/5 episodes") for line in lines), lines


def test_threads_default_and_option():
    # Catches: --threads not reaching the cells' commands, a resume that drops it.
    study = study_from_dict(ONE)
    (cell,) = plan_cells(study, log=lambda _: None)
    train, resume, _ = cell_commands(cell, study, Path("out"), threads=3)
    assert "train.threads=3" in train and "train.threads=3" in resume
    with pytest.raises(WmzooError, match="--threads 0: must be at least 1"):
        run_study(study, ONE, "nowhere", threads=0)


def test_submitit_time_limit_comes_from_the_budget():
    # Catches: submitit's own default time limit (2 min local, 5 min SLURM) killing every cell
    # longer than that; an online budget counted as updates (env steps x train_ratio / B·L are).
    offline = study_from_dict({**ONE, "budget": {"updates": 3000, "episodes": 5, "size": 16}})
    assert study_run.submitit_time_limit(offline, plan_cells(offline, log=lambda _: None)) == 10 + 50
    online = study_from_dict({**ONE, "budget": {"steps": 6000},
                              "set": {**TINY, "train.train_ratio": 64, "train.final_updates": 100}})
    # 6000 x 64 / (2 x 8) = 24000 updates + 100 final: 402 min, 6000 env steps at 0.01 s: 1 min
    assert study_run.submitit_time_limit(online, plan_cells(online, log=lambda _: None)) == 10 + 402 + 1


def test_submitit_job_gets_the_budgets_time_limit(tmp_path: Path, monkeypatch):
    # Catches: the derived limit not passed to the executor, or overriding the user's timeout_min.
    submitit = pytest.importorskip("submitit")
    seen: list[dict] = []
    original = submitit.LocalExecutor.update_parameters

    def spy(self, **kwargs):
        seen.append(kwargs)
        return original(self, **kwargs)

    monkeypatch.setattr(submitit.LocalExecutor, "update_parameters", spy)
    lines: list[str] = []
    (record,) = run_study(study_from_dict(ONE), ONE, tmp_path / "out", executor="submitit", show_progress=False,
                          log=lines.append, submitit_parameters={"cluster": "local"})
    assert record["state"] == "done", record
    assert seen[-1]["timeout_min"] == 10 + 1 and any("time limit 11 min per cell" in line for line in lines), lines
    run_study(study_from_dict(ONE), ONE, tmp_path / "out", executor="submitit", show_progress=False,
              log=lambda _: None, submitit_parameters={"cluster": "local", "timeout_min": 7})
    assert seen[-1]["timeout_min"] == 7


@pytest.mark.slow
def test_a_submitit_job_at_its_time_limit_saves_and_says_so(tmp_path: Path):
    # Catches: a job stopped at its time limit reported as "Job (task=0) failed during
    # processing" with the cell's checkpoint lost (its process SIGKILLed) instead of the cell's
    # own line, its checkpoint written on the way out.
    pytest.importorskip("submitit")
    study = {**ONE, "budget": {"updates": 5000, "episodes": 5, "size": 16},
             "set": {**TINY, "train.checkpoint_every": 100_000}}
    out = tmp_path / "out"
    (record,) = run_study(study_from_dict(study), study, out, executor="submitit", show_progress=False,
                          log=lambda _: None,
                          submitit_parameters={"cluster": "local", "timeout_min": 1, "signal_delay_s": 25})
    assert record["state"] == "interrupted", record
    assert "interrupted at update" in record["error"] and "failed during processing" not in record["error"]
    assert (out / CELL / "checkpoint.safetensors").is_file()


def test_a_resumed_run_logs_no_step_twice(tmp_path: Path):
    # Catches: TensorBoard curves with bumps after a resume: the interrupted attempt's scalars
    # past the checkpoint's step stay beside the resumed attempt's for the same steps.
    data, run = tmp_path / "data", tmp_path / "run"
    assert main(["data", "generate", "--env", "minigrid-empty-5x5", "--episodes", "5", "--size", "16",
                 "--out", str(data)]) == 0
    sets = [item for key, value in {**TINY, "train.log_every": 1, "train.checkpoint_every": 2}.items()
            for item in ("--set", f"{key}={value}")]
    assert main(["run", "--backbone", "rssm", "--env", "minigrid-empty-5x5", "--steps", "2", *sets,
                 "--offline", str(data), "--logdir", str(run), "--no-progress"]) == 0
    shutil.copy(run / "checkpoint.safetensors", tmp_path / "at-2.safetensors")
    assert main(["run", "--logdir", str(run), "--resume", "--steps", "4", "--no-progress"]) == 0
    # as if that attempt had been killed after logging updates 3 and 4 but before its checkpoint
    shutil.copy(tmp_path / "at-2.safetensors", run / "checkpoint.safetensors")
    assert main(["run", "--logdir", str(run), "--resume", "--steps", "4", "--no-progress"]) == 0
    logged = scalars(run / "tb")
    losses = [tag for tag in logged if tag.endswith("/loss")]
    assert losses and all([step for step, _ in logged[tag]] == [1, 2, 3, 4] for tag in losses), logged[losses[0]]


@pytest.mark.parametrize("change, reason", [
    ({"envs": ["minigrid-nope"]}, "envs[0]: unknown environment 'minigrid-nope'"),
    ({"backbones": ["rem"], "envs": ["dmc-walker-walk"]},
     "backbones[0] (rem) on dmc-walker-walk: backbone 'rem' needs discrete actions"),
])
def test_every_cell_is_checked_before_anything_is_written(tmp_path: Path, change: dict, reason: str):
    # Catches: a backbone x env pair `wmzoo run` refuses (an env name only its maker knows, an
    # action space the backbone cannot take) getting cell folders, failing cell by cell, exit 1
    # and the reason on stdout only.
    spec, out = tmp_path / "s.yaml", tmp_path / "out"
    spec.write_text(yaml.safe_dump({**ONE, **change}))
    proc = subprocess.run([sys.executable, "-m", "wmzoo.cli", "study", "run", str(spec), "--out", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert err.count("\n") == 0 and err.startswith("wmzoo: error: study ") and reason in err, err
    assert not out.exists()


@pytest.mark.parametrize("where, field", [
    ({"set": {**TINY, "train.steps": 50}}, "set: train.steps"),
    ({"backbones": [{"name": "rssm", "set": {"seed": 3}}]}, "backbones[0].set: seed"),
    ({"set": {**TINY, "train.threads": 4}}, "set: train.threads"),
    ({"set": {**TINY, "train.image_size": 32}}, "set: train.image_size 32"),
])
def test_a_set_field_the_study_decides_is_refused(where: dict, field: str):
    # Catches: a `set:` field silently replaced for every cell (train.steps by the budget, seed
    # by seeds, train.threads by --threads, an offline train.image_size by the datasets' size).
    with pytest.raises(WmzooError, match="^study: " + field.replace("[", r"\[").replace("]", r"\]")):
        study_from_dict({**ONE, **where})


def _wait_for(condition, proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.time() + seconds
    while not condition():
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.1)


@pytest.mark.slow
def test_sigterm_saves_each_running_cell_and_the_rerun_counts_both_attempts(tmp_path: Path):
    # Catches: SIGTERM killing the study (rc -15) and its cells with SIGKILL (no checkpoint: the
    # re-run starts over), a traceback instead of one line, an attempt or its wall time lost on
    # the re-run (cell.json written only once training ended).
    study = {**ONE, "budget": {"updates": 150, "episodes": 5, "size": 16},
             "set": {**TINY, "train.checkpoint_every": 100_000}}
    spec, out = tmp_path / "s.yaml", tmp_path / "out"
    spec.write_text(yaml.safe_dump(study))
    proc = subprocess.Popen([sys.executable, "-m", "wmzoo.cli", "study", "run", str(spec), "--out", str(out),
                             "--threads", "1", "--no-progress", "--no-report"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    progress = out / CELL / "progress.json"
    _wait_for(lambda: progress.is_file() and json.loads(progress.read_text())["step"] >= 5, proc, 240)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, (proc.returncode, err)
    assert err.strip().count("\n") == 0 and err.startswith("wmzoo: error: stopped (SIGTERM)"), err
    first = _record(out / CELL)
    assert first["state"] == "interrupted" and first["attempts"] == 1 and first["seconds"] > 0, first
    assert "interrupted at update" in (out / CELL / "log.txt").read_text()
    from wmzoo.train.checkpoint import checkpoint_header

    saved = checkpoint_header(out / CELL / "checkpoint.safetensors")["progress"]["updates"]
    assert saved >= 5
    (again,) = run_study(study_from_dict(study), study, out, threads=1, show_progress=False, log=lambda _: None)
    assert again["state"] == "done" and again["attempts"] == 2, again
    assert again["seconds"] > first["seconds"] and " --resume " in again["commands"][0]


def test_cells_run_seed_by_seed(tmp_path: Path, monkeypatch):
    # Catches: cells run backbone by backbone, so that a study stopped part-way (a lease that ends,
    # a SIGTERM) has every seed of its first backbones and nothing of its last ones.
    spec = {**ONE, "backbones": ["rssm", "s4wm", "rem"], "seeds": [3, 1]}
    study = study_from_dict(spec)
    monkeypatch.setattr(study_run, "prepare", lambda study, raw, out, log=print: plan_cells(study, log))
    ran: list[tuple[str, int]] = []

    def fake_run_cell(cell, study, out, threads=1, processes=None):
        ran.append((cell["backbone"], cell["seed"]))
        return {"cell": cell, "state": "done"}

    monkeypatch.setattr(study_run, "run_cell", fake_run_cell)
    run_study(study, spec, tmp_path / "out", jobs=1, show_progress=False, log=lambda _: None)
    assert ran == [("rssm", 3), ("s4wm", 3), ("rem", 3), ("rssm", 1), ("s4wm", 1), ("rem", 1)]


def test_rows_envs_and_seeds_choose_the_cells_that_run(tmp_path: Path, monkeypatch, capsys):
    # Catches: a selection applied as "any of" instead of "all of" (a cell of a chosen row but
    # another seed run), a seed compared as an int against the flag's string (nothing run), and a
    # name the study lacks silently running nothing; the others wait for a later run.
    spec = {**ONE, "backbones": ["rssm", "s4wm", "rem"], "envs": ["minigrid-empty-5x5", "crafter"],
            "seeds": [0, 1, 2]}
    study = study_from_dict(spec)
    monkeypatch.setattr(study_run, "prepare", lambda study, raw, out, log=print: plan_cells(study, log))
    ran: list[tuple[str, str, int]] = []

    def fake_run_cell(cell, study, out, threads=1, processes=None):
        ran.append((cell["label"], cell["env"], cell["seed"]))
        return {"cell": cell, "state": "done"}

    monkeypatch.setattr(study_run, "run_cell", fake_run_cell)
    logged: list[str] = []
    only = {"rows": ["rem:tiny", "rssm:tiny"], "envs": ["crafter"], "seeds": ["2", "1"]}
    records = run_study(study, spec, tmp_path / "out", jobs=1, show_progress=False, log=logged.append, only=only)
    assert len(records) == 4  # the chosen cells' records: the exit code says whether they are done
    assert ran == [("rssm:tiny", "crafter", 1), ("rem:tiny", "crafter", 1),
                   ("rssm:tiny", "crafter", 2), ("rem:tiny", "crafter", 2)]
    assert "14 of 18 cells are outside --rows --envs --seeds: left for a later run" in logged
    ran.clear()
    run_study(study, spec, tmp_path / "out2", jobs=1, show_progress=False, log=logged.append, only={"seeds": ["0"]})
    assert ran == [(label, env, 0) for label in ("rssm:tiny", "s4wm:tiny", "rem:tiny")
                   for env in ("minigrid-empty-5x5", "crafter")]
    # the CLI: a name the study lacks is one line, exit 2, before anything is written
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["study", "run", str(path), "--out", str(tmp_path / "new"), "--rows", "s4wm:tiny,rssm"]) == 2
    assert "--rows rssm: not in this study (its rows: rssm:tiny, s4wm:tiny, rem:tiny); nothing was run" in capsys.readouterr().err
    for flags, says in ((["--seeds", "1,,2"], "--seeds '1,,2': an empty entry"), (["--envs", "crafter,crafter"],
                        "crafter is given twice"), (["--rows", ""], "--rows '': an empty entry")):
        assert main(["study", "run", str(path), "--out", str(tmp_path / "new"), *flags]) == 2
        assert says in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
