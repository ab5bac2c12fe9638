"""Keep a study's finished cells in the repository, and put them back to continue the study.

    python benchmarks/study_keep.py keep studies/popgym-pair benchmarks/results/popgym_pair/study
    python benchmarks/study_keep.py restore benchmarks/results/popgym_pair/study studies/popgym-pair

``keep`` copies ``study.yaml``, ``plan.json`` and every *done* cell's folder without its checkpoints
and replay (``cell.json``, the evaluation files, ``run.yaml``, the logs, TensorBoard events: what
``wmzoo study report`` reads, ~100 KB a cell); cells not done are left out (a cell folder without
its checkpoint could not resume). ``keep --checkpoints`` keeps each done cell's final checkpoint
too (the trained model, for diagnosing it later: ``tiny`` presets ~1.5 MB; replay never).
``restore`` copies what was kept into a new ``--out`` folder at the path
the cells ran in (their ``cell.json`` names it), where ``wmzoo study run`` with the same study file
skips them and runs the rest. Both refuse, in one line, to overwrite a file that differs.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
from pathlib import Path

from wmzoo.errors import WmzooError
from wmzoo.study.run import CELL_FILE, PLAN_FILE, STUDY_FILE, cell_record, cells_of

NEVER_KEPT = ("replay", "*.tmp")
LEFT_OUT = ("checkpoint.safetensors", *NEVER_KEPT)


def _copy(src: Path, dst: Path, left_out: tuple[str, ...] = LEFT_OUT) -> int:
    """Copy the tree ``src`` into ``dst`` but the files and folders ``left_out`` names (files that
    are already there identical are skipped); returns the files written."""
    written = 0
    for file in sorted(p for p in src.rglob("*") if p.is_file()):
        if any(file.match(pattern) or pattern in file.relative_to(src).parts for pattern in left_out):
            continue
        written += _copy_file(file, dst / file.relative_to(src))
    return written


def keep(out: Path, dest: Path, checkpoints: bool = False) -> list[str]:
    """The done cells of ``out`` (and its study and plan files) copied into ``dest``, with their
    final checkpoints if ``checkpoints``."""
    cells = cells_of(out)
    done = [c for c in cells if cell_record(out / c.path).get("state") == "done"]
    dest.mkdir(parents=True, exist_ok=True)
    for name in (STUDY_FILE, PLAN_FILE):
        _copy_file(out / name, dest / name)
    for cell in done:
        _copy(out / cell.path, dest / cell.path, NEVER_KEPT if checkpoints else LEFT_OUT)
    return [c.name for c in done]


def _copy_file(src: Path, dst: Path) -> int:
    """``src`` copied to ``dst`` unless an identical file is there (1 if written); refuses one that differs."""
    if dst.exists():
        if not filecmp.cmp(src, dst, shallow=False):
            raise SystemExit(f"{dst} exists and differs from {src}: move it away first")
        return 0
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)
    return 1


def restore(kept: Path, out: Path) -> list[str]:
    """``kept`` (a :func:`keep` folder) copied back into ``out``; the cells must have run there."""
    cells = cells_of(kept)
    for cell in cells:
        record = json.loads((kept / cell.path / CELL_FILE).read_text()) if (kept / cell.path / CELL_FILE).is_file() else {}
        ran_in = next((c.split("--logdir ", 1)[1].split()[0] for c in record.get("commands", []) if "--logdir " in c), None)
        if ran_in and Path(ran_in) != (out / cell.path).absolute():
            raise SystemExit(f"{cell.name} ran in {ran_in}, not under {out.absolute()}: restore it to "
                             f"{Path(ran_in).parents[len(Path(cell.path).parts) - 1]}")
    out.mkdir(parents=True, exist_ok=True)
    _copy(kept, out, NEVER_KEPT)  # a kept checkpoint goes back with its cell
    return [c.name for c in cells if (out / c.path / CELL_FILE).is_file()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name, a, b in (("keep", "out", "dest"), ("restore", "kept", "out")):
        s = sub.add_parser(name)
        s.add_argument(a, type=Path)
        s.add_argument(b, type=Path)
        if name == "keep":
            s.add_argument("--checkpoints", action="store_true",
                           help="keep each done cell's final checkpoint too (never its replay)")
    args = p.parse_args(argv)
    try:
        if args.command == "keep":
            names = keep(args.out, args.dest, args.checkpoints)
            print(f"kept {len(names)} done cells in {args.dest}: {', '.join(names) or 'none'}")
        else:
            names = restore(args.kept, args.out)
            print(f"restored {len(names)} cells into {args.out}: {', '.join(names) or 'none'}")
    except WmzooError as exc:
        raise SystemExit(f"error: {exc}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
