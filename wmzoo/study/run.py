"""``wmzoo study run``: every backbone × env × seed of a study as an ordinary run directory.

Layout of ``--out DIR``::

    DIR/study.yaml                      the study as given (a re-run must give the same one)
    DIR/plan.json                       the cells, each with its resolved --set fields
    DIR/data/<env>/                     offline studies: the dataset shared by every cell
    DIR/cells/<backbone>-<preset>/<env>/seed-<s>/
        run.yaml, checkpoint.safetensors, tb/ ...   the run (``wmzoo run``)
        eval.json                        online: ``wmzoo eval --json``
        eval/imagination.json            offline: ``wmzoo evaluate --protocol imagination``
        eval/reward.json                 offline, where the dataset has a reward-based protocol
                                         (``reward``, or ``reasoning``: eval/reasoning.json)
        cell.json                        the study's record: state, commands, error, seconds

A cell runs as ``python -m wmzoo.cli`` subprocesses (``run`` or ``run --resume``, then ``eval`` or
``evaluate``), so it is exactly what a user would type and a crash stays in its cell. Its state
is read from its files: ``cell.json`` says ``done`` (skipped on a re-run while every evaluation's
file is there; a cell done before an evaluation was added gets only that one) or ``trained`` (only
the evaluation is left); a checkpoint without either means the cell was interrupted, and it resumes
from that checkpoint; a failed cell is recorded with its error and tried again on a re-run.

A cell's processes die with the study's process (Linux ``PR_SET_PDEATHSIG``), so a killed study
leaves no writer behind, and a lock on ``DIR`` refuses a second study process on the same folder.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

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
LOG_FILE = "log.txt"
HEARTBEAT_S = 5.0
REPORT_ONLY = ("expect",)
"""Study fields no cell reads: a re-run on the same ``--out`` may change them."""
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

    from wmzoo.config import made_env_info, run_spec
    from wmzoo.registry import build_world_model

    run = run_spec(backbone, env, preset, None, 0, None, without_policy(overrides))
    info = made_env_info(env, run.train.image_size)
    with torch.device("meta"):
        wm = build_world_model(run.backbone, run.model, info)
    return sum(p.numel() for p in wm.parameters())


def without_policy(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--set`` fields that can matter to a world model: all but ``policy.*`` (which name
    the cells' own policy's fields, e.g. an imitation policy's, not the backbone's default)."""
    return {k: v for k, v in overrides.items() if not k.startswith("policy.")}


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


def cell_commands(cell: Cell, study: StudySpec, out: Path, threads: int = 1
                  ) -> tuple[list[str], list[str], list[list[str]]]:
    """``(train, resume, evaluate)`` argument lists of ``wmzoo`` for a cell; training runs with
    ``threads`` torch threads (``train.threads``)."""
    path = out / cell.path
    budget = study.budget
    steps = str(budget.updates if budget.offline else budget.steps)
    sets = [item for key, value in cell.overrides.items() for item in ("--set", f"{key}={_text(value)}")]
    threads_set = ["--set", f"train.threads={threads}"]
    train = ["run", "--backbone", cell.backbone, "--env", cell.env, "--preset", cell.preset,
             "--seed", str(cell.seed), "--steps", steps, *sets, *threads_set, "--logdir", str(path), "--no-progress"]
    if budget.offline:
        train += ["--imitation" if budget.imitation else "--offline", str(data_dir(out, cell.env))]
    resume = ["run", "--logdir", str(path), "--resume", "--steps", steps, *threads_set, "--no-progress"]
    return train, resume, [args for args, _ in evaluations(cell, study, out)]


def evaluations(cell: Cell, study: StudySpec, out: Path) -> list[tuple[list[str], Path]]:
    """Each evaluation of a cell: ``(wmzoo arguments, the file it writes)``. Online and imitation:
    ``wmzoo eval`` (``eval.json``). Offline: ``wmzoo evaluate --protocol imagination``
    (``eval/imagination.json``) and, where the dataset has one
    (:func:`~wmzoo.eval.memory.reward_protocol`: decided from its episodes, as the protocols score
    them), its reward-based protocol (``eval/reward.json`` or ``eval/reasoning.json``)."""
    path = out / cell.path
    checkpoint = str(path / "checkpoint.safetensors")
    E = study.eval
    if study.budget.in_env:
        return [(["eval", "--checkpoint", checkpoint, "--episodes", str(E.episodes),
                  "--max-steps", str(E.max_steps), "--seed", str(E.seed), "--json", str(path / "eval.json"),
                  "--random"]  # the random policy on the same seeds: the report's baseline
                 + (["--temperature", str(E.temperature)] if E.temperature else []), path / "eval.json")]
    from wmzoo.data.dataset import MANIFEST
    from wmzoo.eval.memory import reward_protocol

    data = data_dir(out, cell.env)
    reward = reward_protocol(data) if (data / MANIFEST).is_file() else None  # known once generated
    protocols = ["imagination", *([reward] if reward is not None else [])]
    return [(["evaluate", "--checkpoint", checkpoint, "--protocol", protocol, "--data", str(data),
              "--out", str(path / "eval"), "--context", str(E.context)]
             + (["--episodes", str(E.test_episodes)] if E.test_episodes else []), path / "eval" / f"{protocol}.json")
            for protocol in protocols]


def cell_done(cell: Cell, study: StudySpec, out: Path) -> bool:
    """``cell.json`` says ``done`` and every evaluation's file is there (a cell of an older study
    folder, done before an evaluation was added, is only evaluated again)."""
    return (cell_record(out / cell.path).get("state") == "done"
            and all(file.is_file() for _, file in evaluations(cell, study, out)))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def run_cell(cell: Mapping[str, Any], study: Mapping[str, Any], out: str, threads: int = 1,
             processes: Processes | None = None) -> dict[str, Any]:
    """Train (or resume) and evaluate one cell; returns its ``cell.json`` record. Plain arguments
    so that submitit can pickle the call; never raises for the cell's own failure.

    ``cell.json`` is written when the attempt starts (``running``: its attempt counted even if the
    study is killed), every :data:`HEARTBEAT_S` seconds (its wall time) and at the end. Without
    ``processes`` (a submitit job), :data:`JOB_SIGNALS` reach the cell's process as SIGTERM: it
    saves a checkpoint and the cell is ``interrupted``."""
    c = Cell(**cell)
    spec = StudySpec.model_validate(study)
    path = Path(out) / c.path
    previous = cell_record(path)
    if cell_done(c, spec, Path(out)) or (processes is not None and processes.stopped):
        return previous
    path.mkdir(parents=True, exist_ok=True)
    train, resume, _ = cell_commands(c, spec, Path(out), threads)
    # a cell done before an evaluation was added: only the evaluations it lacks
    evaluate = [args for args, file in evaluations(c, spec, Path(out))
                if previous.get("state") != "done" or not file.is_file()]
    job = processes is None  # submitit: this cell alone in its process
    processes = processes or Processes()
    started, before = time.time(), float(previous.get("seconds", 0.0))
    record: dict[str, Any] = {"cell": asdict(c), "state": "running", "commands": [], "seconds": before,
                              "attempts": int(previous.get("attempts", 0)) + 1, "log": LOG_FILE}

    def save(state: str | None = None) -> None:
        record["seconds"] = before + time.time() - started
        if state is not None:
            record["state"] = state
        _write_record(path, record)

    save()
    try:
        with processes.stopped_by(JOB_SIGNALS if job else ()):
            if previous.get("state") not in ("trained", "done") and not _trained(path, spec):
                command = resume if (path / "checkpoint.safetensors").is_file() else train
                _wmzoo(command, record, path, threads, processes, save)
            save("trained")
            for args in evaluate:
                _wmzoo(args, record, path, threads, processes, save)
        record["state"] = "done"
    except CellInterrupted as exc:
        record.update(state="interrupted", error=str(exc))
    except CellFailure as exc:
        record.update(state="failed", error=str(exc))
    save()
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
    """A cell's ``wmzoo`` command exited non-zero (its last error line is the message)."""


class CellInterrupted(CellFailure):
    """A cell's ``wmzoo`` command was stopped by a signal to the study (or to its job)."""


class Processes:
    """The ``wmzoo`` processes of running cells. :meth:`stop` (the study's SIGTERM handler) passes
    SIGTERM on to each, which saves its checkpoint and exits 2, and no other starts after it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # a handler may run while its own thread is in start()
        self.running: set[subprocess.Popen[bytes]] = set()
        self.stopped = False

    def start(self, argv: list[str], env: Mapping[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
        with self.lock:
            if self.stopped:
                raise CellInterrupted("the study was stopped before this command started")
            proc = subprocess.Popen(argv, env=dict(env), stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=_die_with_parent)
            self.running.add(proc)
            if self.stopped:  # stop() ran in this thread, between Popen and add
                proc.send_signal(signal.SIGTERM)
        return proc

    def finished(self, proc: subprocess.Popen[bytes]) -> None:
        with self.lock:
            self.running.discard(proc)

    def stop(self, *_: Any) -> None:
        """SIGTERM to each running process, once; no process starts after it."""
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
            for proc in self.running:
                proc.send_signal(signal.SIGTERM)

    @contextmanager
    def stopped_by(self, signals: Sequence[int]) -> Iterator[None]:
        """While inside, ``signals`` to this process call :meth:`stop` (in the main thread only,
        where Python runs signal handlers; elsewhere nothing changes)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.stop) for sig in signals}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


#: what stops a cell's job: SIGTERM (scancel, SLURM's time limit), SIGINT (submitit's local
#: executor at its time limit, job.cancel()) and SIGUSR2 (submitit's warning before the limit)
JOB_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)


def _wmzoo(args: list[str], record: dict[str, Any], path: Path, threads: int, processes: Processes,
           heartbeat: Callable[[], None]) -> None:
    """Run ``wmzoo ARGS`` for the cell in ``path``, its output appended to the cell's log."""
    record["commands"].append("wmzoo " + " ".join(args))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    with open(path / LOG_FILE, "ab") as log:
        log.write(f"$ wmzoo {' '.join(args)}\n".encode())
        log.flush()
        start = log.tell()
        proc = processes.start([sys.executable, "-m", "wmzoo.cli", *args], env, log)
        try:
            while True:
                try:
                    code = proc.wait(timeout=HEARTBEAT_S)
                    break
                except subprocess.TimeoutExpired:
                    heartbeat()
        finally:
            processes.finished(proc)
    if code != 0:
        with open(path / LOG_FILE, "rb") as log:
            log.seek(start)
            ended = f"ended by {signal.Signals(-code).name}" if code < 0 else f"exited {code}"
            message = f"`wmzoo {args[0]}` {ended}: {error_line(log.read().decode(errors='replace'))}"
        raise CellInterrupted(message) if processes.stopped else CellFailure(message)


def error_line(output: str) -> str:
    """The line that says what went wrong in a command's output: its last ``wmzoo: error:``
    line, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in reversed(lines) if line.startswith("wmzoo: error:")),
                lines[-1] if lines else "no message")


def _die_with_parent() -> None:
    """The cell's process gets SIGKILL when the study's process dies (Linux only)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# --------------------------------------------------------------------------- the study


def prepare(study: StudySpec, raw: Mapping[str, Any], out: Path, log: Callable[[str], None] = print) -> list[Cell]:
    """Check ``out`` holds this study or nothing, write ``study.yaml`` and ``plan.json``, and
    generate the offline datasets; returns the cells."""
    existing = out / STUDY_FILE
    write = not existing.exists()
    if existing.exists():
        from wmzoo.specs import load_config

        saved = study_from_dict(load_config(existing, what="--out: "), f"--out {out}: its {STUDY_FILE}: ")
        changed = [name for name in StudySpec.model_fields if getattr(saved, name) != getattr(study, name)]
        if set(changed) - set(REPORT_ONLY):
            raise WmzooError(
                f"--out {out} holds another study ({', '.join(changed)} differ from {existing}); "
                "choose another --out, or give the same study to continue it"
            )
        if changed:  # what only the report reads: the study given replaces it
            log(f"{existing}: {', '.join(changed)} changed (read by the report alone): rewritten")
            write = True
    elif out.exists() and any(p.name != LOCK_FILE for p in out.iterdir()):
        raise WmzooError(f"--out {out} is not empty and holds no {STUDY_FILE}: choose an empty or new folder")
    out.mkdir(parents=True, exist_ok=True)
    if write:
        write_text_atomic(existing, yaml.safe_dump(dict(raw), sort_keys=False))
    cells = plan_cells(study, log)
    write_text_atomic(out / PLAN_FILE, json.dumps([asdict(c) for c in cells], indent=2))
    if study.budget.offline:
        from wmzoo.data.generate import generate

        B = study.budget
        for env in study.envs:
            generate(env, B.episodes, data_dir(out, env), size=B.size, seed=B.data_seed, log=log)
    return cells


def run_study(
    study: StudySpec, raw: Mapping[str, Any], out: str | Path, *, jobs: int = 1, executor: str = "local",
    threads: int | None = None, show_progress: bool = True, log: Callable[[str], None] = print,
    submitit_folder: str | None = None, submitit_parameters: Mapping[str, Any] | None = None,
    only: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """Run every cell not yet done (``jobs`` at a time, ``threads`` torch threads each; default
    cores ÷ ``jobs``); returns the cells' records. ``only``: run just the cells whose row, env and
    seed are among the given ones (:func:`select_cells`, whose records alone are returned), the
    rest left for a later run. SIGTERM lets each running cell save its checkpoint
    (``interrupted``), starts no other, and raises one line."""
    if jobs < 1:
        raise WmzooError(f"--jobs {jobs}: must be at least 1")
    if threads is not None and threads < 1:
        raise WmzooError(f"--threads {threads}: must be at least 1")
    if executor not in EXECUTORS:
        raise WmzooError(f"--executor {executor}: expected one of {', '.join(EXECUTORS)}")
    check_selection(study, only or {})
    out = check_output_folder(out, STUDY_FILE, "--out")
    with study_lock(out):
        cells = prepare(study, raw, out, log)
        chosen = select_cells(cells, only or {})
        if len(chosen) < len(cells):
            flags = " ".join(f"--{key}" for key, values in (only or {}).items() if values)
            log(f"{len(cells) - len(chosen)} of {len(cells)} cells are outside {flags}: left for a later run")
        # seed by seed: a study stopped part-way has every backbone at its first seeds
        todo = sorted((c for c in chosen if not cell_done(c, study, out)), key=lambda c: study.seeds.index(c.seed))
        if len(todo) < len(chosen):
            log(f"{len(chosen) - len(todo)} of {len(chosen)} cells already done: skipped")
        if threads is None:
            threads = max(1, (os.cpu_count() or 1) // jobs)
            why = f"{os.cpu_count()} cores / --jobs {jobs}; --threads N to choose"
        else:
            why = "--threads"
        log(f"each cell runs with {threads} torch thread{'s' if threads > 1 else ''} ({why})")
        payload = study.model_dump(mode="json")
        calls = [(asdict(c), payload, str(out.resolve()), threads) for c in todo]
        processes = Processes()
        watch = Watch(out, todo, time.time(), show_progress)
        with processes.stopped_by((signal.SIGTERM,)):
            if executor == "local":
                records = _run_local(calls, jobs, watch, processes)
            else:
                parameters = dict(submitit_parameters or {})
                if "timeout_min" not in parameters:
                    parameters["timeout_min"] = submitit_time_limit(study, todo)
                    log(f"submitit: time limit {parameters['timeout_min']} min per cell, from the budget "
                        f"(--submitit timeout_min=M to choose)")
                records = _run_submitit(calls, out, jobs, watch, processes, submitit_folder, parameters)
    for r in records:
        if r.get("state") in ("failed", "interrupted"):
            log(f"{r['state']}: {Cell(**r['cell']).name}: {r.get('error', '?')} "
                f"(its log: {out / r['cell']['path'] / LOG_FILE})")
    if processes.stopped:
        saved = sum(r.get("state") == "interrupted" for r in records)
        raise WmzooError(f"stopped (SIGTERM): {saved} running cell{'s' if saved != 1 else ''} saved a checkpoint; "
                         "run the same `wmzoo study run` again to continue")
    return [cell_record(out / c.path) for c in chosen]


#: ``run_study(only=...)`` keys: the ``wmzoo study run`` flags that choose cells
SELECT_KEYS = ("rows", "envs", "seeds")


def check_selection(study: StudySpec, only: Mapping[str, Sequence[str]]) -> None:
    """One line naming a row, env or seed of ``only`` that ``study`` does not have, and the ones it has."""
    have = {"rows": study.labels(), "envs": list(study.envs), "seeds": [str(s) for s in study.seeds]}
    for key, values in only.items():
        if key not in SELECT_KEYS:
            raise ValueError(f"unknown selection {key!r} (expected one of {SELECT_KEYS})")
        unknown = [v for v in values if str(v) not in have[key]]
        if unknown:
            raise WmzooError(f"--{key} {','.join(map(str, unknown))}: not in this study (its {key}: "
                             f"{', '.join(have[key])}); nothing was run")


def select_cells(cells: Sequence[Cell], only: Mapping[str, Sequence[str]]) -> list[Cell]:
    """The cells whose row (``label``), env and seed are among ``only["rows"]``, ``["envs"]`` and
    ``["seeds"]`` (a key absent or empty: every one), in plan order; ``only`` is checked first
    by :func:`check_selection`."""
    wanted = {key: {str(v) for v in values} for key, values in only.items() if values}
    return [c for c in cells
            if all(str(value) in wanted[key] for key, value in (("rows", c.label), ("envs", c.env), ("seeds", c.seed))
                   if key in wanted)]


#: an upper bound on the time of one update and one env step, for a job's time limit
SECONDS_PER_UPDATE, SECONDS_PER_ENV_STEP, STARTUP_MIN = 1.0, 0.01, 10


def submitit_time_limit(study: StudySpec, cells: Sequence[Cell]) -> int:
    """Minutes a cell's job may run (submitit's ``timeout_min``; its own default, 2 local and 5
    on SLURM, stops most cells): :data:`STARTUP_MIN` for starting and evaluating, plus the budget
    of the longest cell at :data:`SECONDS_PER_UPDATE` per update (online: env steps ×
    ``train_ratio`` / (batch × sequence) and the final updates) and :data:`SECONDS_PER_ENV_STEP`
    per env step."""
    from wmzoo.config import run_spec

    budget, longest = study.budget, 0.0
    for cell in cells:
        if budget.offline:
            seconds = (budget.updates or 0) * SECONDS_PER_UPDATE
        else:
            run = run_spec(cell.backbone, cell.env, cell.preset, None, cell.seed, None, cell.overrides)
            steps, T, M = budget.steps or 0, run.train, run.model
            updates = steps * T.train_ratio / (M.batch_size * M.seq_len) + T.final_updates
            seconds = updates * SECONDS_PER_UPDATE + steps * SECONDS_PER_ENV_STEP
        longest = max(longest, seconds)
    return STARTUP_MIN + math.ceil(longest / 60)


class Watch:
    """The study's progress bar: cells finished, and each running cell's steps of its budget
    (:func:`cell_progress`), redrawn every second."""

    def __init__(self, out: Path, cells: Sequence[Cell], since: float, show: bool) -> None:
        from tqdm import tqdm

        self.out, self.cells, self.since, self.show = out, cells, since, show
        self.bar = tqdm(total=len(cells), disable=not show, unit="cell", desc="wmzoo study")

    def finished(self) -> None:
        self.bar.update(1)

    def refresh(self) -> None:
        if self.show:
            self.bar.set_postfix_str(cell_progress(self.out, self.cells, self.since))

    def close(self) -> None:
        self.bar.close()


def cell_progress(out: Path, cells: Sequence[Cell], since: float) -> str:
    """``label env s<seed> step/total`` of each cell running since ``since`` (its ``cell.json``
    written since then; ``starting`` before its run's first ``progress.json``, ``evaluating``
    once trained)."""
    from wmzoo.train.rundir import PROGRESS

    parts = []
    for cell in cells:
        path = out / cell.path
        try:
            fresh = (path / CELL_FILE).stat().st_mtime >= since
        except OSError:
            continue
        state = cell_record(path).get("state") if fresh else None
        if state == "trained":
            parts.append(f"{cell.label} {cell.env} s{cell.seed} evaluating")
        elif state == "running":
            try:
                progress = json.loads((path / PROGRESS).read_text())
                status = f"{int(progress['step'])}/{int(progress['total'])}"
            except (OSError, ValueError, KeyError, TypeError):
                status = "starting"
            parts.append(f"{cell.label} {cell.env} s{cell.seed} {status}")
    return ", ".join(parts)


def _run_local(calls: list[tuple[Any, ...]], jobs: int, watch: Watch, processes: Processes) -> list[dict[str, Any]]:
    records = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        pending = {pool.submit(run_cell, *call, processes) for call in calls}
        while pending:
            done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for future in done:
                records.append(future.result())
                watch.finished()
            watch.refresh()
    watch.close()
    return records


def _run_submitit(calls: list[tuple[Any, ...]], out: Path, jobs: int, watch: Watch, processes: Processes,
                  folder: str | None, parameters: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each cell as a submitit job; a job that ends without its record (killed, lost) is failed
    with the cell's own error line from its log. SIGTERM to the study cancels the jobs, whose
    cells save their checkpoints (:data:`JOB_SIGNALS`)."""
    try:
        import submitit
    except ImportError:
        raise WmzooError("--executor submitit needs submitit: pip install 'wmzoo[cluster]'") from None
    folder = folder or str(out / "submitit")
    parameters = dict(parameters)
    if parameters.pop("cluster", None) == "local":
        executor: Any = submitit.LocalExecutor(folder=folder)
        executor.update_parameters(**parameters)
    else:
        executor = submitit.AutoExecutor(folder=folder)
        executor.update_parameters(**{"slurm_array_parallelism": jobs, **parameters})
    jobs_ = [executor.submit(run_cell, *call) for call in calls]
    records, pending, cancelled = [], list(jobs_), False
    while pending:
        if processes.stopped and not cancelled:
            for job in pending:
                job.cancel(check=False)
            cancelled = True
        for job in [j for j in pending if j.done()]:
            pending.remove(job)
            try:
                records.append(job.result())
            except Exception as exc:  # noqa: BLE001 - the job itself died (time limit, node, pickling)
                cell, _, root, _ = calls[jobs_.index(job)]
                path = Path(root) / cell["path"]
                output = (path / LOG_FILE).read_text(errors="replace") if (path / LOG_FILE).is_file() else ""
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                why = error_line(output) if output.strip() else first
                record = {**cell_record(path), "cell": cell, "state": "failed",
                          "error": f"submitit job {job.job_id} ended without a result: {why} (submitit's logs: {folder})"}
                _write_record(path, record)
                records.append(record)
            watch.finished()
        watch.refresh()
        time.sleep(0.5)
    watch.close()
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

