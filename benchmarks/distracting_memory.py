"""CPU-scale reproduction of the s4wm paper's Distracting Memory experiment (section 5.5, table 2):
reward prediction accuracy, inference vs imagination, of RSSM-TBTT, TSSM-XL and S4WM trained on
the same data with the same budget: frames, updates and learning-rate warm-up.

    python benchmarks/distracting_memory.py --workdir runs/dm100 --episodes 1000 --frames 120000

Steps, each through the CLI a user would run (so the report tests the library as shipped):

1. ``wmzoo data generate --env distracting-memory-100 --episodes N --size 40`` (8/1/1 splits);
2. ``wmzoo run --offline DATA`` for each backbone at its ``small`` preset with the paper's
   objective (KL balancing 0.8, no free nats) and a 3-stage CNN for 40×40, on windows aligned to
   the 250-row episodes (``train.windows=episodes``): S4WM on whole episodes, TSSM-XL on two
   segments of 125 with a 128-step cache, RSSM-TBTT on five TBTT segments of 50 (s4wm table 8);
3. ``wmzoo evaluate --protocol reward --split test`` on each checkpoint (training form, and the
   step form beside it);
4. a markdown table and a bar plot of both accuracies, beside the paper's numbers.

**Equal budgets.** Every backbone trains on the same frames *and* the same number of updates:
each update reads :data:`FRAMES_PER_UPDATE` rows (batch = 500 / segment length: S4WM 2 × 250,
TSSM-XL 4 × 125, RSSM-TBTT 10 × 50), ``--frames / 500`` updates each, with the same learning-rate
warm-up (``--warmup`` updates, replacing the presets' own: S4WM ``small`` has 100, the others
none), and the run is refused (exit 2) when the updates would not leave the warm-up
(``--frames`` at least 2 × warm-up × 500). At CPU scale the number of updates, not of frames,
limits learning: the first version of this benchmark gave S4WM 60 updates, all inside its
100-update warm-up, against RSSM-TBTT's 300 (8 sequences per batch for all three).

Runs already finished in ``--workdir`` are reused (delete a run's folder to redo it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

ENV = "distracting-memory-100"
EPISODE_ROWS = 250  # 199 context + 51 query observations
FRAMES_PER_UPDATE = 500  # rows every update trains on, for every backbone
WARMUP = 50  # learning-rate warm-up in updates, the same for every backbone
# backbone -> (label, training segment length, extra --set overrides)
BACKBONES = {
    "rssm": ("RSSM-TBTT", 50, []),
    "tssm-xl": ("TSSM-XL", 125, ["model.cache_len=128"]),
    "s4wm": ("S4WM", EPISODE_ROWS, []),
}
COMMON = [
    "train.image_size=40", "model.cnn_stages=3", "model.cnn_depth=16", "train.windows=episodes",
    "model.kl.balance=0.8", "model.kl.free=0.0", "train.log_every=10",
]
PAPER = {  # s4wm table 2, width 100: (inference, imagination) accuracy in %
    "RSSM-TBTT": (47.9, 49.6),
    "TSSM-XL": (100.0, 51.2),
    "S4WM": (100.0, 100.0),
}


def wmzoo(*args: str) -> None:
    print("$ wmzoo", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "wmzoo.cli", *args], check=True)


def fail(message: str) -> NoReturn:
    """One error line and exit 2."""
    print(f"distracting_memory.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def budget(backbone: str, frames: int, warmup: int = WARMUP) -> tuple[int, int]:
    """``(updates, batch size)`` of ``backbone`` for ``frames`` training frames: the same updates
    of :data:`FRAMES_PER_UPDATE` rows for every backbone; exit 2 with one line when they would not
    leave the warm-up twice over."""
    seq_len = BACKBONES[backbone][1]
    if FRAMES_PER_UPDATE % seq_len:
        fail(f"{backbone}'s segments of {seq_len} rows do not divide the {FRAMES_PER_UPDATE} rows of an update")
    updates = frames // FRAMES_PER_UPDATE
    if updates < 2 * warmup:
        fail(f"--frames {frames} gives {updates} updates of {FRAMES_PER_UPDATE} rows, inside twice the "
             f"{warmup}-update warm-up; pass --frames of at least {2 * warmup * FRAMES_PER_UPDATE} or a smaller --warmup")
    return updates, FRAMES_PER_UPDATE // seq_len


def train(workdir: Path, data: Path, backbone: str, frames: int, warmup: int = WARMUP) -> Path:
    _, seq_len, extra = BACKBONES[backbone]
    logdir = workdir / backbone
    checkpoint = logdir / "checkpoint.safetensors"
    if not checkpoint.is_file():
        updates, batch = budget(backbone, frames, warmup)
        sets = [*COMMON, f"model.seq_len={seq_len}", f"model.batch_size={batch}", f"model.optim.warmup={warmup}",
                f"train.checkpoint_every={max(1, updates // 10)}", *extra]
        wmzoo("run", "--offline", str(data), "--backbone", backbone, "--preset", "small", "--seed", "0",
              "--steps", str(updates), "--logdir", str(logdir), "--no-progress",
              *[a for s in sets for a in ("--set", s)])
    return checkpoint


def evaluate(checkpoint: Path, data: Path) -> dict:
    out = checkpoint.parent / "evaluate"
    result = out / "reward.json"
    if not result.is_file():
        wmzoo("evaluate", "--checkpoint", str(checkpoint), "--protocol", "reward", "--data", str(data),
              "--split", "test", "--out", str(out))
    return json.loads(result.read_text())


def report(results: dict[str, dict], frames: int, out: Path) -> None:
    nan = float("nan")  # a result written before the step form was reported
    lines = [
        "| backbone | training frames | updates × batch × length | inference acc. | imagination acc. "
        "| step form: inference / imagination | paper (inference / imagination) |",
        "|---|---|---|---|---|---|---|",
    ]
    for backbone, r in results.items():
        label, seq_len, _ = BACKBONES[backbone]
        paper = PAPER[label]
        updates, batch = budget(backbone, frames, 0)
        lines.append(
            f"| {label} | {updates * FRAMES_PER_UPDATE:,} | {updates} × {batch} × {seq_len} "
            f"| {100 * r['inference_accuracy']:.1f} % | {100 * r['imagination_accuracy']:.1f} % "
            f"| {100 * r.get('step_inference_accuracy', nan):.1f} % / {100 * r.get('step_imagination_accuracy', nan):.1f} % "
            f"| {paper[0]:.1f} % / {paper[1]:.1f} % |"
        )
    (out / "distracting_memory_100.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [BACKBONES[b][0] for b in results]
    x = range(len(labels))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    w = 0.2
    ax.bar([i - 1.5 * w for i in x], [100 * r["inference_accuracy"] for r in results.values()], w, label="inference (ours)")
    ax.bar([i - 0.5 * w for i in x], [100 * r["imagination_accuracy"] for r in results.values()], w, label="imagination (ours)")
    ax.bar([i + 0.5 * w for i in x], [PAPER[lab][0] for lab in labels], w, label="inference (paper)", alpha=0.4)
    ax.bar([i + 1.5 * w for i in x], [PAPER[lab][1] for lab in labels], w, label="imagination (paper)", alpha=0.4)
    ax.axhline(50, color="gray", lw=0.8, ls="--")
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("reward prediction accuracy (%)")
    ax.set_ylim(0, 105)
    ax.set_title("Distracting Memory, width 100 (test split)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "distracting_memory_100.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("runs/dm100"))
    parser.add_argument("--episodes", type=int, default=1000, help="episodes generated (8/1/1 split)")
    parser.add_argument("--frames", type=int, default=120_000, help="training frames per backbone")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="learning-rate warm-up (updates), every backbone")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    for backbone in BACKBONES:  # refuse a budget inside the warm-up before any work
        budget(backbone, args.frames, args.warmup)
    data = args.workdir / "data"
    if not (data / "manifest.json").is_file():
        wmzoo("data", "generate", "--env", ENV, "--episodes", str(args.episodes), "--out", str(data),
              "--size", "40", "--seed", "0")
    results = {}
    for backbone in BACKBONES:
        checkpoint = train(args.workdir, data, backbone, args.frames, args.warmup)
        results[backbone] = evaluate(checkpoint, data)
    args.out.mkdir(parents=True, exist_ok=True)
    report(results, args.frames, args.out)


if __name__ == "__main__":
    main()
