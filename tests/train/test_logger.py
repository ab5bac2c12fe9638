"""Real-vs-imagined artefacts: GIF frames and the PNG/TensorBoard strip place frames exactly."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from wmzoo.errors import WmzooError
from wmzoo.train.logger import strip, write_rollout


def _frames(T: int, value_of) -> np.ndarray:
    return np.stack([np.full((3, 8, 8), value_of(t), np.uint8) for t in range(T)])


def test_strip_layout():
    real, model = _frames(5, lambda t: 10 * t), _frames(5, lambda t: 100 + t)
    image = strip(real, model, context=2)
    assert image.shape == (2 * 8 + 4, 5 * 8, 3)
    for t in range(5):
        assert (image[:8, t * 8 : (t + 1) * 8] == 10 * t).all()
        assert (image[12:, t * 8 : (t + 1) * 8] == 100 + t).all()
    assert (image[9, 16:] == (220, 30, 30)).all() and (image[9, :16] == 255).all()


def test_gif_and_png(tmp_path):
    real, model = _frames(6, lambda t: 20 * t), _frames(6, lambda t: 200)
    gif = write_rollout(tmp_path / "a.gif", real, model, context=3)
    frames = Image.open(gif)
    assert frames.n_frames == 6 and frames.size == (2 * (2 * 8 + 4), 2 * (8 + 4))
    frames.seek(4)
    rgb = np.asarray(frames.convert("RGB"))
    assert (rgb[:16, :16] == 80).all()  # real frame 4, scaled x2, on the left
    png = np.asarray(Image.open(write_rollout(tmp_path / "a.png", real, model, context=3)))
    assert png.shape == (20, 48, 3)
    with pytest.raises(WmzooError, match="must end in .gif or .png"):
        write_rollout(tmp_path / "a.mp4", real, model, context=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gif", "a.png"]
