"""Figures of evaluation results as PNG/GIF files, drawn with PIL alone (matplotlib is not a
dependency): the memory metrics' curves (:func:`wmzoo.eval.memory.evaluate_memory`) and the
study report's learning curves, performance profiles, interval charts and imagination grids
(:mod:`wmzoo.study.report`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from wmzoo.atomic import atomic_path
from wmzoo.errors import WmzooError

COLOURS = [(30, 90, 200), (220, 80, 30), (40, 160, 60), (150, 60, 180), (200, 160, 20), (20, 170, 180),
           (120, 120, 120), (230, 40, 140)]
Series = tuple[Sequence[float], Sequence[float], Sequence[float] | None, Sequence[float] | None]


def tick_label(value: float, span: float) -> str:
    """A tick's text at the precision its axis's ``span`` needs (ticks stand a quarter of it
    apart): whole numbers with thousands separators from a span of 100 (env steps: ``12,750``,
    not ``1.275e+04``), else two decimals below the span's leading digit (``-0.01`` on a span of
    1.4, not ``-0.0124``)."""
    if span >= 100:
        return f"{value:,.0f}"
    decimals = min(8, max(0, 2 - math.floor(math.log10(span)))) if span > 0 else 3
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text  # no "-0.00"


class _Axes:
    """A plotting area with ticks on both axes; ``px(x, y)`` maps data to pixels."""

    def __init__(self, draw: ImageDraw.ImageDraw, box: tuple[int, int, int, int], xs: np.ndarray, ys: np.ndarray,
                 xlabel: str, ylabel: str, y_from_zero: bool = False) -> None:
        self.left, self.top, self.right, self.bottom = box
        finite_x, finite_y = xs[np.isfinite(xs)], ys[np.isfinite(ys)]
        self.x0 = float(finite_x.min()) if finite_x.size else 0.0
        self.x1 = float(finite_x.max()) if finite_x.size else 1.0
        self.y0 = float(finite_y.min()) if finite_y.size else 0.0
        self.y1 = float(finite_y.max()) if finite_y.size else 1.0
        if y_from_zero:
            self.y0 = min(self.y0, 0.0)
        if self.x1 <= self.x0:
            self.x1 = self.x0 + 1
        if self.y1 <= self.y0:
            self.y1 = self.y0 + (abs(self.y0) or 1.0)
        draw.line([(self.left, self.top), (self.left, self.bottom), (self.right, self.bottom)], fill="black")
        for i in range(5):
            vy = self.y0 + (self.y1 - self.y0) * i / 4
            _, py = self.px(self.x0, vy)
            draw.line([(self.left - 4, py), (self.left, py)], fill="black")
            draw.text((5, py - 6), tick_label(vy, self.y1 - self.y0), fill="black")
            vx = self.x0 + (self.x1 - self.x0) * i / 4
            px, _ = self.px(vx, self.y0)
            draw.line([(px, self.bottom), (px, self.bottom + 4)], fill="black")
            draw.text((px - 10, self.bottom + 8), tick_label(vx, self.x1 - self.x0), fill="black")
        width, height = draw.im.size
        draw.text(((self.left + self.right) // 2 - 60, height - 22), xlabel, fill="black")
        draw.text((self.left + 5, 2), ylabel, fill="black")

    def px(self, x: float, y: float) -> tuple[float, float]:
        return (self.left + (x - self.x0) / (self.x1 - self.x0) * (self.right - self.left),
                self.bottom - (y - self.y0) / (self.y1 - self.y0) * (self.bottom - self.top))


def _save(image: Image.Image, path: str | Path) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG")
    return path


def line_plot(path: str | Path, x: Sequence[float], y: Sequence[float], xlabel: str, ylabel: str,
              width: int = 640, height: int = 400) -> Path:
    """A line chart as a PNG (its y axis from 0 when the values are positive), written atomically."""
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    axes = _Axes(draw, (70, 20, width - 20, height - 50), xs, ys, xlabel, ylabel, y_from_zero=True)
    points = [axes.px(a, b) for a, b in zip(xs, ys) if np.isfinite(b)]
    if len(points) > 1:
        draw.line(points, fill=COLOURS[0], width=2)
    for px, py in points if len(points) <= 40 else []:
        draw.ellipse([px - 2, py - 2, px + 2, py + 2], fill=COLOURS[0])
    return _save(image, path)


def _dashed(draw: ImageDraw.ImageDraw, start: tuple[float, float], end: tuple[float, float],
            fill: tuple[int, ...], dash: int = 6) -> None:
    (x0, y0), (x1, y1) = start, end
    length = max(abs(x1 - x0), abs(y1 - y0), 1.0)
    for k in range(0, int(length), 2 * dash):
        a, b = k / length, min(k + dash, length) / length
        draw.line([(x0 + a * (x1 - x0), y0 + a * (y1 - y0)), (x0 + b * (x1 - x0), y0 + b * (y1 - y0))],
                  fill=fill, width=2)


BASELINE_COLOURS = [(0, 0, 0), (130, 130, 130), (90, 60, 30)]


def band_limits(series: Mapping[str, Series], hlines: Mapping[str, float] | None = None,
                pad: float = 0.15) -> tuple[float, float]:
    """The y range of the lines and baselines alone, widened by ``pad`` of its span on each side
    (bands ignored): a t interval over two seeds can be 25 times the spread of its values, and
    an axis sized to it flattens every line."""
    values = np.concatenate([np.asarray(s[1], float) for s in series.values()]
                            + [np.array(list((hlines or {}).values()), float)])
    values = values[np.isfinite(values)]
    if not values.size:
        return 0.0, 1.0
    low, high = float(values.min()), float(values.max())
    span = high - low or abs(high) or 1.0
    return low - pad * span, high + pad * span


def curves_plot(path: str | Path, series: Mapping[str, Series], xlabel: str, ylabel: str,
                title: str | None = None, width: int = 720, height: int = 440,
                hlines: Mapping[str, float] | None = None, vlines: Mapping[str, float] | None = None,
                clip_bands: bool = False) -> Path:
    """Labelled lines on one axis, each ``label -> (x, mean, low, high)`` with a shaded band
    between ``low`` and ``high`` (``None``: no band); a legend at the right. ``hlines`` /
    ``vlines``: baselines, ``label -> value``, drawn as dashed horizontal / vertical lines.
    ``clip_bands``: the y axis spans the lines and baselines (:func:`band_limits`), bands are cut
    at its edges, and the y label says so when one was."""
    if not series:
        raise WmzooError("a curves plot needs at least one series")
    hlines, vlines = dict(hlines or {}), dict(vlines or {})
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image, "RGBA")
    every_x = np.concatenate([np.asarray(s[0], float) for s in series.values()] + [np.array(list(vlines.values()))])
    every_y = np.concatenate([np.asarray(v, float) for s in series.values() for v in s[1:] if v is not None]
                             + [np.array(list(hlines.values()))])
    if clip_bands:
        y0, y1 = band_limits(series, hlines)
        bands = [np.asarray(v, float) for s in series.values() for v in s[2:] if v is not None]
        if any(((b < y0) | (b > y1)).any() for b in bands):
            ylabel += " (bands cut at the plot's edge)"
        every_y = np.array([y0, y1])
        series = {label: (x, mean, *(None if v is None else np.clip(np.asarray(v, float), y0, y1) for v in (low, high)))
                  for label, (x, mean, low, high) in series.items()}
    legend = 170
    axes = _Axes(draw, (70, 30, width - 20 - legend, height - 50), every_x, every_y, xlabel, ylabel)
    if title:
        draw.text((width // 2 - 4 * len(title), 14), title, fill="black")
    for k, (label, value) in enumerate([*hlines.items(), *vlines.items()]):
        colour = BASELINE_COLOURS[k % len(BASELINE_COLOURS)]
        if k < len(hlines):
            _dashed(draw, axes.px(axes.x0, value), axes.px(axes.x1, value), colour)
        else:
            _dashed(draw, axes.px(value, axes.y0), axes.px(value, axes.y1), colour)
        ly = 34 + 18 * (len(series) + k)
        _dashed(draw, (width - legend, ly + 6), (width - legend + 20, ly + 6), colour, dash=4)
        draw.text((width - legend + 26, ly), label, fill="black")
    for k, (label, (x, mean, low, high)) in enumerate(series.items()):
        colour = COLOURS[k % len(COLOURS)]
        xs = np.asarray(x, float)
        if low is not None and high is not None and len(xs) > 1:
            upper = [axes.px(a, b) for a, b in zip(xs, np.asarray(high, float))]
            lower = [axes.px(a, b) for a, b in zip(xs, np.asarray(low, float))]
            draw.polygon(upper + lower[::-1], fill=(*colour, 60))
        points = [axes.px(a, b) for a, b in zip(xs, np.asarray(mean, float)) if np.isfinite(b)]
        if len(points) > 1:
            draw.line(points, fill=colour, width=2)
        for px, py in points if len(points) <= 40 else []:
            draw.ellipse([px - 2, py - 2, px + 2, py + 2], fill=colour)
        ly = 34 + 18 * k
        draw.line([(width - legend, ly + 6), (width - legend + 20, ly + 6)], fill=colour, width=3)
        draw.text((width - legend + 26, ly), label, fill="black")
    return _save(image, path)


def profile_plot(path: str | Path, taus: Sequence[float], profiles: Mapping[str, tuple[Sequence[float], ...]],
                 xlabel: str = "score tau", ylabel: str = "fraction of runs > tau",
                 baselines: Mapping[str, float] | None = None) -> Path:
    """Performance profiles (Agarwal et al. 2021): ``label -> (fraction, low, high)`` over ``taus``;
    ``baselines`` (``label -> tau``) as vertical lines."""
    return curves_plot(path, {label: (taus, *p) for label, p in profiles.items()}, xlabel, ylabel,  # type: ignore[misc]
                       vlines=baselines)


def interval_plot(path: str | Path, rows: Sequence[tuple[str, float, float, float]], xlabel: str,
                  width: int = 640, baselines: Mapping[str, float] | None = None) -> Path:
    """One row per label: a dot at the estimate and a whisker from low to high; ``baselines``
    (``label -> value``) as dashed vertical lines named under the axis."""
    if not rows:
        raise WmzooError("an interval plot needs at least one row")
    baselines = dict(baselines or {})
    height = 70 + 30 * len(rows) + 16 * len(baselines)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    values = np.array([v for r in rows for v in r[1:]] + list(baselines.values()), float)
    left = 20 + 7 * max(len(r[0]) for r in rows)
    bottom = height - 50 - 16 * len(baselines)
    axes = _Axes(draw, (left, 10, width - 20, bottom), values, np.array([0.0, len(rows)]), xlabel, "")
    for k, (label, value) in enumerate(baselines.items()):
        colour = BASELINE_COLOURS[k % len(BASELINE_COLOURS)]
        _dashed(draw, axes.px(value, 0), axes.px(value, len(rows)), colour)
        ly = bottom + 24 + 16 * k  # between the tick labels and the axis label
        _dashed(draw, (left, ly + 6), (left + 20, ly + 6), colour, dash=4)
        draw.text((left + 26, ly), f"{label}: {value:.4g}", fill="black")
    for k, (label, estimate, low, high) in enumerate(rows):
        colour = COLOURS[k % len(COLOURS)]
        y = axes.px(0, len(rows) - k - 0.5)[1]
        draw.text((8, y - 6), label, fill="black")
        draw.line([(axes.px(low, 0)[0], y), (axes.px(high, 0)[0], y)], fill=colour, width=3)
        x = axes.px(estimate, 0)[0]
        draw.ellipse([x - 4, y - 4, x + 4, y + 4], fill=colour)
    return _save(image, path)


def grid_animation(path: str | Path, rows: Sequence[tuple[str, np.ndarray]], fps: int = 8,
                   min_side: int = 64) -> Path:
    """Frames of several sources side by side in time: ``rows`` of ``(label, uint8 [T, H, W, 3])``
    of equal shapes, one row each with its label at the left (the first row: the real frames).
    ``.gif``: an animation; ``.png``: every frame of every row in one image. Small frames are
    upscaled to at least ``min_side`` pixels."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".gif", ".png"):
        raise WmzooError(f"{path}: an imagination grid is a .gif or a .png")
    if not rows or len({r[1].shape for r in rows}) != 1 or rows[0][1].ndim != 4:
        raise WmzooError("an imagination grid needs rows of frames of one shape [T, H, W, 3]")
    T, H, W, _ = rows[0][1].shape
    scale = max(1, -(-min_side // H))
    h, w, label_w = H * scale, W * scale, 10 + 7 * max(len(r[0]) for r in rows)

    def canvas(columns: Sequence[int]) -> Image.Image:
        image = Image.new("RGB", (label_w + len(columns) * (w + 2), len(rows) * (h + 2)), "white")
        draw = ImageDraw.Draw(image)
        for i, (label, frames) in enumerate(rows):
            draw.text((4, i * (h + 2) + h // 2 - 6), label, fill="black")
            for j, t in enumerate(columns):
                tile = Image.fromarray(frames[t].repeat(scale, 0).repeat(scale, 1))
                image.paste(tile, (label_w + j * (w + 2), i * (h + 2)))
        return image

    with atomic_path(path) as tmp:
        if suffix == ".gif":
            images = [canvas([t]) for t in range(T)]
            images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:],
                           duration=int(1000 / fps), loop=0)
        else:
            canvas(list(range(T))).save(tmp, format="PNG")
    return path
