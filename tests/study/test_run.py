"""A test-sized study end to end: 3 backbones x 2 envs x 2 seeds at `tiny`, offline on small
generated datasets. Killed with SIGKILL mid-study, then re-run: the finished cells are not run
again, the interrupted one resumes from its checkpoint; the report's numbers equal those
recomputed from the cells' own evaluation files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from wmzoo.eval.metrics import aggregate_iqm, aggregate_mean
from wmzoo.study.report import build_report, write_report
from wmzoo.study.run import cells_of, run_study
from wmzoo.study.spec import study_from_dict

BACKBONES = ["rssm", "s4wm", "rem"]
ENVS = ["minigrid-empty-5x5", "distracting-memory-100"]
STUDY = {
    "name": "ci", "backbones": BACKBONES, "envs": ENVS, "seeds": 2,
    "budget": {"updates": 6, "episodes": 6, "size": 16},
    "eval": {"context": 4},
    "set": {"train.image_size": 16, "train.log_every": 2, "train.checkpoint_every": 2,
            "model.batch_size": 2, "model.seq_len": 8},
}

pytestmark = pytest.mark.heavy  # real subprocess cells (run, then eval/evaluate): CI's second step


def _study_process(spec: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "wmzoo.cli", "study", "run", str(spec), "--out", str(out),
                             "--no-progress", "--no-report"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _record(cell_dir: Path) -> dict:
    try:
        return json.loads((cell_dir / "cell.json").read_text())
    except (OSError, ValueError):
        return {}


def test_study_killed_resumes_and_reports_what_the_cells_hold(tmp_path: Path):
    spec, out = tmp_path / "study.yaml", tmp_path / "out"
    spec.write_text(yaml.safe_dump(STUDY))
    proc = _study_process(spec, out)
    # kill -9 once one cell is done and the next has a checkpoint but is not done
    deadline, killed = time.time() + 600, None
    while time.time() < deadline and proc.poll() is None:
        dirs = sorted((out / "cells").glob("*/*/seed-*")) if (out / "cells").exists() else []
        done = [d for d in dirs if _record(d).get("state") == "done"]
        mid = [d for d in dirs if (d / "checkpoint.safetensors").exists() and _record(d).get("state") == "running"]
        if done and mid:
            os.kill(proc.pid, signal.SIGKILL)
            killed = (done, mid)
            break
        time.sleep(0.05)
    proc.wait()
    assert killed is not None, f"the study ended before a kill point: {proc.stderr.read().decode()[-500:]}"
    done, mid = killed
    time.sleep(0.5)  # PR_SET_PDEATHSIG: the killed study's cell processes are gone
    finished = {d: (d / "checkpoint.safetensors").stat().st_mtime_ns for d in done}
    records = run_study(study_from_dict(STUDY), STUDY, out, jobs=2, show_progress=False, log=lambda _: None)
    assert [r["state"] for r in records] == ["done"] * 12, [r.get("error") for r in records]
    # Catches: finished cells trained again on a re-run (their checkpoints rewritten)
    for d, mtime in finished.items():
        assert (d / "checkpoint.safetensors").stat().st_mtime_ns == mtime and _record(d)["attempts"] == 1
    # Catches: an interrupted cell started from scratch instead of resumed
    resumed = _record(mid[0])
    assert any(" --resume " in c for c in resumed["commands"]), resumed["commands"]
    # Catches: the killed attempt not counted (cell.json written only once training ended)
    assert resumed["attempts"] == 2, resumed

    report = build_report(out, reps=200, bench=False)
    assert report["score"] == "gen_mse" and not report["higher_is_better"] and report["cells"] == {
        "done": [c.name for c in cells_of(out)]}
    # every number recomputed from the cells' own eval/imagination.json
    gen = {(c.label, c.env, c.seed): json.loads((out / c.path / "eval" / "imagination.json").read_text())["gen_mse"]
           for c in cells_of(out)}
    labels = [f"{b}:tiny" for b in BACKBONES]
    for env in ENVS:
        for label in labels:
            row = report["per_env"][env][label]
            assert row["mean"] == pytest.approx(np.mean([gen[label, env, s] for s in (0, 1)]), rel=1e-12)
            assert row["seeds"] == {str(s): gen[label, env, s] for s in (0, 1)}
    # baselines from the cells' own files; aggregates of the fraction of the best constant's error
    # removed, point estimates only at 2 seeds (no bootstrap, no probability of improvement)
    first = {env: json.loads((out / next(c for c in cells_of(out) if c.env == env).path / "eval" / "imagination.json")
                             .read_text())["baselines"] for env in ENVS}
    for env in ENVS:
        assert report["baselines"][env]["best constant"] == first[env]["best_constant"]["gen_mse"]
        assert report["baselines"][env]["mean context frame"] == first[env]["mean_context_frame"]["gen_mse"]
    for label in labels:
        matrix = np.array([[1 - gen[label, env, s] / report["baselines"][env]["best constant"] for env in ENVS]
                           for s in (0, 1)])
        metrics = report["aggregate"][label]
        assert metrics["iqm"]["estimate"] == pytest.approx(float(aggregate_iqm(matrix)))
        assert metrics["mean"]["estimate"] == pytest.approx(float(aggregate_mean(matrix)))
        assert metrics["mean"]["low"] is None and "median" not in metrics  # 2 seeds; the median of 2 envs is the mean
        assert "optimality_gap" not in metrics  # not a human-normalised score
    assert report["probability_of_improvement"] == {} and report["seeds"] == 2 and report["paired"]
    assert report["pairs"][ENVS[0]][f"{labels[0]} vs {labels[1]}"]["p_value"] >= 0.5  # 2 seeds: 4 sign flips
    # memory metrics are the cells' own means
    memory = report["memory"][ENVS[1]][labels[2]]
    assert memory["gen_mse"] == pytest.approx(np.mean([gen[labels[2], ENVS[1], s] for s in (0, 1)]))
    evaluated = json.loads((out / cells_of(out)[-1].path / "eval" / "imagination.json").read_text())
    assert (memory["episodes"], memory["skipped_episodes"]) == (evaluated["episodes"], evaluated["skipped_episodes"])

    path = write_report(out, reps=200, bench=False, video=True)
    text = path.read_text()
    assert "Only 2 seeds per cell (fewer than 5)" in text.splitlines()[2] and "imagination-distracting-memory-100.gif" in text
    assert "| baseline: best constant |" in text and (out / "report" / "scores-distracting-memory-100.png").is_file()
    assert (out / "report" / "profiles.png").is_file() and (out / "report" / "imagination-minigrid-empty-5x5.gif").is_file()
    # a re-run with everything done runs nothing
    before = {c.path: _record(out / c.path)["seconds"] for c in cells_of(out)}
    run_study(study_from_dict(STUDY), STUDY, out, jobs=1, show_progress=False, log=lambda _: None)
    assert {c.path: _record(out / c.path)["seconds"] for c in cells_of(out)} == before


def test_a_failing_cell_is_recorded_and_the_others_finish(tmp_path: Path):
    # Catches: one crashing cell stopping the study, or its error lost.
    study = {**STUDY, "backbones": ["rssm"], "envs": ["minigrid-empty-5x5"], "seeds": [0, 1],
             "budget": {"updates": 2, "episodes": 5, "size": 16}}
    out = tmp_path / "out"
    # seed 1's cell cannot load its dataset: a file the cell's run reads is not a dataset
    from wmzoo.study.run import prepare

    prepare(study_from_dict(study), study, out, log=lambda _: None)
    bad = out / "cells" / "rssm-tiny" / "minigrid-empty-5x5" / "seed-1"
    bad.mkdir(parents=True)
    (bad / "checkpoint.safetensors").write_bytes(b"not a checkpoint")
    records = run_study(study_from_dict(study), study, out, jobs=1, show_progress=False, log=lambda _: None)
    assert [r["state"] for r in records] == ["done", "failed"]
    assert records[1]["error"].startswith("`wmzoo run` exited 2: wmzoo: error:"), records[1]["error"]
    assert (bad / "checkpoint.safetensors").read_bytes() == b"not a checkpoint"  # nothing overwritten


@pytest.mark.parametrize("record", ["missing", "failed"])
def test_a_trained_cell_without_its_evaluation_is_only_evaluated(tmp_path: Path, record: str):
    # A kill between the run's last checkpoint and cell.json, or an evaluation that failed (a
    # bug since fixed): the re-run evaluates and does not train. Catches a completeness check
    # that cannot read the checkpoint's progress (the cell then re-runs `wmzoo run --resume`,
    # which refuses a run already at its budget, and the cell fails forever).
    study = {**STUDY, "backbones": ["rssm"], "envs": ["minigrid-empty-5x5"], "seeds": 1,
             "budget": {"updates": 2, "episodes": 5, "size": 16}}
    out = tmp_path / "out"
    (first,) = run_study(study_from_dict(study), study, out, jobs=1, show_progress=False, log=lambda _: None)
    assert first["state"] == "done"
    cell = out / first["cell"]["path"]
    checkpoint = (cell / "checkpoint.safetensors").stat().st_mtime_ns
    if record == "missing":
        (cell / "cell.json").unlink()
    else:
        (cell / "cell.json").write_text(json.dumps({**first, "state": "failed", "error": "evaluate exited 2"}))
    (again,) = run_study(study_from_dict(study), study, out, jobs=1, show_progress=False, log=lambda _: None)
    assert again["state"] == "done", again.get("error")
    assert [c.split()[1] for c in again["commands"]] == ["evaluate"]
    assert (cell / "checkpoint.safetensors").stat().st_mtime_ns == checkpoint


def test_submitit_executor_runs_cells(tmp_path: Path):
    # Catches: a cell call submitit cannot pickle, a result not collected from its job.
    pytest.importorskip("submitit")
    study = {**STUDY, "backbones": ["rssm"], "envs": ["minigrid-empty-5x5"], "seeds": [0],
             "budget": {"updates": 2, "episodes": 5, "size": 16}}
    out = tmp_path / "out"
    records = run_study(study_from_dict(study), study, out, executor="submitit", show_progress=False,
                        log=lambda _: None, submitit_parameters={"cluster": "local", "timeout_min": 10})
    assert [r["state"] for r in records] == ["done"], records
    assert (out / "submitit").is_dir()
    assert json.loads((out / "cells/rssm-tiny/minigrid-empty-5x5/seed-0/eval/imagination.json").read_text())["gen_mse"] > 0


def test_an_online_study_scores_cells_by_their_eval_json(tmp_path: Path):
    # Catches: online cells scored from the wrong file or key, greedy/temperature not passed to
    # `wmzoo eval`, learning curves not read from the runs' TensorBoard returns.
    study = {"name": "online", "backbones": ["rssm"], "envs": ["minigrid-empty-5x5"], "seeds": 2,
             "budget": {"steps": 160}, "eval": {"episodes": 2, "max_steps": 30, "temperature": 0.5},
             "set": {"train.image_size": 16, "train.prefill": 60, "train.log_every": 40,
                     "model.batch_size": 2, "model.seq_len": 8, "train.train_ratio": 4}}
    out = tmp_path / "out"
    records = run_study(study_from_dict(study), study, out, jobs=2, show_progress=False, log=lambda _: None)
    assert [r["state"] for r in records] == ["done", "done"], [r.get("error") for r in records]
    assert all("--temperature 0.5" in r["commands"][-1] for r in records)
    report = build_report(out, reps=100, bench=False)
    evals = [json.loads((out / c.path / "eval.json").read_text()) for c in cells_of(out)]
    assert report["score"] == "mean_return" and report["higher_is_better"]
    # the random policy on the same seeds, from the cells' `wmzoo eval --random`
    assert report["baselines"]["minigrid-empty-5x5"]["random policy"] == evals[0]["random"]["mean_return"]
    assert report["per_env"]["minigrid-empty-5x5"]["rssm:tiny"]["mean"] == pytest.approx(
        np.mean([e["mean_return"] for e in evals]))
    assert all(e["temperature"] == 0.5 and e["sample"] for e in evals)
    curve = report["curves"]["minigrid-empty-5x5"]["rssm:tiny"]
    assert curve["seeds"] == 2 and curve["x"] and max(curve["x"]) <= 160


def test_an_imitation_study_trains_with_demonstrations_and_scores_the_success_rate(tmp_path: Path):
    # Catches: imitation cells trained without --imitation (a world model and no policy learnt),
    # scored on the dataset's Gen. MSE or by the mean return instead of the success rate, a named
    # row (the memory ablation of the same backbone) merged with the backbone's own row, a
    # policy field of the cells (policy.optim.lr) refused by the world-model parameter count.
    pytest.importorskip("minigrid")
    study = {"name": "bc", "backbones": ["tokenwm", {"name": "tokenwm", "row": "no-memory", "set": {"model.memory": 0}}],
             "envs": ["babyai-goto-local"], "seeds": 1,
             "budget": {"updates": 2, "episodes": 6, "size": 16, "imitation": True},
             "eval": {"episodes": 3, "max_steps": 5},
             "set": {"model.batch_size": 2, "model.seq_len": 4, "policy.optim.lr": 1e-3}}
    out = tmp_path / "out"
    records = run_study(study_from_dict(study), study, out, show_progress=False, log=lambda _: None)
    assert [r["state"] for r in records] == ["done", "done"], [r.get("error") for r in records]
    assert all("--imitation" in r["commands"][0] and r["commands"][-1].startswith("wmzoo eval") for r in records)
    report = build_report(out, reps=100, bench=False)
    assert report["mode"] == "imitation" and report["score"] == "success_rate" and report["higher_is_better"]
    rows = report["per_env"]["babyai-goto-local"]
    assert set(rows) == {"tokenwm:tiny", "no-memory"}
    for cell in cells_of(out):
        evaluation = json.loads((out / cell.path / "eval.json").read_text())
        assert rows[cell.label]["mean"] == pytest.approx(evaluation["success_rate"])
    assert set(report["curves"]["babyai-goto-local"]) == {"tokenwm:tiny", "no-memory"}  # eq. 1's loss per update
    params = report["parameters"]
    assert params["no-memory"]["babyai-goto-local"]["world_model"] < params["tokenwm:tiny"]["babyai-goto-local"]["world_model"]
    # counted at the dataset's 16x16 frames the cells trained on, not the trainer's default 64x64
    from wmzoo.config import run_spec
    from wmzoo.interfaces import EnvInfo
    from wmzoo.registry import build_world_model

    run = run_spec("tokenwm", "babyai-goto-local", "tiny", None, 0, None, {"model.batch_size": 2, "model.seq_len": 4})
    trained = build_world_model("tokenwm", run.model, EnvInfo("babyai-goto-local", (3, 16, 16), 7))
    assert params["tokenwm:tiny"]["babyai-goto-local"]["world_model"] == sum(p.numel() for p in trained.parameters())
