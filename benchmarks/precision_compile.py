"""The "Precision and compile" tables of benchmarks/README.md from the JSON of `wmzoo bench`.

Each backbone was timed in two processes per mode (see the README for the commands): fp32 beside
bf16 (``<backbone>_<mode>_bf16.json``), and fp32 beside fp32 compiled
(``<backbone>_<mode>_compile.json``). Every ratio is between records of one process.

    python benchmarks/precision_compile.py [benchmarks/results/precision_compile]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BACKBONES = ["rssm", "s4wm", "tssm-xl", "iris", "rem", "delta-iris", "tokenwm"]


def _load(folder: Path, backbone: str, mode: str, kind: str) -> list[dict] | None:
    path = folder / f"{backbone}_{mode}_{kind}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _totals(parts: dict[str, float]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for key, value in parts.items():
        name = key.split(".", 1)[0]
        totals[name] = totals.get(name, 0.0) + value
    return totals


def speed_table(folder: Path) -> str:
    rows = ["| backbone | params | train fp32 frames/s | train bf16 ÷ fp32 | train compiled ÷ fp32 | "
            "imagine fp32 frames/s | imagine bf16 ÷ fp32 | imagine compiled ÷ fp32 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for backbone in BACKBONES:
        cells = [backbone]
        params = ""
        for mode in ("train", "imagine"):
            bf16, compiled = _load(folder, backbone, mode, "bf16"), _load(folder, backbone, mode, "compile")
            params = params or (f"{bf16[0]['params']:,}" if bf16 else "")
            cells.append(f"{bf16[0]['throughput']:.0f}" if bf16 else "–")
            cells.append(f"{bf16[1]['vs_first']:.2f}" if bf16 else "–")
            if compiled is None:
                cells.append("did not finish")
            else:
                failed = compiled[1]["compile_failed"]
                cells.append(f"{compiled[1]['vs_first']:.2f}" + (" (eager: " + ", ".join(failed) + ")" if failed else ""))
        rows.append("| " + " | ".join([cells[0], params, *cells[1:]]) + " |")
    return "\n".join(rows)


def component_table(folder: Path) -> str:
    rows = ["| backbone | variant | update ms | component ms (forward + no-grad forward + backward + step) | "
            "other ms | start states ms | policy ms |", "|---|---|---:|---|---:|---:|---:|"]
    for backbone in BACKBONES:
        for record in _load(folder, backbone, "train", "bf16") or []:
            totals = _totals(record["components"])
            named = [k for k in totals if k not in ("other", "start_states", "policy")]
            no_grad = {k: record["components"].get(f"{k}.no_grad", 0.0) for k in named}
            parts = "; ".join(f"{k} {totals[k] * 1e3:.0f}"
                              + (f" ({no_grad[k] * 1e3:.0f} without gradient)" if no_grad[k] else "") for k in named)
            start = f"{totals['start_states'] * 1e3:.1f}" if "start_states" in totals else "in the loss"
            rows.append(f"| {backbone} | {record['precision']} | {record['seconds_per_iter'] * 1e3:.0f} | {parts} | "
                        f"{totals.get('other', 0) * 1e3:.0f} | {start} | {totals.get('policy', 0) * 1e3:.0f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/precision_compile")
    print(speed_table(folder))
    print()
    print(component_table(folder))
