"""Δ-IRIS's figure 5 at CPU scale: Δ-IRIS's K = 4 context-aware tokens against IRIS's K = 16
frame tokens, on the same frames after the same number of autoencoder updates.

Both autoencoders (their ``paper`` configs: Δ-IRIS's official Crafter autoencoder, IRIS's
appendix-A VQ-VAE) train on the same batches of transitions ``(x_t, a_t, x_{t+1})`` of a
generated dataset's train split (IRIS reads ``x_{t+1}`` alone, Δ-IRIS the whole transition), each
with its own optimizer as in training; then every transition of the test split is encoded and
decoded and the per-frame error of ``x_{t+1}`` is recorded: mean squared error over pixels and
channels in ``[0, 1]``. Reported: bits per frame (``K · log2 N``), mean, median, 99th percentile
and mean of the worst 1 % of frames, Δ-IRIS's error when decoding with a wrong previous frame (the
conditioning is used), seconds per update; a picture of each model's worst frames (true above,
reconstruction below; Δ-IRIS first, then IRIS)::

    wmzoo data generate --env crafter --episodes 120 --size 64 --out data/crafter
    python benchmarks/reconstruction.py --data data/crafter --updates 2000 --batch 16 \\
        --out benchmarks/results/reconstruction_crafter
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from wmzoo.atomic import write_text_atomic
from wmzoo.data.dataset import iter_episodes, recorded_env_info, training_dir
from wmzoo.errors import WmzooError
from wmzoo.nn.tokenizer import Tokenizer
from wmzoo.optim import Optimizer
from wmzoo.registry import world_model_spec


def transitions(root: str, split: str, limit: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x_t, a_t, x_{t+1})`` of every step inside an episode of ``split``."""
    xs, acts, nexts = [], [], []
    for ep in iter_episodes(root, split, limit):
        obs, action = ep["obs"], ep["action"]
        inside = ~ep["is_first"][1:]
        xs.append(obs[:-1][inside])
        acts.append(action[:-1][inside])
        nexts.append(obs[1:][inside])
    return np.concatenate(xs), np.concatenate(acts).astype(np.int64), np.concatenate(nexts)


@torch.no_grad()
def errors(model: str, net: torch.nn.Module, x: torch.Tensor, a: torch.Tensor, x1: torch.Tensor,
           batch: int, wrong: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame MSE of the reconstructions of ``x1`` and the reconstructions (uint8)."""
    out, recon = [], []
    g = torch.Generator().manual_seed(0)
    for i in range(0, len(x), batch):
        xb, ab, x1b = x[i : i + batch], a[i : i + batch], x1[i : i + batch]
        if model == "iris":
            r = net.decode(net.encode(x1b))
        else:
            tokens = net.encode(xb, ab, x1b)
            prev = xb[torch.randperm(len(xb), generator=g)] if wrong else xb
            r = net.decode(prev, ab, tokens)
        r = r.clamp(0, 1)
        out.append((r - x1b.float() / 255).pow(2).flatten(1).mean(1))
        recon.append((r * 255).round().to(torch.uint8))
    return torch.cat(out).numpy(), torch.cat(recon).numpy()


def summary(err: np.ndarray) -> dict[str, float]:
    worst = np.sort(err)[-max(1, len(err) // 100):]
    return {"mean": float(err.mean()), "median": float(np.median(err)), "p99": float(np.percentile(err, 99)),
            "worst_1pct_mean": float(worst.mean()), "max": float(err.max())}


def worst_picture(path: Path, true: np.ndarray, recons: dict[str, np.ndarray], errs: dict[str, np.ndarray], n: int = 8) -> None:
    """One band per model: its ``n`` worst frames, true above and reconstruction below."""
    c, h, w = true.shape[1:]
    bands = []
    for name, err in errs.items():
        idx = np.argsort(err)[-n:][::-1]
        rows = [np.concatenate(list(true[idx].transpose(0, 2, 3, 1)), 1),
                np.concatenate(list(recons[name][idx].transpose(0, 2, 3, 1)), 1)]
        bands.append(np.concatenate(rows, 0))
        bands.append(np.full((4, n * w, c), 255, np.uint8))
    image = Image.fromarray(np.concatenate(bands[:-1], 0))
    image.resize((image.width * 2, image.height * 2), Image.NEAREST).save(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a wmzoo data generate folder (64x64 frames)")
    p.add_argument("--updates", type=int, default=2000)
    p.add_argument("--batch", type=int, default=16, help="transitions per update (both models)")
    p.add_argument("--test-episodes", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help="folder for reconstruction.json and worst_frames.png")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    env = recorded_env_info(training_dir(args.data))
    if env is None:
        raise WmzooError(f"{args.data}: no env.json; generate it with wmzoo data generate")
    x, a, x1 = (torch.from_numpy(v) for v in transitions(args.data, "train", None))
    tx, ta, tx1 = (torch.from_numpy(v) for v in transitions(args.data, "test", args.test_episodes))

    from wmzoo_plugins.delta_iris import DeltaTokenizer
    delta_spec = world_model_spec("delta-iris", "paper").tokenizer
    iris_spec = world_model_spec("iris", "paper").tokenizer
    nets = {"delta-iris": DeltaTokenizer(delta_spec, env.obs_shape, env.num_actions),
            "iris": Tokenizer(iris_spec, env.obs_shape)}
    opts = {"delta-iris": Optimizer(nets["delta-iris"].parameters(), delta_spec.optim),
            "iris": Optimizer(nets["iris"].parameters(), iris_spec.optim)}
    bits = {"delta-iris": delta_spec.num_tokens * math.log2(delta_spec.codebook_size),
            "iris": iris_spec.tokens_per_side ** 2 * math.log2(iris_spec.vocab_size)}
    seconds = dict.fromkeys(nets, 0.0)
    g = torch.Generator().manual_seed(args.seed)
    for update in range(args.updates):
        pick = torch.randint(len(x), (args.batch,), generator=g)
        for name, net in nets.items():
            net.train()
            start = time.perf_counter()
            loss = net.loss(x1[pick])[0] if name == "iris" else net.loss(x[pick], a[pick], x1[pick])[0]
            opts[name].step(loss)
            seconds[name] += time.perf_counter() - start
        if (update + 1) % max(1, args.updates // 10) == 0:
            print(f"update {update + 1}/{args.updates}", flush=True)
    errs, recons = {}, {}
    for name, net in nets.items():
        net.eval()
        errs[name], recons[name] = errors(name, net, tx, ta, tx1, 64)
    wrong, _ = errors("delta-iris", nets["delta-iris"], tx, ta, tx1, 64, wrong=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "data": str(args.data), "env": env.name, "updates": args.updates, "batch": args.batch,
        "train_transitions": len(x), "test_transitions": len(tx),
        "error": "per-frame mean squared error of x_{t+1} over pixels and channels in [0, 1]",
        "models": {name: {"bits_per_frame": bits[name], "parameters": sum(p.numel() for p in nets[name].parameters()),
                          "seconds_per_update": seconds[name] / args.updates, **summary(errs[name])} for name in nets},
        "delta-iris_wrong_previous_frame": summary(wrong),
    }
    write_text_atomic(out / "reconstruction.json", json.dumps(result, indent=2) + "\n")
    worst_picture(out / "worst_frames.png", tx1.numpy(), recons, errs)
    print(json.dumps(result["models"], indent=2))


if __name__ == "__main__":
    try:
        main()
    except WmzooError as error:  # a missing, partial or corrupt dataset: one line, exit 2
        print(f"reconstruction: error: {error}", file=sys.stderr)
        sys.exit(2)
