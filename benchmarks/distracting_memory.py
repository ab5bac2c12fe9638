"""CPU-scale reproduction of the s4wm paper's Distracting Memory experiment (section 5.5, table 2):
reward prediction accuracy, inference vs imagination, of RSSM-TBTT, TSSM-XL and S4WM trained on
the same data with the same budget: frames, updates and learning-rate warm-up.

    python benchmarks/distracting_memory.py --workdir runs/dm100 --episodes 2400 --frames 2000000
    python benchmarks/distracting_memory.py --width 8 --episodes 10000 --frames 2500000 --set model.reward_scale=100

``--width`` picks the hallway (a registered ``distracting-memory-W``) and scales each backbone's
training segments with the episode (:func:`configure`); the study file
``benchmarks/studies/distracting-memory-8.yaml`` runs the width-8 protocol through ``wmzoo study``.

Steps, each through the CLI a user would run (so the report tests the library as shipped):

1. ``wmzoo data generate --env distracting-memory-100 --episodes N --size 40`` (2,000 / 200 / 200
   episodes at the default 2,400);
2. ``wmzoo run --offline DATA`` for each backbone at its ``small`` preset with the paper's
   objective (KL balancing 0.8, no free nats), one learning rate for all three, 1e-3 (S4WM's in
   table 8; *deviation*: RSSM-TBTT's is 3e-4 and TSSM-XL's 1e-4 there, which at this budget —
   under 1 % of the paper's 100 epochs of 8K episodes — left RSSM-TBTT at Recon. MSE 15.2 and
   TSSM-XL at 20.8 at the gate, against 4.1 and 5.0 at 1e-3, with the mean frame at 33.2;
   ``results/distracting_memory_100_gate_lr3e-4.json``), and a 3-stage CNN for 40×40, on windows
   aligned to the 250-row episodes (``train.windows=episodes``): S4WM on whole episodes, TSSM-XL on two
   segments of 125 with a 128-step cache, RSSM-TBTT on five TBTT segments of 50 (s4wm table 8);
3. **the gate** at ``--gate-frames`` (0.5M): each run is evaluated (``wmzoo evaluate --protocol
   imagination`` and ``reward`` on the test split) before it trains on; it passes when it
   reconstructs better than half the mean-frame baseline (``recon_mse < mean_frame_mse / 2``) and
   its posterior carries information the prior does not: KL(q ‖ p), the rate, at least
   :data:`MIN_RATE` nats per step (the mean of the logged ``kl`` over the last tenth of the updates
   up to the gate, :func:`rate`). A collapsed latent has a rate of 0 — the first runs sat at
   0.00–0.03 nats for their first 300–600 updates while their reconstruction stayed at the mean
   frame. The class perplexity (``latent_perplexity``) is reported beside it but decides nothing:
   the three runs that pass at 1e-3 (Recon. MSE 4.1–5.0 of the mean frame's 33) use 2.3–3.0 classes
   per group: little in this task's frames is not predicted by the past (the distractors' colours,
   the cue), and a few classes per group hold it. If one fails the script stops there (exit 1)
   with the gate's table: fix the learning before spending the budget (``--past-gate`` goes on
   anyway);
4. **the memoryless control** (``--control``): the same data with the ending's reward relabelled
   to depend on the last move only (1 when it is *up*, :func:`relabel`), the same budget up to the
   gate: a backbone that cannot learn this cannot be asked about memory;
5. the runs resume to ``--frames``; ``wmzoo evaluate --protocol reward --split test`` on each
   (training form, the step form beside it; accuracies and the threshold-free reward AUC) and a
   linear probe of the cue's colour from the state after the last context row and from the state
   just after the cue was last in view (:func:`cue_probe`: kept vs. seen);
6. the report: a markdown table and a bar plot of both accuracies beside the paper's numbers, the
   gate's and the control's tables, learning curves (reconstruction and reward loss by frames).

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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import numpy as np

if TYPE_CHECKING:
    import torch

    from wmzoo.eval.verdicts import Verdict

WIDTH = 100  # the hallway's width: --width (configure); the module's constants below follow it
ENV = "distracting-memory-100"
EPISODE_ROWS = 250  # 199 context + 51 query observations
NAME = "distracting_memory_100"  # the report's files: NAME.md, NAME.json, NAME_gate.json, ...
FRAMES_PER_UPDATE = 500  # rows every update trains on, for every backbone
WARMUP = 50  # learning-rate warm-up in updates, the same for every backbone
GATE_FRAMES = 500_000  # the gate: each run must have learnt to see by here
MIN_RATE = 1.0  # nats of KL(q ‖ p) per step the gate asks of a posterior (DreamerV3's free bits)
UP = 3  # the actions are right, down, left, up (MiniGrid's directions)
GATE_EPISODES = 100  # test episodes the gate's imagination protocol decodes
# backbone -> (label, training segment length, extra --set overrides)
BACKBONES = {
    "rssm": ("RSSM-TBTT", 50, []),
    "tssm-xl": ("TSSM-XL", 125, ["model.cache_len=128"]),
    "s4wm": ("S4WM", EPISODE_ROWS, []),
}
COMMON = [
    "train.image_size=40", "model.cnn_stages=3", "model.cnn_depth=16", "train.windows=episodes",
    "model.kl.balance=0.8", "model.kl.free=0.0", "model.optim.lr=0.001", "train.log_every=10",
]
PAPER = {  # s4wm table 2, width 100: (inference, imagination) accuracy in %
    "RSSM-TBTT": (47.9, 49.6),
    "TSSM-XL": (100.0, 51.2),
    "S4WM": (100.0, 100.0),
}


def configure(width: int) -> None:
    """Set the protocol for hallway ``width`` (``--width``): the env, its episode length, the
    report's file names, and each backbone's training structure scaled with the episode as table
    8 sets it at width 100 (250 rows: RSSM-TBTT segments of 50, a fifth; TSSM-XL segments of 125, a
    half, with a 128-step cache, the next power of two; S4WM the whole episode): at width 20 (50
    rows) segments of 10, 25 with a cache of 32, and 50; at width 8 (20 rows) 4, 10 with 16, and 20."""
    global WIDTH, ENV, EPISODE_ROWS, NAME
    from wmzoo.envs.memory_tasks_2d import DISTRACTING_MEMORY

    if width not in DISTRACTING_MEMORY:
        fail(f"--width {width}: Distracting Memory is registered at widths {sorted(DISTRACTING_MEMORY)}")
    WIDTH, ENV, NAME = width, f"distracting-memory-{width}", f"distracting_memory_{width}"
    EPISODE_ROWS = sum(DISTRACTING_MEMORY[width])
    half = EPISODE_ROWS // 2
    BACKBONES.update({
        "rssm": ("RSSM-TBTT", EPISODE_ROWS // 5, []),
        "tssm-xl": ("TSSM-XL", half, [f"model.cache_len={1 << (half - 1).bit_length()}"]),
        "s4wm": ("S4WM", EPISODE_ROWS, []),
    })


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


def updates_done(checkpoint: Path) -> int:
    from wmzoo.train.checkpoint import checkpoint_header

    return int(checkpoint_header(checkpoint)["progress"]["updates"])


def train(workdir: Path, data: Path, backbone: str, frames: int, warmup: int = WARMUP, name: str | None = None) -> Path:
    """Train ``backbone`` (in ``workdir / name``, default its name) to ``frames`` training frames:
    a new run, or ``--resume`` of one that has trained fewer."""
    _, seq_len, extra = BACKBONES[backbone]
    logdir = workdir / (name or backbone)
    checkpoint = logdir / "checkpoint.safetensors"
    updates, batch = budget(backbone, frames, warmup)
    if not checkpoint.is_file():
        sets = [*COMMON, f"model.seq_len={seq_len}", f"model.batch_size={batch}", f"model.optim.warmup={warmup}",
                f"train.checkpoint_every={max(1, updates // 10)}", *extra]
        wmzoo("run", "--offline", str(data), "--backbone", backbone, "--preset", "small", "--seed", "0",
              "--steps", str(updates), "--logdir", str(logdir), "--no-progress",
              *[a for s in sets for a in ("--set", s)])
    elif updates_done(checkpoint) < updates:
        wmzoo("run", "--resume", "--logdir", str(logdir), "--steps", str(updates), "--no-progress")
    return checkpoint


def evaluate(checkpoint: Path, data: Path, protocol: str = "reward", out: Path | None = None,
             episodes: int | None = None) -> dict:
    """``wmzoo evaluate --protocol PROTOCOL`` of ``checkpoint`` on the test split, once: the result
    is kept in ``out`` (default ``<run>/evaluate-<updates>``, so a run resumed to a larger budget
    is evaluated anew rather than read from its evaluation at fewer updates)."""
    out = out or checkpoint.parent / f"evaluate-{updates_done(checkpoint)}"
    result = out / f"{protocol}.json"
    if not result.is_file():
        wmzoo("evaluate", "--checkpoint", str(checkpoint), "--protocol", protocol, "--data", str(data),
              "--split", "test", "--out", str(out), *(["--episodes", str(episodes)] if episodes else []))
    return json.loads(result.read_text())


def gate(checkpoint: Path, data: Path, updates: int, protocol: str = "reward") -> dict:
    """The readings of a run at the gate, ``updates`` updates: the imagination protocol's and
    ``protocol``'s (the task's accuracies), evaluated once, in ``<run>/gate``, and the rate logged
    up to there. Exit 2 when they were never taken and the run has trained past the gate."""
    out = checkpoint.parent / "gate"
    taken = all((out / f"{p}.json").is_file() for p in ("imagination", protocol))
    if not taken and updates_done(checkpoint) != updates:
        fail(f"{checkpoint.parent} has trained {updates_done(checkpoint)} updates, not the gate's {updates}, "
             "and its gate was never evaluated; delete the run to redo it, or pass --gate-frames 0")
    seen = evaluate(checkpoint, data, "imagination", out, GATE_EPISODES)
    reward = evaluate(checkpoint, data, protocol, out)
    keys = ("recon_mse", "mean_frame_mse", "gen_mse", "latent_perplexity", "latent_classes")
    result = {**{k: seen.get(k) for k in keys}, **{k: v for k, v in reward.items() if "accuracy" in k or "auc" in k},
              "updates": updates}
    result["kl_rate"] = rate(checkpoint.parent / "tb", updates)
    result["sees"] = result["recon_mse"] < result["mean_frame_mse"] / 2
    result["uses_latent"] = result["kl_rate"] >= MIN_RATE
    return result


def rate(tb: Path, updates: int) -> float:
    """The posterior's rate at ``updates``: the mean logged ``kl`` (KL(q ‖ p) summed over the
    latent groups, nats per step) over the last tenth of the updates up to ``updates`` (0 when the
    run logged none there)."""
    from wmzoo.study.report import scalars

    window = [v for step, v in scalars(tb).get("kl", []) if updates - max(1, updates // 10) < step <= updates]
    return float(np.mean(window)) if window else 0.0


def indexed_episodes(data: Path, split: str, limit: int | None = None) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """``(index, episode)`` of the split's episodes in order, each file checked against the
    manifest by :func:`wmzoo.data.dataset.iter_episodes`; ``index`` is the episode's place in the
    dataset (``wmzoo data generate`` resets episode ``i`` with ``seed + i``)."""
    from wmzoo.data.dataset import Manifest, iter_episodes

    indices = [i for i, entry in sorted(Manifest.read(data).files.items()) if entry.split == split][:limit]
    return zip(indices, iter_episodes(data, split, limit), strict=True)


def context_length(data: Path) -> int:
    from wmzoo.data.dataset import Manifest

    return Manifest.read(data).context_length


def cue_rows(context: int) -> int:
    """Rows observed when the cue was last in view: the script starts at hallway cell ``width / 2``
    and reaches cell 0, in view of the cue's room, after ``width / 2`` moves (``context = 2 width − 1``)."""
    return (context + 1) // 4 + 1


def probe_rows(context: int, points: int = 7) -> list[int]:
    """Where the cue probe is read: from :func:`cue_rows` (the cue just seen) to the whole context,
    ``points`` rows evenly spaced (the probe's accuracy along them: how long a model keeps the cue)."""
    return sorted({int(round(r)) for r in np.linspace(cue_rows(context), context, points)})


def cue_probe(checkpoint: Path, data: Path, rows: Sequence[int] = (), train_episodes: int = 600,
              batch: int = 100) -> list[dict]:
    """Linear probes of the cue's colour, one from the features after each episode's first ``r``
    rows for every ``r`` in ``rows`` (default: the whole context; the training form's filter over
    them): multinomial logistic regression on standardised features of ``train_episodes`` train
    episodes (L2 1e-2), accuracy on the test split, beside the majority class's share. Each
    episode's cue is read from the env reset with its seed (the reset frame checked against the
    episode's first row). Probed after :func:`cue_rows` it asks whether the model saw the cue;
    after the context, whether it kept it. Each result is kept in
    ``<run>/evaluate-<updates>/cue_probe_<r>.json``; those not kept yet are computed in one pass
    over the episodes."""
    import torch

    from wmzoo.atomic import write_text_atomic
    from wmzoo.data.dataset import Manifest
    from wmzoo.envs.memory_tasks_2d import SQUARE_COLOURS
    from wmzoo.eval.rollout import load_agent
    from wmzoo.interfaces import Batch
    from wmzoo.registry import make_env

    manifest = Manifest.read(data)
    rows, seed = list(rows) or [manifest.context_length], manifest.args.seed
    paths = {r: checkpoint.parent / f"evaluate-{updates_done(checkpoint)}" / f"cue_probe_{r}.json" for r in rows}
    todo = [r for r in rows if not paths[r].is_file()]
    if todo:
        torch.manual_seed(0)  # observe_sequence samples the latents: the same features on every call
        wm = load_agent(checkpoint).world_model.eval()
        device = next(wm.parameters()).device
        env = make_env(manifest.env_info.name, size=manifest.args.size)  # the dataset's own width

        def features(episodes: list[dict[str, np.ndarray]]) -> list[torch.Tensor]:
            """Per row count of ``todo``: the features after that many rows, ``[len(episodes), F]``."""
            out = []
            for r in todo:
                fields = {k: torch.as_tensor(np.stack([e[k][:r] for e in episodes]))
                          for k in ("obs", "action", "reward", "terminal", "is_first")}
                with torch.no_grad():  # on the model's own device (a run trained on cuda stays there)
                    state = wm.observe_sequence(Batch(**fields).to(device)).state
                    out.append(wm.features(state).flatten(1).float().cpu())
            return out

        def labelled(split: str, limit: int | None = None) -> tuple[list[torch.Tensor], torch.Tensor]:
            """The split's features for each row count of ``todo``, ``batch`` episodes at a time, and cue colours."""
            out, labels, episodes = [], [], []
            for index, episode in indexed_episodes(data, split, limit):
                obs, _ = env.reset(seed=seed + index)
                if not np.array_equal(obs, episode["obs"][0]):
                    fail(f"{split} episode {index} of {data}: its first frame is not the env's reset with seed "
                         f"{seed + index}; the cue probe cannot label it")
                labels.append(SQUARE_COLOURS.index(env.unwrapped.cue))
                episodes.append(episode)
                if len(episodes) == batch:
                    out.append(features(episodes))
                    episodes = []
            if episodes:
                out.append(features(episodes))
            return [torch.cat(parts) for parts in zip(*out, strict=True)], torch.as_tensor(labels)

        xs_train, y_train = labelled("train", train_episodes)
        xs_test, y_test = labelled("test")
        for r, x_train, x_test in zip(todo, xs_train, xs_test, strict=True):
            result = _fit_probe(x_train, y_train, x_test, y_test, len(SQUARE_COLOURS))
            paths[r].parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(paths[r], json.dumps({**result, "context_rows": r}, indent=1) + "\n")
    return [json.loads(paths[r].read_text()) for r in rows]


def _fit_probe(x_train: torch.Tensor, y_train: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor,
               classes: int) -> dict:
    """Multinomial logistic regression (L2 1e-2, LBFGS) on standardised features: its accuracies."""
    import torch

    mean, std = x_train.mean(0), x_train.std(0).clamp(min=1e-6)
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    torch.manual_seed(0)
    probe = torch.nn.Linear(x_train.shape[1], classes)
    optimizer = torch.optim.LBFGS(probe.parameters(), max_iter=300, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(probe(x_train), y_train) + 1e-2 * probe.weight.square().sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        accuracy = float((probe(x_test).argmax(-1) == y_test).float().mean())
        train_accuracy = float((probe(x_train).argmax(-1) == y_train).float().mean())
    return {"cue_probe_accuracy": accuracy, "cue_probe_train_accuracy": train_accuracy,
            "majority_share": float(torch.bincount(y_test).max() / len(y_test)),
            "train_episodes": len(y_train), "test_episodes": len(y_test)}


def relabel(source: Path, target: Path) -> Path:
    """The memoryless control's dataset: ``source``'s episodes with the ending transition's reward
    1 when its move is *up* and 0 otherwise (every other reward stays 0), written as a dataset of
    its own (same splits, checksums, manifest naming its source). Reused when complete."""
    from wmzoo.data.dataset import Manifest, write_env_info
    from wmzoo.data.generate import write_episode_file

    if (target / "manifest.json").is_file() and Manifest.read(target).complete:
        return target
    manifest = Manifest.read(source)
    files = {}
    for split in (split for split, count in manifest.counts.items() if count):
        for index, data in indexed_episodes(source, split):
            ending = len(data["reward"]) - 2  # the last transition leaves the second-to-last row
            data["reward"] = np.zeros_like(data["reward"])
            data["reward"][ending] = control_reward(data)
            files[index] = write_episode_file(target, manifest.args, index, data)
        write_env_info(target / split, manifest.env_info)
    control = Manifest(manifest.args, manifest.policy, manifest.env_info, manifest.context_length,
                       manifest.query_length, files, {"relabelled_from": str(source.resolve()),
                                                      "reward": "the ending transition's: 1 when its move is up"})
    control.write(target)
    return target


def control_reward(episode: dict[str, np.ndarray]) -> float:
    """The memoryless control's reward of an episode's ending transition: 1 when its move is up."""
    return float(episode["action"][len(episode["reward"]) - 2] == UP)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _auc(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def gate_table(gates: dict[str, dict]) -> list[str]:
    lines = [
        "| backbone | updates | Recon. MSE | mean-frame MSE | sees (< ½ mean frame) | KL(q ‖ p) nats "
        f"| uses its latent (≥ {MIN_RATE:g}) | class perplexity | inference / imagination acc. | inference / imagination AUC |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for backbone, g in gates.items():
        lines.append(
            f"| {BACKBONES[backbone][0]} | {g['updates']} | {g['recon_mse']:.2f} | {g['mean_frame_mse']:.2f} "
            f"| {'yes' if g['sees'] else 'no'} | {g['kl_rate']:.2f} | {'yes' if g['uses_latent'] else 'no'} "
            f"| {g['latent_perplexity']:.2f} of {g['latent_classes']} "
            f"| {_pct(g.get('inference_accuracy'))} / {_pct(g.get('imagination_accuracy'))} "
            f"| {_auc(g.get('inference_auc'))} / {_auc(g.get('imagination_auc'))} |"
        )
    return lines


def one_seed_note(episodes: int) -> str:
    """What every interval of these reports rests on."""
    return (f"**One training seed per backbone (seed 0).** Every interval below is over the {episodes} test "
            "episodes of that one trained model (95 %; the episode is the unit): it bounds *these trained models* on "
            "this split and says nothing about training-seed variance, so no verdict here is about a backbone in "
            "general. A verdict is printed only where the interval clears the baseline (wmzoo.eval.verdicts).")


def readout_verdicts(r: dict, base: dict, episodes: int) -> dict[str, Verdict]:
    """The reward protocols' readouts against their baselines on the same episodes: each accuracy
    against the majority class's (95 % Wilson over ``episodes``: where an episode scores several
    transitions, treating it as one trial bounds their within-episode correlation), each AUC
    against 0.5 (Hanley-McNeil, counting at most ``episodes`` positives and negatives for the same reason)."""
    from wmzoo.eval.verdicts import auc_interval, interval_verdict, wilson_interval

    out = {}
    for name in ("inference", "imagination"):
        rate = r[f"{name}_accuracy"]
        out[f"{name}_accuracy"] = interval_verdict(*wilson_interval(rate * episodes, episodes),
                                                   base["majority_class_accuracy"], False,
                                                   f"95 % Wilson over {episodes} episodes", episodes)
        auc = r.get(f"{name}_auc")
        if auc is not None:
            counts = (min(base["positives"], episodes), min(base["negatives"], episodes))
            out[f"{name}_auc"] = interval_verdict(*auc_interval(auc, *counts), 0.5, False,
                                                  f"95 % Hanley-McNeil, {counts[0]} + {counts[1]} counted", episodes)
    if r.get("cue_probe_accuracy") is not None:
        out["cue_probe_accuracy"] = interval_verdict(
            *wilson_interval(r["cue_probe_accuracy"] * r["test_episodes"], r["test_episodes"]), r["majority_share"],
            False, f"95 % Wilson over {r['test_episodes']} episodes", r["test_episodes"])
    return out


def _cell(v: Verdict, percent: bool) -> str:
    scale, unit = (100, " %") if percent else (1, "")
    text = f"**{v.text}**" if v.holds else v.text
    return f"{scale * v.estimate:.{1 if percent else 3}f}{unit} [{scale * v.low:.{1 if percent else 3}f}, {scale * v.high:.{1 if percent else 3}f}]: {text}"


def verdict_table(results: dict[str, dict], base: dict, episodes: int, labels: dict[str, str]) -> list[str]:
    """Baselines as rows, then each backbone's readouts with their intervals and verdicts."""
    probe = any(r.get("cue_probe_accuracy") is not None for r in results.values())
    head = ["row", "inference acc.", "imagination acc.", "inference AUC", "imagination AUC"] + (
        ["cue probe after the context"] if probe else [])
    majority = f"{100 * base['majority_class_accuracy']:.1f} %"
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
             f"| baseline: majority class ({base['positives']} rewarded of {base['positives'] + base['negatives']} scored) "
             f"| {majority} | {majority} | 0.500 (chance) | 0.500 (chance) |" + (" majority colour |" if probe else "")]
    for backbone, r in results.items():
        v = readout_verdicts(r, base, episodes)
        cells = [_cell(v["inference_accuracy"], True), _cell(v["imagination_accuracy"], True),
                 *[_cell(v[k], False) if k in v else "–" for k in ("inference_auc", "imagination_auc")]]
        if probe:
            cells.append(f"{_cell(v['cue_probe_accuracy'], True)} (majority {_pct(r['majority_share'])})"
                         if "cue_probe_accuracy" in v else "–")
        lines.append(f"| {labels[backbone]} | " + " | ".join(cells) + " |")
    return lines


def image_baseline_table(readings: dict[str, dict], found: dict, episodes: int, labels: dict[str, str]) -> list[str]:
    """Recon. and Gen. MSE beside the imagination protocol's constant predictors on the same episodes;
    no verdict: the per-episode errors were not kept, so the models' rows have no interval."""
    lines = ["| row | Recon. MSE | Gen. MSE |", "|---|---|---|"]
    lines += [f"| baseline: {name.replace('_', ' ')} | {b['recon_mse']:.2f} | {b['gen_mse']:.2f} |"
              for name, b in found["baselines"].items()]
    lines += [f"| {labels[b]} | {r['recon_mse']:.2f} | {r['gen_mse']:.2f} |" for b, r in readings.items()]
    return lines + ["", f"Test split, the same {episodes} episodes for every row. No interval and no verdict: the "
                    "per-episode errors were not kept (the numbers are means), so whether a model's Gen. MSE is below "
                    "the constants' beyond episode noise cannot be computed from these files."]


def reward_table(results: dict[str, dict], frames: int, paper: bool = True) -> list[str]:
    lines = [
        "| backbone | training frames | updates × batch × length | inference acc. | imagination acc. "
        "| inference / imagination AUC | step form: inference / imagination acc. "
        "| cue probe: seen / after the context (majority) "
        + ("| paper (inference / imagination) |" if paper else "|"),
        "|---|---|---|---|---|---|---|---|" + ("---|" if paper else ""),
    ]
    for backbone, r in results.items():
        label, seq_len, _ = BACKBONES[backbone]
        updates, batch = budget(backbone, frames, 0)
        row = (f"| {label} | {updates * FRAMES_PER_UPDATE:,} | {updates} × {batch} × {seq_len} "
               f"| {_pct(r['inference_accuracy'])} | {_pct(r['imagination_accuracy'])} "
               f"| {_auc(r.get('inference_auc'))} / {_auc(r.get('imagination_auc'))} "
               f"| {_pct(r.get('step_inference_accuracy'))} / {_pct(r.get('step_imagination_accuracy'))} "
               f"| {_pct(r.get('cue_seen_probe_accuracy'))} / {_pct(r.get('cue_probe_accuracy'))} "
               f"({_pct(r.get('majority_share'))}) |")
        if paper and WIDTH == 100:
            row += f" {PAPER[label][0]:.1f} % / {PAPER[label][1]:.1f} % |"
        lines.append(row)
    return lines


def curves(workdir: Path, out: Path, name: str | None = None, title: str | None = None) -> list[Path]:
    """Learning curves of every run in ``workdir`` (reconstruction loss, reward loss and the
    posterior's rate by training frames), one plot each, ``out / f"{name}_{loss}_curve.png"``
    (``name`` default :data:`NAME`)."""
    from wmzoo.eval.plots import curves_plot
    from wmzoo.study.report import scalars

    name, title = name or NAME, title or f"Distracting Memory {WIDTH}"
    plots = []
    logged = {BACKBONES[b][0]: scalars(workdir / b / "tb") for b in BACKBONES}
    for tag, what in (("recon", "reconstruction loss"), ("reward", "reward loss"), ("kl", "KL(q ‖ p), nats")):
        series = {}
        for label, tags in logged.items():
            points = tags.get(tag, [])
            if points:
                steps, values = zip(*points)
                series[label] = (np.asarray(steps) * FRAMES_PER_UPDATE, np.asarray(values), None, None)
        if series:
            path = out / f"{name}_{tag}_curve.png"
            curves_plot(path, series, "training frames", what, f"{title}: {what}")
            plots.append(path)
    return plots


def keep_specs(workdir: Path, out: Path, name: str | None = None) -> list[Path]:
    """Copy each run's ``run.yaml`` beside the report (``out / f"{name}_{backbone}.run.yaml"``): the
    resolved spec every figure came from (``name`` default :data:`NAME`)."""
    name = name or NAME
    kept = []
    for backbone in BACKBONES:
        spec = workdir / backbone / "run.yaml"
        if spec.is_file():
            kept.append(out / f"{name}_{backbone}.run.yaml")
            kept[-1].write_text(spec.read_text())
    return kept


def stopped(gates: dict[str, dict], control: dict[str, dict], gate_frames: int, out: Path) -> None:
    """The report of a run stopped at the gate (``NAME.md``): its table and the control's."""
    lines = [f"Stopped at the gate, {gate_frames:,} training frames (test split; imagination protocol on "
             f"{GATE_EPISODES} episodes): a run failed it, so the budget was not spent.", "", *gate_table(gates)]
    if control:
        lines += ["", "The memoryless control (the ending's reward relabelled to the last move: 1 when it is up), "
                  f"{gate_frames:,} training frames:", "", *reward_table(control, gate_frames, paper=False)]
    (out / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def baselines(data: Path, control: bool) -> dict:
    """The baselines of the report on the test split of ``data`` (no model): the reward's base rate,
    the control's (its relabelled ending) when ``control``, and the imagination protocol's constant
    predictors on the gate's :data:`GATE_EPISODES` episodes."""
    from wmzoo.eval.memory import imagination_baselines, rate_baselines, reward_baselines

    found = {"reward": reward_baselines(data, None), "images": imagination_baselines(data, "test", GATE_EPISODES)}
    if control:
        endings = np.array([control_reward(e) for _, e in indexed_episodes(data, "test")]) > 0.5
        found["control"] = {**rate_baselines(endings), "episodes": len(endings)}
    return found


def report(results: dict[str, dict], frames: int, out: Path, gates: dict[str, dict] | None = None,
           control: dict[str, dict] | None = None, gate_frames: int = GATE_FRAMES, base: dict | None = None) -> None:
    """``NAME.md`` (the tables, and with ``base``, :func:`baselines`, the
    baselines and verdicts) and its figures."""
    labels = {b: BACKBONES[b][0] for b in BACKBONES}
    lines = reward_table(results, frames)
    if base:
        episodes = base["reward"]["episodes"]
        lines = [one_seed_note(episodes), "", *lines, "", "Baselines and verdicts (test split, the same "
                 f"{episodes} episodes, one scored ending each):", "", *verdict_table(results, base["reward"], episodes, labels),
                 "", "Per-episode predictions were not kept by these runs, so paired comparisons between the backbones "
                 "on the same episodes cannot be computed from these files (the evaluation keeps them now: "
                 "`per_episode` in reward.json)."]
    if gates:
        lines += ["", f"The gate, at {gate_frames:,} training frames (test split; imagination protocol on "
                  f"{GATE_EPISODES} episodes):", "", *gate_table(gates)]
        if base:
            lines += ["", *image_baseline_table(gates, base["images"], GATE_EPISODES, labels)]
    if control:
        lines += ["", f"The memoryless control (the ending's reward relabelled to the last move: 1 when it is up), "
                  f"{gate_frames:,} training frames:", "", *reward_table(control, gate_frames, paper=False)]
        if base and "control" in base:
            lines += ["", *verdict_table(control, base["control"], base["control"]["episodes"], labels)]
    (out / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    from wmzoo.eval.plots import interval_plot
    from wmzoo.eval.verdicts import wilson_interval

    rows = []
    for backbone, r in results.items():
        label = BACKBONES[backbone][0]
        for k, name in enumerate(("inference", "imagination")):
            rate, low, high = wilson_interval(r[f"{name}_accuracy"] * r["episodes"], r["episodes"])
            rows.append((f"{label} {name}", 100 * rate, 100 * low, 100 * high))
            if WIDTH == 100:
                rows.append((f"{label} {name}, paper", PAPER[label][k], PAPER[label][k], PAPER[label][k]))
    interval_plot(out / f"{NAME}.png", rows, "reward prediction accuracy (%), 95 % Wilson interval")
    cue_curves = {BACKBONES[b][0]: r["cue_probe_curve"] for b, r in results.items() if r.get("cue_probe_curve")}
    if cue_curves:
        from wmzoo.eval.plots import curves_plot

        series = {label: (np.asarray([r for r, _ in c]), 100 * np.asarray([a for _, a in c]), None, None)
                  for label, c in cue_curves.items()}
        curves_plot(out / f"{NAME}_cue_probe.png", series, "context rows observed",
                    "cue probe accuracy (%)", f"Distracting Memory {WIDTH}: the cue's colour read from the state")


def split(episodes: int) -> str:
    """``--split`` of the generated dataset: 200 validation and 200 test episodes, or the paper's
    tenths (8K / 1K / 1K of 10,000, appendix A) from 10,000 episodes on."""
    share = 0.1 if episodes >= 10_000 else 200 / episodes
    return f"{1 - 2 * share:.4f},{share:.4f},{share:.4f}"


def regenerate_test_split(env: str, data: Path, episodes: int) -> None:
    """The test split of the dataset :func:`main` generates, alone (the same files; deterministic)."""
    from wmzoo.data.generate import generate

    generate(env, episodes, data, size=40, seed=0, split=[float(x) for x in split(episodes).split(",")],
             only="test", log=lambda _: None)


def rebuild(out: Path, data: Path, episodes: int) -> None:
    """Rewrite ``NAME.md`` from the kept ``*.json`` of ``out`` with the baselines
    of the regenerated test split and the verdicts; the frames are read from the runs' ``run.yaml``."""
    regenerate_test_split(ENV, data, episodes)
    results = json.loads((out / f"{NAME}.json").read_text())
    gates = json.loads((out / f"{NAME}_gate.json").read_text())
    control_file = out / f"{NAME}_control.json"
    control = json.loads(control_file.read_text()) if control_file.is_file() else {}
    gate_frames = FRAMES_PER_UPDATE * next(iter(gates.values()))["updates"]
    report(results, kept_frames(out, NAME), out, gates, control, gate_frames, baselines(data, bool(control)))


def kept_frames(out: Path, name: str) -> int:
    """The training frames of the kept runs: their ``run.yaml``'s updates times :data:`FRAMES_PER_UPDATE`."""
    import yaml

    updates = {yaml.safe_load((out / f"{name}_{b}.run.yaml").read_text())["train"]["steps"] for b in BACKBONES}
    if len(updates) != 1:
        fail(f"the kept runs of {name} trained different numbers of updates: {sorted(updates)}")
    return FRAMES_PER_UPDATE * updates.pop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=100, help="hallway width: a registered distracting-memory-W "
                        "(100, 200, 400 in the paper; 8 and 20 shorter); the training segments scale with it (configure)")
    parser.add_argument("--workdir", type=Path, default=None, help="data and runs (default: runs/dm<width>)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a --set of every backbone's run, after the protocol's own (e.g. model.reward_scale=100, "
                        "a declared deviation)")
    parser.add_argument("--episodes", type=int, default=2400, help="episodes generated (2,000 / 200 / 200)")
    parser.add_argument("--frames", type=int, default=2_000_000, help="training frames per backbone")
    parser.add_argument("--gate-frames", type=int, default=GATE_FRAMES, help="training frames at the gate (0: no gate)")
    parser.add_argument("--past-gate", action="store_true", help="train on to --frames even when a run fails the gate")
    parser.add_argument("--control", action="store_true", help="also train the memoryless control (to the gate)")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="learning-rate warm-up (updates), every backbone")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--rebuild", action="store_true", help="rewrite the report from the kept JSON files in --out "
                        "with baselines and verdicts (the test split regenerated into --workdir; nothing trained)")
    args = parser.parse_args()
    configure(args.width)
    COMMON.extend(args.set)
    args.workdir = args.workdir or Path(f"runs/dm{args.width}")
    for backbone in BACKBONES:  # refuse a budget inside the warm-up before any work
        budget(backbone, args.frames, args.warmup)
        if args.gate_frames:
            budget(backbone, args.gate_frames, args.warmup)
    if args.gate_frames > args.frames:
        fail(f"--gate-frames {args.gate_frames} is beyond --frames {args.frames}")
    data = args.workdir / "data"
    if args.rebuild:
        rebuild(args.out, data, args.episodes)
        return
    if not (data / "manifest.json").is_file():
        wmzoo("data", "generate", "--env", ENV, "--episodes", str(args.episodes), "--out", str(data),
              "--size", "40", "--seed", "0", "--split", split(args.episodes))
    args.out.mkdir(parents=True, exist_ok=True)
    gates: dict[str, dict] = {}
    if args.gate_frames:
        for backbone in BACKBONES:
            checkpoint = train(args.workdir, data, backbone, args.gate_frames, args.warmup)
            gates[backbone] = gate(checkpoint, data, budget(backbone, args.gate_frames)[0])
        (args.out / f"{NAME}_gate.json").write_text(json.dumps(gates, indent=1) + "\n")
        print("\n".join(gate_table(gates)))
    control: dict[str, dict] = {}
    if args.control:
        control_data = relabel(data, args.workdir / "control-data")
        for backbone in BACKBONES:
            checkpoint = train(args.workdir, control_data, backbone, args.gate_frames or args.frames, args.warmup,
                               name=f"control-{backbone}")
            control[backbone] = evaluate(checkpoint, control_data)
        (args.out / f"{NAME}_control.json").write_text(json.dumps(control, indent=1) + "\n")
    failed = [BACKBONES[b][0] for b, g in gates.items() if not (g["sees"] and g["uses_latent"])]
    if failed and not args.past_gate:
        stopped(gates, control, args.gate_frames, args.out)
        curves(args.workdir, args.out)
        print(f"distracting_memory.py: {', '.join(failed)} failed the gate at {args.gate_frames:,} frames "
              "(table above); fix the learning before spending the budget, or pass --past-gate", file=sys.stderr)
        sys.exit(1)
    results = {}
    for backbone in BACKBONES:
        checkpoint = train(args.workdir, data, backbone, args.frames, args.warmup)
        rows = probe_rows(context_length(data))
        probes = cue_probe(checkpoint, data, rows)
        results[backbone] = {**evaluate(checkpoint, data), **probes[-1],
                             "cue_seen_probe_accuracy": probes[0]["cue_probe_accuracy"],
                             "cue_probe_curve": [(r, p["cue_probe_accuracy"]) for r, p in zip(rows, probes, strict=True)]}
    (args.out / f"{NAME}.json").write_text(json.dumps(results, indent=1) + "\n")
    report(results, args.frames, args.out, gates, control, args.gate_frames, baselines(data, bool(control)))
    curves(args.workdir, args.out)
    keep_specs(args.workdir, args.out)


if __name__ == "__main__":
    main()
