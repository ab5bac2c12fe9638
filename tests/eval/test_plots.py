"""The PNG line charts of :mod:`wmzoo.eval.plots`."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from wmzoo.eval.plots import line_plot


def test_line_plot_writes_a_png_of_the_given_size_and_skips_nan(tmp_path):
    path = line_plot(tmp_path / "sub" / "curve.png", [0, 1, 2, 3], [1.0, np.nan, 3.0, 2.0], "step", "error",
                     width=200, height=120)
    image = Image.open(path)
    assert image.format == "PNG" and image.size == (200, 120)
    assert (np.asarray(image.convert("RGB")) == (30, 90, 200)).all(-1).any()  # the curve is drawn
    assert sorted(p.name for p in path.parent.iterdir()) == ["curve.png"]


def test_curves_plot_draws_each_band_and_line(tmp_path):
    # Catches: a band not drawn (or drawn in the background colour), the y axis clipped at 0.
    from PIL import Image

    from wmzoo.eval.plots import curves_plot

    path = curves_plot(tmp_path / "c.png", {"a": ([0, 1, 2], [-1.0, 0.0, 1.0], [-2.0, -1.0, 0.0], [0.0, 1.0, 2.0]),
                                            "b": ([0, 2], [0.5, 0.5], None, None)}, "x", "y", title="t")
    image = np.asarray(Image.open(path).convert("RGB"))
    assert image.shape == (440, 720, 3)
    shaded = ((image != 255).any(axis=2) & (image != 0).any(axis=2)).sum()
    assert shaded > 5000  # the band of "a" covers a large area


def test_grid_animation_has_one_row_per_source_and_one_frame_per_step(tmp_path):
    # Catches: rows and time swapped, frames dropped, a bad suffix written anyway.
    from PIL import Image

    from wmzoo.errors import WmzooError
    from wmzoo.eval.plots import grid_animation

    real = np.zeros((5, 16, 16, 3), np.uint8)
    real[:, :8] = 255  # top half white
    model = np.zeros((5, 16, 16, 3), np.uint8) + (40 * np.arange(5, dtype=np.uint8))[:, None, None, None]
    path = grid_animation(tmp_path / "g.gif", [("real", real), ("m", model)])
    gif = Image.open(path)
    assert gif.n_frames == 5
    frame = np.asarray(gif.convert("RGB"))
    assert frame.shape[0] == 2 * (64 + 2)  # two rows, 16 px upscaled to 64
    left = frame.shape[1] - 64 - 2
    assert frame[10, left + 5].tolist() == [255, 255, 255] and frame[50, left + 5].tolist() == [0, 0, 0]
    assert frame[66 + 10, left + 5].tolist() == [0, 0, 0]  # the model row, at t = 0, is black
    gif.seek(4)
    assert np.asarray(gif.convert("RGB"))[66 + 10, left + 5].tolist() == [160, 160, 160]  # and at t = 4 grey
    with pytest.raises(WmzooError, match="gif or a .png"):
        grid_animation(tmp_path / "g.mp4", [("real", real)])


def test_clipped_bands_leave_the_axis_to_the_lines_and_say_so(tmp_path, monkeypatch):
    # Catches: an axis sized to a two-seed t interval (25 times the values' spread, every line
    # flattened), a band drawn past the plot's edge, bands cut without the label saying so
    from wmzoo.eval.plots import band_limits, curves_plot

    wide = {"a": ([1, 4, 9], [1.0, 0.5, 0.0], [-6.0, -5.0, -4.0], [7.0, 6.0, 5.0]), "b": ([1, 9], [0.2, 0.1], None, None)}
    low, high = band_limits(wide, {"random": -0.5})
    assert (low, high) == pytest.approx((-0.5 - 0.225, 1.0 + 0.225))  # lines and baseline, 15 % of 1.5 each side
    assert band_limits({"c": ([0, 1], [2.0, 2.0], None, None)}) == pytest.approx((1.7, 2.3))
    clipped = np.asarray(Image.open(curves_plot(tmp_path / "c.png", wide, "x", "y", hlines={"random": -0.5},
                                                clip_bands=True)).convert("RGB"))
    full = np.asarray(Image.open(curves_plot(tmp_path / "f.png", wide, "x", "y", hlines={"random": -0.5})).convert("RGB"))
    def line_rows(image):  # rows of "a"'s line inside the plot area (the legend's swatch left out)
        return np.nonzero((image[:, 72:525] == (30, 90, 200)).all(-1))[0]

    # the line from 1.0 to 0.0 spans most of the plot's height when clipped, a sliver when not
    assert np.ptp(line_rows(clipped)) > 4 * np.ptp(line_rows(full))
    from PIL import ImageDraw

    texts: list[str] = []
    monkeypatch.setattr(ImageDraw.ImageDraw, "text", lambda self, xy, text, *a, **k: texts.append(text))
    curves_plot(tmp_path / "t.png", wide, "x", "y", clip_bands=True)
    curves_plot(tmp_path / "n.png", {"b": wide["b"]}, "x", "z", clip_bands=True)  # no band: nothing cut
    assert "y (bands cut at the plot's edge)" in texts and "z" in texts
    band = (np.abs(clipped.astype(int) - (202, 216, 242)) <= 3).all(-1)  # "a"'s band: 60/255 of its colour
    rows = np.nonzero(band[:, 72:525].any(1))[0]
    assert rows.min() >= 30 and rows.max() <= 390 and rows.size > 300  # it fills the plot and stops at its edges


@pytest.mark.parametrize("value, span, text", [
    (12750.0, 24500.0, "12,750"),  # env steps: whole, with separators
    (-0.0124, 1.357, "-0.01"),     # a return axis: two decimals below the span's leading digit
    (0.0123, 0.01, "0.0123"),      # a small span keeps the digits that tell its ticks apart
    (-0.001, 1.357, "0.00"),       # no "-0.00"
])
def test_tick_labels_carry_the_precision_of_their_axis(value, span, text):
    """Catches: ticks in exponent notation on an env-step axis (``1.275e+04``), or at a precision
    that ignores the span (``-0.0124`` on a 1.4-wide axis, or 0.01 and 0.0123 printed alike)."""
    from wmzoo.eval.plots import tick_label

    assert tick_label(value, span) == text
