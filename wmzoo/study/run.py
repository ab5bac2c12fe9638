"""``wmzoo study run``: every backbone × env × seed of a study as an ordinary run directory.

Layout of ``--out DIR``::

    DIR/study.yaml                      the study as given (a re-run must give the same one)
    DIR/plan.json                       the cells, each with its resolved --set fields
    DIR/data/<env>/                     offline studies: the dataset shared by every cell
    DIR/cells/<backbone>-<preset>/<env>/seed-<s>/
        run.yaml, checkpoint.safetensors, tb/ ...   the run (``wmzoo run``)
        eval.json                        online: ``wmzoo eval --json``
        eval/imagination.json            offline: ``wmzoo evaluate --protocol imagination``
        cell.json                        the study's record: state, commands, error, seconds

A cell runs as ``python -m wmzoo.cli`` subprocesses (``run`` or ``run --resume``, then ``eval`` or
``evaluate``), so it is exactly what a user would type and a crash stays in its cell. Its state
is read from its files: ``cell.json`` says ``done`` (skipped on a re-run) or ``trained`` (only the
evaluation is left); a checkpoint without either means the cell was interrupted, and it resumes
from that checkpoint; a failed cell is recorded with its error and tried again on a re-run.

A cell's processes die with the study's process (Linux ``PR_SET_PDEATHSIG``), so a killed study
leaves no writer behind, and a lock on ``DIR`` refuses a second study process on the same folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from wmzoo.atomic import write_text_atomic
from wmzoo.errors import WmzooError
from wmzoo.hookspecs import WidthKnob
from wmzoo.outputs import check_output_folder
from wmzoo.study.spec import StudySpec, study_from_dict

STUDY_FILE = "study.yaml"
PLAN_FILE = "plan.json"
CELL_FILE = "cell.json"
LOCK_FILE = ".study.lock"
EXECUTORS = ("local", "submitit")


@dataclass(frozen=True)
class Cell:
    """One run of the study: a backbone (``label`` = ``backbone:preset``) on an env with a seed."""

    label: str
    backbone: str
    preset: str
    env: str
    seed: int
    overrides: dict[str, Any]
    path: str
    offline: bool
    width: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.label} / {self.env} / seed {self.seed}"


def cell_dir(label: str, env: str, seed: int) -> Path:
    """A cell's run directory, relative to the study folder."""
    return Path("cells") / label.replace(":", "-") / env / f"seed-{seed}"


def data_dir(out: Path, env: str) -> Path:
    return out / "data" / env


# --------------------------------------------------------------------------- the plan


def plan_cells(study: StudySpec, log: Callable[[str], None] = print) -> list[Cell]:
    """Every cell, with the ``--set`` fields it trains with (the study's, the backbone's, and the
    width fields of a parameter-matched study)."""
    cells = []
    for choice in study.backbones:
        label = choice.label(study.preset)
        for env in study.envs:
            overrides = {**study.set, **choice.set}
            if study.budget.offline:  # the cells train at the dataset's size: count and bench them there
                overrides.setdefault("train.image_size", study.budget.size)
            width: dict[str, int] = {}
            if study.params is not None:
                width = match_width(choice.backbone, choice.preset(study.preset), env, overrides, study.params)
                if not width:
                    log(f"{label}: declares no width knob; it runs at its preset's size")
            for seed in study.seeds:
                cells.append(Cell(
                    label=label, backbone=choice.backbone, preset=choice.preset(study.preset), env=env,
                    seed=seed, overrides={**overrides, **width}, path=str(cell_dir(label, env, seed)),
                    offline=study.budget.offline, width=width,
                ))
    return cells


def world_model_parameters(backbone: str, preset: str, env: str, overrides: Mapping[str, Any]) -> int:
    """Parameters of every world-model component (built on the meta device: no memory, no time),
    for ``env``'s frames at the run's ``train.image_size`` and its action count."""
    import torch

    from wmzoo.config import run_spec
    from wmzoo.registry import build_world_model

    run = run_spec(backbone, env, preset, None, 0, None, without_policy(overrides))
    info = _env_info(env, run.train.image_size)
    with torch.device("meta"):
        wm = build_world_model(run.backbone, run.model, info)
    return sum(p.numel() for p in wm.parameters())


def without_policy(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--set`` fields that can matter to a world model: all but ``policy.*`` (which name
    the cells' own policy's fields, e.g. an imitation policy's, not the backbone's default)."""
    return {k: v for k, v in overrides.items() if not k.startswith("policy.")}


_ENV_INFOS: dict[tuple[str, int], Any] = {}


def _env_info(env: str, size: int) -> Any:
    from wmzoo.registry import env_info, make_env

    if (env, size) not in _ENV_INFOS:
        made = make_env(env, size=size)
        try:
            _ENV_INFOS[env, size] = env_info(made, env)
        finally:
            made.close()
    return _ENV_INFOS[env, size]


def match_width(backbone: str, preset: str, env: str, overrides: Mapping[str, Any], params: int) -> dict[str, int]:
    """The width-knob fields (``{"model.<field>": value}``) whose world model is closest to
    ``params`` parameters; ``{}`` for a backbone without a knob. Bisection over widths that are
    multiples of the knob's ``multiple`` (the parameter count grows with the width)."""
    from wmzoo.config import run_spec
    from wmzoo.registry import default_registry

    knob = default_registry().backbone(backbone).width
    if knob is None:
        return {}
    base = run_spec(backbone, env, preset, None, 0, None, without_policy(overrides)).model

    def count(width: int) -> int:
        return world_model_parameters(backbone, preset, env, {**overrides, **width_fields(base, knob, width)})

    lo, hi = 1, 2
    while True:
        try:
            if count(hi * knob.multiple) >= params:
                break
        except WmzooError as exc:  # past a field's bound
            raise WmzooError(f"params {params:,}: {backbone} cannot reach it through its width knob "
                             f"({knob.fields[0]} {hi * knob.multiple}: {exc})") from None
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(mid * knob.multiple) < params else (lo, mid)
    best = min((lo, hi), key=lambda k: abs(count(k * knob.multiple) - params))
    return width_fields(base, knob, best * knob.multiple)


def width_fields(spec: Any, knob: WidthKnob, width: int) -> dict[str, int]:
    """``{"model.<field>": value}`` at ``width``: each knob field scaled from ``spec``'s value by
    ``width / spec's width``, rounded to a multiple of ``knob.multiple`` (at least one)."""
    values = {}
    for name in knob.fields:
        value = spec
        for part in name.split("."):
            value = getattr(value, part)
        values[name] = int(value)
    width0, m = values[knob.fields[0]], knob.multiple
    return {f"model.{name}": max(m, round(value * width / width0 / m) * m) for name, value in values.items()}


# --------------------------------------------------------------------------- one cell


def cell_record(path: str | Path) -> dict[str, Any]:
    """``cell.json`` of a cell (``{}`` when absent or unreadable: the cell is started again)."""
    try:
        record = json.loads((Path(path) / CELL_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_record(path: Path, record: Mapping[str, Any]) -> None:
    write_text_atomic(path / CELL_FILE, json.dumps(dict(record), indent=2))


def cell_commands(cell: Cell, study: StudySpec, out: Path) -> tuple[list[str], list[str], list[list[str]]]:
    """``(train, resume, evaluate)`` argument lists of ``wmzoo`` for a cell."""
    path = out / cell.path
    budget = study.budget
    steps = str(budget.updates if budget.offline else budget.steps)
    sets = [item for key, value in cell.overrides.items() for item in ("--set", f"{key}={_text(value)}")]
    train = ["run", "--backbone", cell.backbone, "--env", cell.env, "--preset", cell.preset,
             "--seed", str(cell.seed), "--steps", steps, *sets, "--logdir", str(path), "--no-progress"]
    if budget.offline:
        train += ["--imitation" if budget.imitation else "--offline", str(data_dir(out, cell.env))]
    resume = ["run", "--logdir", str(path), "--resume", "--steps", steps, "--no-progress"]
    checkpoint = str(path / "checkpoint.safetensors")
    E = study.eval
    if not budget.in_env:
        evaluate = [["evaluate", "--checkpoint", checkpoint, "--protocol", "imagination",
                     "--data", str(data_dir(out, cell.env)), "--out", str(path / "eval"),
                     "--context", str(E.context)]
                    + (["--episodes", str(E.test_episodes)] if E.test_episodes else [])]
    else:
        evaluate = [["eval", "--checkpoint", checkpoint, "--episodes", str(E.episodes),
                     "--max-steps", str(E.max_steps), "--seed", str(E.seed), "--json", str(path / "eval.json"),
                     "--random"]  # the random policy on the same seeds: the report's baseline
                    + (["--temperature", str(E.temperature)] if E.temperature else [])]
    return train, resume, evaluate


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def run_cell(cell: Mapping[str, Any], study: Mapping[str, Any], out: str, threads: int = 1) -> dict[str, Any]:
    """Train (or resume) and evaluate one cell; returns its ``cell.json`` record. Plain arguments
    so that submitit can pickle the call; never raises for the cell's own failure."""
    c = Cell(**cell)
    spec = StudySpec.model_validate(study)
    path = Path(out) / c.path
    previous = cell_record(path)
    if previous.get("state") == "done":
        return previous
    path.mkdir(parents=True, exist_ok=True)
    train, resume, evaluate = cell_commands(c, spec, Path(out))
    started = time.time()
    record: dict[str, Any] = {"cell": asdict(c), "state": "running", "commands": [],
                              "seconds": float(previous.get("seconds", 0.0)),
                              "attempts": int(previous.get("attempts", 0)) + 1}
    try:
        if previous.get("state") != "trained" and not _trained(path, spec):
            _wmzoo(resume if (path / "checkpoint.safetensors").is_file() else train, record, threads)
        record["state"] = "trained"
        _write_record(path, record)
        for args in evaluate:
            _wmzoo(args, record, threads)
        record["state"] = "done"
    except CellFailure as exc:
        record.update(state="failed", error=str(exc))
    record["seconds"] = float(record["seconds"]) + time.time() - started
    _write_record(path, record)
    return record


def _trained(path: Path, study: StudySpec) -> bool:
    """Whether the cell's checkpoint has its whole budget (a kill between the run's last
    checkpoint and ``cell.json``); an unreadable checkpoint is left to ``--resume`` to report."""
    from wmzoo.train.checkpoint import checkpoint_header

    if not (path / "checkpoint.safetensors").is_file():
        return False
    try:
        header = checkpoint_header(path / "checkpoint.safetensors")
        progress, final = header["progress"], header["run"]["train"]["final_updates"]
        if study.budget.offline:
            return int(progress["updates"]) >= int(study.budget.updates or 0)
        return int(progress["env_steps"]) >= int(study.budget.steps or 0) and int(progress["final"]) >= int(final)
    except (WmzooError, KeyError, TypeError, ValueError):
        return False


class CellFailure(Exception):
    """A cell's ``wmzoo`` command exited non-zero (its last stderr line is the message)."""


def _wmzoo(args: list[str], record: dict[str, Any], threads: int) -> None:
    record["commands"].append("wmzoo " + " ".join(args))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    proc = subprocess.run(
        [sys.executable, "-m", "wmzoo.cli", *args], env=env, capture_output=True, text=True,
        preexec_fn=_die_with_parent,
    )
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if line.startswith("wmzoo: error:")), lines[-1] if lines else "")
        raise CellFailure(f"`wmzoo {args[0]}` exited {proc.returncode}: {last.strip() or 'no message'}")


def _die_with_parent() -> None:
    """The cell's process gets SIGKILL when the study's process dies (Linux only)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# --------------------------------------------------------------------------- the study


def prepare(study: StudySpec, raw: Mapping[str, Any], out: Path, log: Callable[[str], None] = print) -> list[Cell]:
    """Check ``out`` holds this study or nothing, write ``study.yaml`` and ``plan.json``, and
    generate the offline datasets; returns the cells."""
    existing = out / STUDY_FILE
    if existing.exists():
        from wmzoo.specs import load_config

        saved = study_from_dict(load_config(existing, what="--out: "), f"--out {out}: its {STUDY_FILE}: ")
        if saved != study:
            changed = [name for name in StudySpec.model_fields if getattr(saved, name) != getattr(study, name)]
            raise WmzooError(
                f"--out {out} holds another study ({', '.join(changed)} differ from {existing}); "
                "choose another --out, or give the same study to continue it"
            )
    elif out.exists() and any(p.name != LOCK_FILE for p in out.iterdir()):
        raise WmzooError(f"--out {out} is not empty and holds no {STUDY_FILE}: choose an empty or new folder")
    out.mkdir(parents=True, exist_ok=True)
    if not existing.exists():
        write_text_atomic(existing, yaml.safe_dump(dict(raw), sort_keys=False))
    cells = plan_cells(study, log)
    write_text_atomic(out / PLAN_FILE, json.dumps([asdict(c) for c in cells], indent=2))
    if study.budget.offline:
        from wmzoo.data.generate import generate

        B = study.budget
        for env in study.envs:
            generate(env, B.episodes, data_dir(out, env), size=B.size, seed=B.data_seed, log=lambda _: None)
    return cells


def run_study(
    study: StudySpec, raw: Mapping[str, Any], out: str | Path, *, jobs: int = 1, executor: str = "local",
    show_progress: bool = True, log: Callable[[str], None] = print, submitit_folder: str | None = None,
    submitit_parameters: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run every cell not yet done (``jobs`` at a time); returns the cells' records."""
    if jobs < 1:
        raise WmzooError(f"--jobs {jobs}: must be at least 1")
    if executor not in EXECUTORS:
        raise WmzooError(f"--executor {executor}: expected one of {', '.join(EXECUTORS)}")
    out = check_output_folder(out, STUDY_FILE, "--out")
    with study_lock(out):
        cells = prepare(study, raw, out, log)
        todo = [c for c in cells if cell_record(out / c.path).get("state") != "done"]
        if len(todo) < len(cells):
            log(f"{len(cells) - len(todo)} of {len(cells)} cells already done: skipped")
        threads = max(1, (os.cpu_count() or 1) // jobs)
        payload = study.model_dump(mode="json")
        calls = [(asdict(c), payload, str(out.resolve()), threads) for c in todo]
        if executor == "local":
            records = _run_local(calls, jobs, show_progress)
        else:
            records = _run_submitit(calls, out, jobs, show_progress, submitit_folder, submitit_parameters)
    failed = [r for r in records if r.get("state") != "done"]
    for r in failed:
        log(f"failed: {Cell(**r['cell']).name}: {r.get('error', '?')}")
    return [cell_record(out / c.path) for c in cells]


def _progress(total: int, show: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, disable=not show, unit="cell", desc="wmzoo study")


def _run_local(calls: list[tuple[Any, ...]], jobs: int, show: bool) -> list[dict[str, Any]]:
    records = []
    with _progress(len(calls), show) as bar, ThreadPoolExecutor(max_workers=jobs) as pool:
        for future in as_completed([pool.submit(run_cell, *call) for call in calls]):
            records.append(future.result())
            bar.update(1)
    return records


def _run_submitit(calls: list[tuple[Any, ...]], out: Path, jobs: int, show: bool, folder: str | None,
                  parameters: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    try:
        import submitit
    except ImportError:
        raise WmzooError("--executor submitit needs submitit: pip install 'wmzoo[cluster]'") from None
    folder = folder or str(out / "submitit")
    if parameters and parameters.get("cluster") == "local":
        executor: Any = submitit.LocalExecutor(folder=folder)
        parameters = {k: v for k, v in parameters.items() if k != "cluster"}
    else:
        executor = submitit.AutoExecutor(folder=folder)
        parameters = dict(parameters or {})
    executor.update_parameters(**{"slurm_array_parallelism": jobs, **parameters}
                               if isinstance(executor, submitit.AutoExecutor) else parameters)
    jobs_ = [executor.submit(run_cell, *call) for call in calls]
    records = []
    with _progress(len(jobs_), show) as bar:
        pending = list(jobs_)
        while pending:
            for job in [j for j in pending if j.done()]:
                pending.remove(job)
                try:
                    records.append(job.result())
                except Exception as exc:  # noqa: BLE001 - the job itself died (cluster, pickling)
                    cell, _, root, _ = calls[jobs_.index(job)]
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    record = {"cell": cell, "state": "failed", "error": f"submitit job {job.job_id}: {first} "
                              f"(its logs: {folder})"}
                    _write_record(Path(root) / cell["path"], record)
                    records.append(record)
                bar.update(1)
            time.sleep(0.5)
    return records


class study_lock:
    """An exclusive lock on ``DIR/.study.lock`` for the study process's life (released by the
    kernel if it is killed)."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def __enter__(self) -> study_lock:
        import fcntl

        self.out.mkdir(parents=True, exist_ok=True)
        self.file = open(self.out / LOCK_FILE, "w")  # noqa: SIM115 - held until __exit__
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise WmzooError(f"--out {self.out}: another `wmzoo study run` is running on it; wait for it "
                             "or stop it first") from None
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()


def cells_of(out: str | Path) -> list[Cell]:
    """The cells of the study in ``out`` (its ``plan.json``)."""
    path = Path(out) / PLAN_FILE
    try:
        return [Cell(**c) for c in json.loads(path.read_text())]
    except FileNotFoundError:
        raise WmzooError(f"{out}: no {PLAN_FILE}; is it a `wmzoo study run` --out folder?") from None
    except (ValueError, TypeError) as exc:
        raise WmzooError(f"{path}: not a study plan ({exc}); re-run `wmzoo study run` to rewrite it") from None

