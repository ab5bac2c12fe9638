"""The cue probe (issue 29) of every trained cell of a Distracting Memory study.

    python benchmarks/study_cue_probe.py STUDY_OUT [--rows 5] [--train-episodes 2000] [--jobs 4]

For each cell of ``STUDY_OUT`` (a ``wmzoo study run --out`` folder) whose checkpoint holds the
study's whole budget, :func:`distracting_memory.cue_probe` fits a linear probe of the cue's colour
on the features after ``r`` rows, for ``--rows`` values of ``r`` evenly spaced from the row where
the cue was last in view to the whole context, on ``--train-episodes`` train episodes, scored on the
test split beside the majority colour's share. Each result is kept in the cell's
``evaluate-<updates>/cue_probe_<r>.json`` (a rerun reads it back); ``STUDY_OUT/cue_probe.json``
gathers them per cell. Cells run ``--jobs`` at a time, each on the device it trained on.
"""
from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import distracting_memory as dm  # noqa: E402


def probe_cell(checkpoint: str, data: str, rows: list[int], train_episodes: int, threads: int) -> list[dict]:
    import torch

    torch.set_num_threads(threads)
    return dm.cue_probe(Path(checkpoint), Path(data), rows, train_episodes=train_episodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the study folder (wmzoo study run --out)")
    parser.add_argument("--rows", type=int, default=5, help="row counts probed along the context")
    parser.add_argument("--train-episodes", type=int, default=2000, help="train episodes of each probe")
    parser.add_argument("--jobs", type=int, default=1, help="cells probed at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each cell")
    args = parser.parse_args()
    from wmzoo.errors import WmzooError
    from wmzoo.study.run import cell_record, cells_of, data_dir

    try:
        cells = cells_of(args.out)
    except WmzooError as exc:
        dm.fail(str(exc))
    todo = {}
    for cell in cells:
        checkpoint = args.out / cell.path / "checkpoint.safetensors"
        state = cell_record(args.out / cell.path).get("state")
        if state is None:
            print(f"{cell.name}: not started, skipped", flush=True)
            continue
        if not checkpoint.is_file():
            print(f"{cell.name}: no checkpoint in its folder (trained elsewhere?), skipped", flush=True)
            continue
        if state != "done":
            print(f"{cell.name}: not done, skipped", flush=True)
            continue
        data = data_dir(args.out, cell.env)
        rows = dm.probe_rows(dm.context_length(data), args.rows)
        todo[cell.name] = (str(checkpoint), str(data), rows, args.train_episodes, args.threads)
    results = {}
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {name: pool.submit(probe_cell, *call) for name, call in todo.items()}
        for name, future in futures.items():
            rows = todo[name][2]
            results[name] = [{**r, "context_rows": row} for row, r in zip(rows, future.result(), strict=True)]
            line = "  ".join(f"{row}: {100 * r['cue_probe_accuracy']:.1f}%" for row, r in zip(rows, results[name]))
            print(f"{name}: cue probe (test) after rows {line}; majority {100 * results[name][0]['majority_share']:.1f}%",
                  flush=True)
    from wmzoo.atomic import write_text_atomic

    write_text_atomic(args.out / "cue_probe.json", json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
