"""GIF frames of any observation spec (issue 30): every entry drawn side by side."""

from __future__ import annotations

import numpy as np

from wmzoo.train.logger import obs_frames


def test_a_pixel_env_frames_are_its_images():
    images = np.random.default_rng(0).integers(0, 256, (5, 3, 8, 8), dtype=np.uint8)
    np.testing.assert_array_equal(obs_frames(images), images)


def test_vectors_are_bars_up_when_positive_down_when_negative_on_the_real_scale():
    real = {"state": np.asarray([[3.0, -3.0, 0.0]], np.float32)}
    frames = obs_frames(real, height=32)
    assert frames.shape == (1, 3, 32, 12) and frames.dtype == np.uint8
    column = frames[0, 0, :, 0], frames[0, 0, :, 4], frames[0, 0, :, 8]
    assert (column[0][:16] == 40).all() and (column[0][17:] == 255).all()  # full bar up (the largest)
    assert (column[1][16:] == 40).all() and (column[1][:16] == 255).all()  # full bar down
    assert (column[2] != 40).all()  # zero: no bar
    model = {"state": np.asarray([[1.5, 0.0, 0.0]], np.float32)}
    half = obs_frames(model, like=real, height=32)[0, 0, :, 0]
    assert 4 <= (half == 40).sum() <= 12  # symlog(1.5) / symlog(3) of the real scale, not its own


def test_entries_side_by_side_and_many_channels_in_colour():
    planes = np.zeros((2, 4, 10, 10), np.uint8)
    planes[:, 0, 0, 0] = 255
    planes[:, 3, 9, 9] = 255
    frames = obs_frames({"image": planes, "state": np.ones((2, 2), np.float32)}, height=8)
    assert frames.shape == (2, 3, 10, 10 + 2 + 8)
    assert not np.array_equal(frames[0, :, 0, 0], frames[0, :, 9, 9])  # two channels, two colours
    assert (frames[0, :, 5, 5] == 0).all()  # no channel set: black
