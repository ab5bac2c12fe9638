"""A run's logger (scalars, images and GIFs to its trackers), and the real-vs-imagined GIF/PNG
writer."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from wmzoo import distributed
from wmzoo.atomic import atomic_path
from wmzoo.interfaces import obs_entries
from wmzoo.train.trackers import open_trackers


class Logger:
    """Averages scalars between writes and sends them, with images and GIFs, to every tracker of
    ``loggers`` (:mod:`wmzoo.train.trackers`; TensorBoard in ``<logdir>/tb`` by default).
    ``config`` (the resolved run spec) is what W&B and MLflow record with the run. Only rank 0 of
    a data-parallel run has trackers (:mod:`wmzoo.distributed`); another rank's logger drops all.
    ``resumed_at``: the step of the checkpoint a resumed run continues from (what an interrupted
    attempt logged after it is dropped where the tracker can, so no step is logged twice)."""

    def __init__(self, logdir: Path, loggers: Iterable[str] = ("tensorboard",),
                 config: Mapping[str, Any] | None = None, resumed_at: int | None = None) -> None:
        self.trackers = open_trackers(loggers if distributed.is_main() else (), logdir, config or {}, resumed_at)
        self.pending: dict[str, list[float]] = defaultdict(list)

    def add(self, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.pending[key].append(float(value))

    def set(self, metrics: dict[str, float]) -> None:
        """Scalars written at their latest value (running counts), not averaged."""
        for key, value in metrics.items():
            self.pending[key] = [float(value)]

    def write(self, step: int) -> dict[str, float]:
        means = {k: float(np.mean(v)) for k, v in self.pending.items() if v}
        if means:
            for tracker in self.trackers:
                tracker.scalars(means, step)
        self.pending.clear()
        return means

    def image(self, tag: str, image: np.ndarray, step: int) -> None:
        """``image`` uint8 ``[H, W, C]``."""
        for tracker in self.trackers:
            tracker.image(tag, image, step)

    def gif(self, tag: str, path: Path, step: int) -> None:
        """An animated GIF written at ``path``."""
        for tracker in self.trackers:
            tracker.gif(tag, path, step)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()


def side_by_side(real: np.ndarray, imagined: np.ndarray, context: int, scale: int = 2) -> list[np.ndarray]:
    """Frames ``[T, H, 2W + gap, C]``: real on the left, the model's on the right.

    ``real``/``imagined`` are uint8 ``[T, C, H, W]``. The first ``context`` model frames are
    reconstructions of observed frames; a red bar under the model frame marks imagined ones.
    """
    frames = []
    T, C, H, W = real.shape
    for t in range(T):
        canvas = np.full((H + 4, 2 * W + 4, 3), 255, np.uint8)
        canvas[:H, :W] = _rgb(real[t])
        canvas[:H, W + 4 :] = _rgb(imagined[t])
        if t >= context:
            canvas[H + 1 :, W + 4 :] = (220, 30, 30)
        frames.append(canvas.repeat(scale, 0).repeat(scale, 1))
    return frames


def obs_frames(obs: Any, like: Any = None, height: int = 32) -> np.ndarray:
    """Observations ``[T, ...]`` (one uint8 ``[T, C, H, W]`` array or a dict of entries) as RGB
    frames uint8 ``[T, 3, H', W']`` for GIFs: every entry side by side, images as they are (one
    channel grey, ``C`` other than 1 or 3 binary-ish planes in distinct colours, as MinAtar's),
    each vector entry a bar chart of its ``symlog`` values (zero in the middle) scaled by the
    largest of that entry in ``like`` (default: ``obs``), so the real frames and the model's,
    drawn with the real ones as ``like``, share one scale."""
    parts, like = [], obs_entries(obs if like is None else like)
    for key, value in obs_entries(obs).items():
        value = np.asarray(value)
        if value.ndim == 4:
            parts.append(_colour(value))
        else:
            top = float(np.abs(_symlog(np.asarray(like.get(key, value)))).max(initial=0.0)) or 1.0
            parts.append(_bars(value, top, max(height, max((p.shape[2] for p in parts), default=0))))
    rows = max(p.shape[2] for p in parts)
    padded = [np.pad(p, ((0, 0), (0, 0), (0, rows - p.shape[2]), (0, 2)), constant_values=255) for p in parts]
    return np.concatenate(padded, 3)[..., :-2]


def _colour(images: np.ndarray) -> np.ndarray:
    """uint8 ``[T, C, H, W]`` → ``[T, 3, H, W]``."""
    channels = images.shape[1]
    if channels == 3:
        return images
    if channels == 1:
        return np.repeat(images, 3, 1)
    hues = np.linspace(0, 1, channels, endpoint=False)
    palette = np.stack([0.5 + 0.5 * np.cos(2 * np.pi * (hues + k / 3)) for k in range(3)], 1)  # [C, 3]
    weights = images.astype(np.float32) / 255.0
    rgb = np.einsum("tchw,ck->tkhw", weights, palette) / np.maximum(weights.sum(1, keepdims=True), 1.0)
    return (rgb * 255).round().clip(0, 255).astype(np.uint8)


def _symlog(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.log1p(np.abs(x.astype(np.float64)))


def _bars(vectors: np.ndarray, top: float, height: int, width: int = 4) -> np.ndarray:
    """float ``[T, D]`` → uint8 ``[T, 3, height, D·width]``: one bar per value, up from the
    middle line when positive, down when negative (``symlog``, ``±top`` the full half height)."""
    level = np.round(np.clip(_symlog(vectors) / top, -1, 1) * (height // 2)).astype(int)  # [T, D]
    rows = np.arange(height)[None, :, None]
    mid = height // 2
    filled = ((rows < mid) & (rows >= mid - level[:, None, :])) | ((rows >= mid) & (rows < mid - level[:, None, :]))
    canvas = np.where(filled, 40, 255).astype(np.uint8)  # [T, height, D]
    canvas[:, mid] = np.minimum(canvas[:, mid], 160)
    return np.repeat(np.repeat(canvas[:, None], 3, 1), width, 3)


def _rgb(chw: np.ndarray) -> np.ndarray:
    hwc = np.transpose(chw, (1, 2, 0))
    return np.repeat(hwc, 3, axis=2) if hwc.shape[2] == 1 else hwc[..., :3]


def strip(real: np.ndarray, imagined: np.ndarray, context: int) -> np.ndarray:
    """One image ``[2H + 4, T·W, 3]``: real frames along the top row, the model's below; a red
    line above the model's imagined (not reconstructed) frames."""
    T, _, H, W = real.shape
    canvas = np.full((2 * H + 4, T * W, 3), 255, np.uint8)
    for t in range(T):
        canvas[:H, t * W : (t + 1) * W] = _rgb(real[t])
        canvas[H + 4 :, t * W : (t + 1) * W] = _rgb(imagined[t])
    canvas[H + 1 : H + 3, context * W :] = (220, 30, 30)
    return canvas


def write_rollout(path: str | Path, real: np.ndarray, imagined: np.ndarray, context: int, fps: int = 8) -> Path:
    """Real beside imagined frames, atomically: an animated GIF, or a PNG :func:`strip`."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".gif", ".png"):
        from wmzoo.errors import WmzooError

        raise WmzooError(f"--out {path}: the file must end in .gif or .png")
    with atomic_path(path) as tmp:
        if suffix == ".gif":
            images = [Image.fromarray(f) for f in side_by_side(real, imagined, context)]
            images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:],
                           duration=int(1000 / fps), loop=0)
        else:
            Image.fromarray(strip(real, imagined, context)).save(tmp, format="PNG")
    return path
