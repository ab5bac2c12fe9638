"""CPU-scale reproduction of the s4wm paper's Distracting Memory experiment (section 5.3, table 2):
reward prediction accuracy, inference vs imagination, of RSSM-TBTT, TSSM-XL and S4WM trained on
the same data with the same budget of training frames.

    python benchmarks/distracting_memory.py --workdir runs/dm100 --episodes 1000 --frames 120000

Steps, each through the CLI a user would run (so the report tests the library as shipped):

1. ``wmzoo data generate --env distracting-memory-100 --episodes N --size 40`` (8/1/1 splits);
2. ``wmzoo run --offline DATA`` for each backbone at its ``small`` preset with the paper's
   objective (KL balancing 0.8, no free nats), a 3-stage CNN for 40×40 and 8 sequences per batch:
   S4WM on whole episodes (250 rows), TSSM-XL on segments of 125 with a 128-step cache,
   RSSM-TBTT on TBTT segments of 50 (s4wm table 8); each gets ``--frames`` training frames;
3. ``wmzoo evaluate --protocol reward --split test`` on each checkpoint;
4. a markdown table and a bar plot of both accuracies, beside the paper's numbers.

Runs already finished in ``--workdir`` are reused (delete a run's folder to redo it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ENV = "distracting-memory-100"
EPISODE_ROWS = 250  # 199 context + 51 query observations
BATCH = 8
# backbone -> (label, training segment length, extra --set overrides)
BACKBONES = {
    "rssm": ("RSSM-TBTT", 50, []),
    "tssm-xl": ("TSSM-XL", 125, ["model.cache_len=128"]),
    "s4wm": ("S4WM", EPISODE_ROWS, []),
}
COMMON = [
    "train.image_size=40", "model.cnn_stages=3", "model.cnn_depth=16", f"model.batch_size={BATCH}",
    "model.kl.balance=0.8", "model.kl.free=0.0", "train.log_every=10",
]
PAPER = {  # s4wm table 2, width 100: (inference, imagination) accuracy in %
    "RSSM-TBTT": (47.9, 49.6),
    "TSSM-XL": (100.0, 51.3),
    "S4WM": (100.0, 100.0),
}


def wmzoo(*args: str) -> None:
    print("$ wmzoo", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "wmzoo.cli", *args], check=True)


def train(workdir: Path, data: Path, backbone: str, frames: int) -> Path:
    _, seq_len, extra = BACKBONES[backbone]
    logdir = workdir / backbone
    checkpoint = logdir / "checkpoint.safetensors"
    if not checkpoint.is_file():
        updates = frames // (BATCH * seq_len)
        sets = [*COMMON, f"model.seq_len={seq_len}", f"train.checkpoint_every={max(1, updates // 10)}", *extra]
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


def report(results: dict[str, dict], frames: dict[str, int], out: Path) -> None:
    lines = [
        "| backbone | training frames | updates × batch × length | inference acc. | imagination acc. "
        "| paper (inference / imagination) |",
        "|---|---|---|---|---|---|",
    ]
    for backbone, r in results.items():
        label, seq_len, _ = BACKBONES[backbone]
        paper = PAPER[label]
        lines.append(
            f"| {label} | {frames[backbone]:,} | {frames[backbone] // (BATCH * seq_len)} × {BATCH} × {seq_len} "
            f"| {100 * r['inference_accuracy']:.1f} % | {100 * r['imagination_accuracy']:.1f} % "
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
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    data = args.workdir / "data"
    if not (data / "manifest.json").is_file():
        wmzoo("data", "generate", "--env", ENV, "--episodes", str(args.episodes), "--out", str(data),
              "--size", "40", "--seed", "0")
    results, frames = {}, {}
    for backbone in BACKBONES:
        checkpoint = train(args.workdir, data, backbone, args.frames)
        results[backbone] = evaluate(checkpoint, data)
        frames[backbone] = args.frames // (BATCH * BACKBONES[backbone][1]) * BATCH * BACKBONES[backbone][1]
    args.out.mkdir(parents=True, exist_ok=True)
    report(results, frames, args.out)


if __name__ == "__main__":
    main()
