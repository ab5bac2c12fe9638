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
