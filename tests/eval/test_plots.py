"""The PNG line charts of :mod:`wmzoo.eval.plots`."""

from __future__ import annotations

import numpy as np
from PIL import Image

from wmzoo.eval.plots import line_plot


def test_line_plot_writes_a_png_of_the_given_size_and_skips_nan(tmp_path):
    path = line_plot(tmp_path / "sub" / "curve.png", [0, 1, 2, 3], [1.0, np.nan, 3.0, 2.0], "step", "error",
                     width=200, height=120)
    image = Image.open(path)
    assert image.format == "PNG" and image.size == (200, 120)
    assert (np.asarray(image.convert("RGB")) == (30, 90, 200)).all(-1).any()  # the curve is drawn
    assert sorted(p.name for p in path.parent.iterdir()) == ["curve.png"]
