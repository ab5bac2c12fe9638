"""Experience storage: the replay buffer and its on-disk chunk files."""

from wmzoo.data.replay import Replay, ReplayStream

__all__ = ["Replay", "ReplayStream"]
