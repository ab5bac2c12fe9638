"""Demonstrations for imitation: a dataset split's episodes with their instructions, as batches.

The TokenWM paper (section 2) learns a language-conditioned policy from "a dataset of
demonstrations {(o_{1:T}, a_{1:T}, l)}"; ``wmzoo data generate`` records them on BabyAI levels
(the env's expert, each row's ``mission``). :class:`Demonstrations` holds a split in memory as one
stream of rows (episodes back to back, ``is_first`` at each start, as the replay has them) and
samples windows of it like the replay does, adding what the replay does not carry:

- ``condition`` ``[B, T, ...]``: each row's instruction as the policy reads it (:meth:`Demonstrations.read_with`):
  word ids of a :class:`Vocabulary` ``int64 [L]`` (0 pads; ``L`` = its ``max_words``; all padding
  where the data has no missions), or a pre-trained sentence embedding ``float32 [E]``;
- ``acted`` ``bool [B, T]``: the row has a demonstrated action. An episode's last row holds the final
  observation with a zero action (:mod:`wmzoo.interfaces`), which is no demonstration.

Everything is read through :func:`wmzoo.data.dataset.iter_episodes`, so each file is checked
against its manifest checksum before it is used.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from wmzoo.data.dataset import iter_episodes
from wmzoo.data.store import row_fields, split_row
from wmzoo.errors import WmzooError
from wmzoo.interfaces import Batch

PAD, UNKNOWN = 0, 1  # word ids every vocabulary reserves


def words(text: str) -> list[str]:
    """An instruction's words: lower case, split at anything that is not a letter or digit."""
    return re.findall(r"[a-z0-9]+", text.lower())


@dataclass(frozen=True)
class Vocabulary:
    """Word ids of the instructions: ``words[i]`` has id ``i + 2`` (0 pads, 1 is an unknown word).
    Built from a training split, saved with the policy's spec, so evaluation reads missions the
    same way."""

    words: tuple[str, ...]
    max_words: int

    @staticmethod
    def build(missions: list[str], max_words: int) -> Vocabulary:
        """Every word of ``missions`` (sorted); one line if a mission is longer than ``max_words``."""
        longest = max((len(words(m)) for m in missions), default=0)
        if longest > max_words:
            raise WmzooError(f"a mission has {longest} words, more than policy.max_words={max_words}; "
                             f"pass --set policy.max_words={longest}")
        return Vocabulary(tuple(sorted({w for m in missions for w in words(m)})), max_words)

    def encode(self, mission: str) -> np.ndarray:
        """``int64 [max_words]``: the mission's word ids, padded with 0; words beyond
        ``max_words`` are cut (a mission of the training data never is, see :meth:`build`)."""
        index = {w: i + 2 for i, w in enumerate(self.words)}
        ids = [index.get(w, UNKNOWN) for w in words(mission)][: self.max_words]
        return np.asarray(ids + [PAD] * (self.max_words - len(ids)), np.int64)


class Demonstrations:
    """A split of a dataset in memory, sampled as windows of ``T`` rows (see the module docstring)."""

    def __init__(self, root: str | Path, split: str = "train") -> None:
        episodes = list(iter_episodes(root, split))
        self.missions = [str(e["mission"][0]) if "mission" in e else "" for e in episodes]
        self.has_missions = any(self.missions)
        self.rows = {k: np.concatenate([e[k] for e in episodes]) for k in row_fields(episodes[0])}
        self.lengths = [len(e["reward"]) for e in episodes]
        self.acted = np.concatenate([np.arange(n) < n - 1 for n in self.lengths])
        self.condition: np.ndarray | None = None  # [rows, ...] after read_with
        self.generator = np.random.default_rng(0)

    def seed(self, seed: int) -> None:
        """Where windows are sampled from: a run seeds it with ``run.seed + updates done``."""
        self.generator = np.random.default_rng(seed)

    @property
    def actions(self) -> np.ndarray:
        """The demonstrated actions (the rows with one)."""
        return self.rows["action"][self.acted]

    def read_with(self, encode: Callable[[str], np.ndarray]) -> None:
        """Give every row its episode's mission as ``encode`` reads it (the ``condition``
        :meth:`sample` returns): e.g. a :class:`Vocabulary`'s ``encode`` or a policy's
        ``encode_mission``. Each distinct mission is encoded once."""
        codes = {m: encode(m) for m in dict.fromkeys(self.missions)}
        self.condition = np.concatenate([np.repeat(codes[m][None], n, 0) for m, n in zip(self.missions, self.lengths)])

    def __len__(self) -> int:
        return len(self.acted)

    def sample(self, batch_size: int, seq_len: int) -> tuple[Batch, Tensor, Tensor]:
        """``(batch, condition [B, T, L], acted [B, T])``: ``batch_size`` windows of ``seq_len``
        rows starting uniformly at random (a window may run into the next episode)."""
        if seq_len > len(self):
            raise WmzooError(f"windows of {seq_len} rows do not fit the demonstrations' {len(self)} rows; "
                             "record more episodes or lower model.seq_len")
        starts = self.generator.integers(0, len(self) - seq_len + 1, batch_size)
        index = starts[:, None] + np.arange(seq_len)
        if self.condition is None:
            raise RuntimeError("Demonstrations.read_with(encode) must come before sample()")
        batch = Batch(**split_row({k: torch.as_tensor(v[index]) for k, v in self.rows.items()}))
        return batch, torch.as_tensor(self.condition[index]), torch.as_tensor(self.acted[index])
