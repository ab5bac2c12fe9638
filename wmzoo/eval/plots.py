"""Figures of evaluation results as PNG files, drawn with PIL alone (matplotlib is not a
dependency): the memory metrics' curves (:func:`wmzoo.eval.memory.evaluate_memory`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from wmzoo.atomic import atomic_path


def line_plot(path: str | Path, x: Sequence[float], y: Sequence[float], xlabel: str, ylabel: str,
              width: int = 640, height: int = 400) -> Path:
    """A line chart as a PNG (PIL only; matplotlib is not a dependency), written atomically."""
    path = Path(path)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    left, right, top, bottom = 70, width - 20, 20, height - 50
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    finite = ys[np.isfinite(ys)]
    y_max = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    x_min, x_max = float(xs.min()), float(xs.max()) if xs.max() > xs.min() else float(xs.min()) + 1

    def to_px(a: float, b: float) -> tuple[float, float]:
        return (left + (a - x_min) / (x_max - x_min) * (right - left), bottom - b / y_max * (bottom - top))

    draw.line([(left, top), (left, bottom), (right, bottom)], fill="black")
    for i in range(5):
        value = y_max * i / 4
        _, py = to_px(x_min, value)
        draw.line([(left - 4, py), (left, py)], fill="black")
        draw.text((5, py - 6), f"{value:.3g}", fill="black")
        vx = x_min + (x_max - x_min) * i / 4
        px, _ = to_px(vx, 0)
        draw.line([(px, bottom), (px, bottom + 4)], fill="black")
        draw.text((px - 10, bottom + 8), f"{vx:.4g}", fill="black")
    points = [to_px(a, b) for a, b in zip(xs, ys) if np.isfinite(b)]
    if len(points) > 1:
        draw.line(points, fill=(30, 90, 200), width=2)
    for px, py in points if len(points) <= 40 else []:
        draw.ellipse([px - 2, py - 2, px + 2, py + 2], fill=(30, 90, 200))
    draw.text(((left + right) // 2 - 60, height - 22), xlabel, fill="black")
    draw.text((left + 5, 2), ylabel, fill="black")
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG")
    return path
