"""What a token backbone's tokenizer keeps of each image channel: for the frames of a run's replay,
the share of each channel's lit cells (> half of full scale) that survive encode -> decode, the
unlit cells it lights, and how many distinct tokens the frames use.

    python benchmarks/tokenizer_channels.py runs/lc-rem-minatar-breakout --frames 1000

Made for MinAtar (binary channels, one per object kind: a tokenizer that keeps only the static
bricks has learnt nothing the policy needs); any run of IRIS, REM or Δ-IRIS-style backbones whose
world model has a ``tokenizer`` with ``encode``/``decode`` and whose env is a pixel env works.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from wmzoo.errors import WmzooError
from wmzoo.eval.rollout import load_agent


def channel_survival(logdir: Path, frames: int) -> dict[str, object]:
    """``{"frames", "distinct_tokens", "channels": [{lit_per_frame, kept, false_lit_per_frame}]}``
    over the last ``frames`` frames of ``logdir``'s replay (newest chunks first)."""
    agent = load_agent(logdir / "checkpoint.safetensors")
    tokenizer = getattr(agent.world_model, "tokenizer", None)
    if tokenizer is None:
        raise WmzooError(f"{logdir}: the {agent.run.backbone} world model has no tokenizer")
    chunks, obs = sorted((logdir / "replay").glob("*.npz"), reverse=True), []
    for chunk in chunks:
        with np.load(chunk) as data:
            obs.insert(0, data["obs"])
        if sum(len(o) for o in obs) >= frames:
            break
    if not obs:
        raise WmzooError(f"{logdir}/replay: no replay chunk to read")
    x = torch.as_tensor(np.concatenate(obs)[-frames:])
    with torch.no_grad():
        tokens = tokenizer.encode(x)
        decoded = tokenizer.decode(tokens).float()
    lit, shown = x.float() > 127.5, decoded > (127.5 if decoded.max() > 2 else 0.5)
    channels = []
    for c in range(x.shape[1]):
        on = lit[:, c]
        channels.append({"lit_per_frame": round(float(on.sum((1, 2)).float().mean()), 3),
                         "kept": None if not on.any() else round(float(shown[:, c][on].float().mean()), 4),
                         "false_lit_per_frame": round(float((shown[:, c] & ~on).sum((1, 2)).float().mean()), 3)})
    return {"checkpoint": str(logdir / "checkpoint.safetensors"), "frames": int(x.shape[0]),
            "distinct_tokens": int(tokens.unique().numel()), "channels": channels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logdir", type=Path)
    parser.add_argument("--frames", type=int, default=1000, help="newest replay frames decoded (>= 1)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    try:
        result = channel_survival(args.logdir, args.frames)
    except (WmzooError, OSError, ValueError, KeyError) as exc:  # no run, a corrupt chunk, no 'obs' in it
        parser.exit(2, f"tokenizer_channels: error: {exc}\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
