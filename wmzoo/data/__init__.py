"""Experience storage: the replay buffer, its on-disk chunk files, and offline datasets."""

from wmzoo.data.replay import Replay, ReplayStream

__all__ = ["Replay", "ReplayStream"]
