"""CPU-scale reproduction of the s4wm paper's memory-based reasoning result (section 5.6, table 3):
Recon. MSE and Gen. MSE of RSSM-TBTT, TSSM-XL and S4WM on Multi Doors Keys with three keys
(76 context | 174 query rows), trained on the same data with the same budget.

    python benchmarks/multi_doors_keys.py --workdir runs/mdk3 --episodes 2400 --frames 500000

The protocol is Distracting Memory's (``benchmarks/distracting_memory.py``, whose functions it
runs): the same backbones at their ``small`` presets with the same overrides (the paper's KL
balancing, one learning rate, a 3-stage CNN for 40×40, windows aligned to the 250-row episodes),
the same :data:`~distracting_memory.FRAMES_PER_UPDATE` rows per update and warm-up for all three,
and the same gate at ``--gate-frames`` (each run must reconstruct better than half the mean frame
and carry information in its posterior before the budget is spent). Steps:

1. ``wmzoo data generate --env multi-doors-keys-3 --episodes N --size 40`` (2,000 / 200 / 200
   episodes at the default 2,400; the paper's 8K / 1K / 1K, appendix);
2. ``wmzoo run --offline DATA`` for each backbone to the gate, the gate, then on to ``--frames``;
3. ``wmzoo evaluate --protocol imagination --split test`` (the paper's Recon. MSE over the 76
   observed rows, Gen. MSE over the 174 imagined ones, both in the paper's unit: the per-image sum
   of squared errors of [0, 1] pixels, so comparable to table 3's numbers) and ``--protocol
   reasoning`` (the unlock attempts' outcome predicted as a reward: inference and imagination
   accuracy, AUC — a readout beside the paper's, which reports only the MSEs);
4. the report ``multi_doors_keys_3.md``: the table beside the paper's, the gate's table, the
   Gen. MSE by imagination step (``multi_doors_keys_3_gen_mse.png``: where the paper's figure 9
   shows the doors' states going wrong) and the learning curves.

Runs already finished in ``--workdir`` are reused (delete a run's folder to redo it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import distracting_memory as dm

ENV = "multi-doors-keys-3"
NAME = "multi_doors_keys_3"
PAPER = {  # s4wm table 3, three keys: (Recon. MSE, Gen. MSE), per-image sums of squared errors
    "RSSM-TBTT": (0.05, 5.16),
    "TSSM-XL": (0.05, 1.27),
    "S4WM": (0.01, 0.04),
}


def table(results: dict[str, dict], frames: int) -> list[str]:
    lines = [
        "| backbone | training frames | updates × batch × length | Recon. MSE | Gen. MSE | mean-frame MSE "
        "| unlock outcome: inference / imagination acc. (AUC) | attempts scored | paper Recon. / Gen. MSE |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for backbone, r in results.items():
        label, seq_len, _ = dm.BACKBONES[backbone]
        updates, batch = dm.budget(backbone, frames, 0)
        lines.append(
            f"| {label} | {updates * dm.FRAMES_PER_UPDATE:,} | {updates} × {batch} × {seq_len} "
            f"| {r['recon_mse']:.2f} | {r['gen_mse']:.2f} | {r['mean_frame_mse']:.2f} "
            f"| {dm._pct(r['inference_accuracy'])} ({dm._auc(r.get('inference_auc'))}) / "
            f"{dm._pct(r['imagination_accuracy'])} ({dm._auc(r.get('imagination_auc'))}) "
            f"| {r['scored_transitions']} | {PAPER[label][0]:.2f} / {PAPER[label][1]:.2f} |"
        )
    return lines


def baselines(data: Path) -> dict:
    """The report's baselines on the test split of ``data`` (no model): the unlock outcome's base
    rate over the attempts and the imagination protocol's constant predictors, on every test
    episode (the final table) and on the gate's :data:`~distracting_memory.GATE_EPISODES`."""
    from wmzoo.eval.memory import ATTEMPT_KEY, imagination_baselines, reward_baselines

    return {"reward": reward_baselines(data, ATTEMPT_KEY), "images": imagination_baselines(data, "test"),
            "gate_images": imagination_baselines(data, "test", dm.GATE_EPISODES)}


def report(results: dict[str, dict], frames: int, out: Path, gates: dict[str, dict], gate_frames: int,
           base: dict | None = None) -> None:
    """``NAME.md`` (the table, with ``base`` (:func:`baselines`) the baselines and verdicts, and the
    gate's) and the Gen. MSE by imagination step, one line per backbone."""
    from wmzoo.eval.plots import curves_plot

    labels = {b: dm.BACKBONES[b][0] for b in dm.BACKBONES}
    lines = table(results, frames)
    if base:
        episodes, r = base["reward"]["episodes"], base["reward"]
        scored = r["positives"] + r["negatives"]
        lines = [dm.one_seed_note(episodes), "", *lines, "",
                 f"Unlock outcome: baselines and verdicts (test split, {episodes} episodes, {scored} attempts, "
                 f"{r['positives']} of them succeed by construction). The attempts of one episode are not independent: "
                 f"the unit is the episode (n = {episodes}, not {scored}).", "",
                 *dm.verdict_table(results, r, episodes, labels), "",
                 *dm.image_baseline_table(results, base["images"], episodes, labels)]
    if gates:
        lines += ["", f"The gate, at {gate_frames:,} training frames (test split; imagination protocol on "
                  f"{dm.GATE_EPISODES} episodes):", "", *dm.gate_table(gates)]
        if base:
            lines += ["", *dm.image_baseline_table(gates, base["gate_images"], dm.GATE_EPISODES, labels)]
    (out / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    series = {}
    for backbone, r in results.items():
        curve = np.asarray(r["gen_mse_per_step"], float)
        series[dm.BACKBONES[backbone][0]] = (np.arange(1, len(curve) + 1), curve, None, None)
    curves_plot(out / f"{NAME}_gen_mse.png", series, "imagination step", "Gen. MSE",
                "Multi Doors Keys 3: Gen. MSE by imagination step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("runs/mdk3"))
    parser.add_argument("--episodes", type=int, default=2400, help="episodes generated (2,000 / 200 / 200)")
    parser.add_argument("--frames", type=int, default=500_000, help="training frames per backbone")
    parser.add_argument("--gate-frames", type=int, default=dm.GATE_FRAMES, help="training frames at the gate (0: no gate)")
    parser.add_argument("--past-gate", action="store_true", help="train on to --frames even when a run fails the gate")
    parser.add_argument("--warmup", type=int, default=dm.WARMUP, help="learning-rate warm-up (updates), every backbone")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--rebuild", action="store_true", help="rewrite the report from the kept JSON files in --out "
                        "with baselines and verdicts (the test split regenerated into --workdir; nothing trained)")
    args = parser.parse_args()
    gate_frames = min(args.gate_frames, args.frames)
    for backbone in dm.BACKBONES:  # refuse a budget inside the warm-up before any work
        dm.budget(backbone, args.frames, args.warmup)
        if gate_frames:
            dm.budget(backbone, gate_frames, args.warmup)
    data = args.workdir / "data"
    if args.rebuild:  # the kept JSON files, the regenerated test split: nothing trained
        dm.regenerate_test_split(ENV, data, args.episodes)
        gates = json.loads((args.out / f"{NAME}_gate.json").read_text())
        report(json.loads((args.out / f"{NAME}.json").read_text()), dm.kept_frames(args.out, NAME), args.out, gates,
               dm.FRAMES_PER_UPDATE * next(iter(gates.values()))["updates"], baselines(data))
        return
    if not (data / "manifest.json").is_file():
        dm.wmzoo("data", "generate", "--env", ENV, "--episodes", str(args.episodes), "--out", str(data),
                 "--size", "40", "--seed", "0", "--split", dm.split(args.episodes))
    args.out.mkdir(parents=True, exist_ok=True)
    gates: dict[str, dict] = {}
    if gate_frames:
        for backbone in dm.BACKBONES:
            checkpoint = dm.train(args.workdir, data, backbone, gate_frames, args.warmup)
            gates[backbone] = dm.gate(checkpoint, data, dm.budget(backbone, gate_frames)[0], "reasoning")
        (args.out / f"{NAME}_gate.json").write_text(json.dumps(gates, indent=1) + "\n")
        print("\n".join(dm.gate_table(gates)))
    failed = [dm.BACKBONES[b][0] for b, g in gates.items() if not (g["sees"] and g["uses_latent"])]
    if failed and not args.past_gate:
        print(f"multi_doors_keys.py: {', '.join(failed)} failed the gate at {gate_frames:,} frames "
              "(table above); fix the learning before spending the budget, or pass --past-gate", file=sys.stderr)
        sys.exit(1)
    results = {}
    for backbone in dm.BACKBONES:
        checkpoint = dm.train(args.workdir, data, backbone, args.frames, args.warmup)
        results[backbone] = {**dm.evaluate(checkpoint, data, "imagination"), **dm.evaluate(checkpoint, data, "reasoning")}
    (args.out / f"{NAME}.json").write_text(json.dumps(results, indent=1) + "\n")
    report(results, args.frames, args.out, gates, gate_frames, baselines(data))
    dm.curves(args.workdir, args.out, NAME, "Multi Doors Keys 3")
    dm.keep_specs(args.workdir, args.out, NAME)


if __name__ == "__main__":
    main()
