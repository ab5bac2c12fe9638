"""How a dataset's episodes are divided into train/val/test splits and named as streams.

The s4wm paper splits each 2D task's 10K episodes 8K/1K/1K and each 3D task's 30K episodes
28K/1K/1K (appendix A). Episodes are numbered in generation order; the first ``counts["train"]``
are the train split, then val, then test, and each split's episodes form one replay stream whose
id is a function of the dataset's arguments (so files are reproducible).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from wmzoo.errors import WmzooError

SPLITS = ("train", "val", "test")
PAPER_SPLIT = (0.8, 0.1, 0.1)
"""Appendix A: 8K/1K/1K of 10K episodes for the 2D tasks."""


def parse_split(text: str) -> tuple[float, float, float]:
    """``"0.8,0.1,0.1"`` or ``"28,1,1"`` -> the train/val/test fractions (normalised to sum 1);
    one-line error when malformed."""
    try:
        parts = tuple(float(p) for p in text.split(","))
    except ValueError:
        parts = ()
    return normalise_split(parts, text)


def normalise_split(parts: Sequence[float], text: str | None = None) -> tuple[float, float, float]:
    """Three non-negative train/val/test weights (train > 0) as fractions summing to 1."""
    text = ",".join(map(str, parts)) if text is None else text
    if len(parts) != 3 or not all(np.isfinite(parts)) or min(parts) < 0 or parts[0] <= 0:
        raise WmzooError(
            f"--split {text}: expected three non-negative numbers train,val,test with train > 0, "
            "e.g. 0.8,0.1,0.1 or 28,1,1"
        )
    total = sum(parts)
    return tuple(p / total for p in parts)  # type: ignore[return-value]


def split_counts(episodes: int, split: Sequence[float]) -> dict[str, int]:
    """Episodes per split: val and test get ``split * episodes`` rounded half up, train the rest
    (10K at 0.8,0.1,0.1 -> 8000/1000/1000, the paper's sizes)."""
    val, test = (int(np.floor(episodes * f + 0.5)) for f in split[1:])
    while val + test >= episodes and val + test > 0:  # keep at least one training episode
        if test >= val:
            test -= 1
        else:
            val -= 1
    return {"train": episodes - val - test, "val": val, "test": test}


def split_of(index: int, counts: dict[str, int]) -> tuple[str, int]:
    """The split of episode ``index`` and its place in it: train first, then val, then test."""
    for name in SPLITS:
        if index < counts[name]:
            return name, index
        index -= counts[name]
    raise IndexError(index)


def stream_id(env: str, seed: int, split: str) -> str:
    """The split's stream id (32 hex digits), a function of the arguments so files are
    reproducible."""
    return hashlib.md5(f"{env}|{seed}|{split}".encode()).hexdigest()
