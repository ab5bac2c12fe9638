"""Learning check: does a backbone at its `small` preset learn a MiniGrid task where random play
scores near 0, within a CPU hour?

    python benchmarks/learning_check.py --backbone rssm --env minigrid-empty-8x8 \
        --preset small --logdir runs/learning-check --episodes 50

Trains with `wmzoo.train.loop.train_online` (the same loop as `wmzoo run`), then evaluates the
trained policy and a uniformly random policy on the same evaluation seeds, and writes
`<logdir>/learning_check.json` with both means, their standard errors, the wall time and, for
token backbones, the first and last logged tokenizer reconstruction error and token accuracy
beside its frequency and copy baselines.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from wmzoo.config import run_spec
from wmzoo.eval.rollout import evaluate, load_agent
from wmzoo.registry import make_env
from wmzoo.train.loop import train_online


def random_returns(env_name: str, episodes: int, max_steps: int, seed: int) -> list[float]:
    env = make_env(env_name, seed=seed, train=False)
    env.action_space.seed(seed)
    returns = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total, done, steps = 0.0, False, 0
        while not done and steps < max_steps:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, steps, done = total + float(reward), steps + 1, terminated or truncated
        returns.append(total)
    env.close()
    return returns


LEARNING_CURVES = (
    "tokenizer/recon", "world_model/obs_acc", "world_model/obs_acc_freq", "world_model/obs_acc_copy",
)


def learning_curves(logdir: Path, keys: tuple[str, ...] = LEARNING_CURVES) -> dict[str, dict[str, float]]:
    """First and last logged value (and their env steps) of each scalar in ``keys`` that the run
    logged to TensorBoard: the tokenizer's reconstruction error and the token accuracy beside its
    frequency and copy baselines, for backbones that have them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    logged = set(events.Tags()["scalars"])
    out = {}
    for key in keys:
        if key in logged:
            values = events.Scalars(key)
            out[key] = {"first_step": values[0].step, "first": round(values[0].value, 4),
                        "last_step": values[-1].step, "last": round(values[-1].value, 4)}
    return out


def moments(result: dict, side: str) -> tuple[float, float, int]:
    """``(mean, unbiased variance, episodes)`` of the returns of ``side`` (``trained_greedy``,
    ``random``, ...) of a ``learning_check.json``, or of a ``wmzoo eval`` JSON (``side`` ``trained``
    or ``random``): from the per-episode returns where kept, else from the kept mean and its
    standard error (``np.std`` / sqrt(n), ddof 0)."""
    if "episodes" in result and isinstance(result["episodes"], list):  # wmzoo eval --random
        kept = result if side == "trained" else result["random"]
        returns = np.array([e["ret"] for e in kept["episodes"]])
        return float(returns.mean()), float(returns.var(ddof=1)), returns.size
    kept, n = result[side], int(result["episodes"])
    if "returns" in kept:
        returns = np.array(kept["returns"])
        return float(returns.mean()), float(returns.var(ddof=1)), returns.size
    return kept["mean"], kept["sem"] ** 2 * n * n / (n - 1), n


def verdict_rows(name: str, result: dict) -> list[str]:
    """Markdown rows: each trained policy's mean return against the random policy's on the same
    evaluation seeds (Welch 95 % over episodes, one training seed) and, for MiniGrid, the success
    rates (Wilson 95 % over episodes)."""
    from wmzoo.eval.verdicts import interval_verdict, welch_from_moments, wilson_interval

    sides = ["trained"] if "mean_return" in result else [k for k in ("trained_greedy", "trained_sampled") if k in result]
    random = moments(result, "random")
    rows = []
    for side in sides:
        mine = moments(result, side)
        v = interval_verdict(*welch_from_moments(mine, random), 0.0, False, "Welch 95 % over episodes", mine[2])
        text = f"**{v.text}**" if v.holds else v.text
        success = ""
        if "success" in result.get(side, {}):
            n = int(result["episodes"])
            a, b = (wilson_interval(round(result[k]["success"] * n), n) for k in (side, "random"))
            success = f"{100 * a[0]:.0f} % [{100 * a[1]:.0f}, {100 * a[2]:.0f}] vs {100 * b[0]:.0f} % [{100 * b[1]:.0f}, {100 * b[2]:.0f}]"
        rows.append(f"| {name} | {side.replace('trained_', '') if side != 'trained' else 'greedy'} | {mine[2]} "
                    f"| {mine[0]:.3f} | {random[0]:.3f} | {v.estimate:+.3f} [{v.low:+.3f}, {v.high:+.3f}]: {text} | {success or '–'} |")
    return rows


def summarise(paths: list[Path], out: Path) -> None:
    """``out``: every learning check's trained policy against the random one, computed (one training seed each)."""
    lines = ["# Learning checks: trained policy against a random policy on the same evaluation seeds", "",
             "**One training seed per check (seed 0).** Intervals are over the evaluation episodes of that one "
             "trained policy (Welch 95 % for the difference of mean returns, Wilson 95 % for success rates): they "
             "say whether *this trained policy* beats random play on these seeds, nothing about training-seed "
             "variance. Computed from the kept JSON files by `python benchmarks/learning_check.py --summarise`.", "",
             "| check | policy | episodes | mean return | random's | difference [95 % Welch] | success: policy vs random [95 % Wilson] |",
             "|---|---|---|---|---|---|---|"]
    for path in paths:
        lines += verdict_rows(path.stem.removeprefix("learning_check_"), json.loads(path.read_text()))
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default="rssm")
    parser.add_argument("--env", default="minigrid-empty-8x8")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--steps", type=int, help="env steps (default: the preset's)")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--logdir", default="runs/learning-check")
    parser.add_argument("--eval-only", action="store_true", help="evaluate an existing run in --logdir")
    parser.add_argument("--summarise", nargs="+", type=Path, metavar="JSON",
                        help="write benchmarks/results/learning_checks.md from these kept results; nothing trained")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise, Path(__file__).parent / "results" / "learning_checks.md")
        return

    logdir = Path(args.logdir)
    start = time.time()
    if not args.eval_only:
        steps = [f"train.steps={args.steps}"] if args.steps else []
        run = run_spec(args.backbone, args.env, args.preset, seed=args.seed, overrides=[*steps, *args.overrides])
        train_online(run, logdir, show_progress=False)
    train_seconds = time.time() - start
    previous = logdir / "learning_check.json"
    if args.eval_only and previous.is_file():  # keep the training run's wall time
        train_seconds = json.loads(previous.read_text()).get("train_seconds", 0.0)
    agent = load_agent(logdir / "checkpoint.safetensors")
    eval_seed = 100_000
    trained = [r.ret for r in evaluate(agent, args.episodes, args.max_steps, seed=eval_seed)]
    sampled = [r.ret for r in evaluate(agent, args.episodes, args.max_steps, seed=eval_seed, sample=True)]
    rand = random_returns(agent.run.env, args.episodes, args.max_steps, eval_seed)

    def summary(x: list[float]) -> dict[str, float | list[float]]:
        return {"mean": float(np.mean(x)), "sem": float(np.std(x) / np.sqrt(len(x))),
                "success": float(np.mean(np.array(x) > 0)), "returns": [float(r) for r in x]}

    result = {
        "backbone": agent.run.backbone, "env": agent.run.env, "preset": agent.run.preset,
        "env_steps": agent.run.train.steps, "train_seconds": round(train_seconds, 1),
        "episodes": args.episodes, "trained_greedy": summary(trained),
        "trained_sampled": summary(sampled), "random": summary(rand),
        "curves": learning_curves(logdir),
    }
    (logdir / "learning_check.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
