"""Dict observations on disk (issue 30): a replay chunk and a dataset of image + vector rows are
written, interrupted mid-write, resumed and read back identical; the files name each entry
(``obs.<name>``) and the pixel format is untouched (tests/data/test_pre_obs_spec_fixtures.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from wmzoo import EnvEntry, hookimpl
from wmzoo.data import Replay
from wmzoo.data import generate as gen
from wmzoo.data.dataset import Manifest, iter_episodes, recorded_env_info
from wmzoo.data.generate import generate
from wmzoo.data.store import ChunkName, read_chunk
from wmzoo.errors import WmzooError
from wmzoo.registry import default_registry


class DictEnv(gym.Env):
    """An 8x8 frame and a 3-vector that both follow the step count; 12-step episodes."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict({
            "image": spaces.Box(0, 255, (3, 8, 8), np.uint8),
            "state": spaces.Box(-np.inf, np.inf, (3,), np.float32),
        })
        self.action_space = spaces.Discrete(3)
        self.t = 0

    def _obs(self) -> dict:
        base = self.np_random.integers(0, 255)
        return {"image": np.full((3, 8, 8), (base + self.t) % 256, np.uint8),
                "state": np.asarray([self.t, -2.5 * self.t, base], np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action), False, self.t >= 12, {}


class DictEnvs:
    @hookimpl
    def wmzoo_envs(self) -> list[EnvEntry]:
        return [EnvEntry(name="fake-dict", make=lambda name, **_: DictEnv(), description="test dict env")]


@pytest.fixture(autouse=True)
def dict_env():
    plugin = DictEnvs()
    default_registry().register(plugin)
    yield
    default_registry().unregister(plugin)


def rows(n: int, seed: int = 0) -> list[tuple]:
    g = np.random.default_rng(seed)
    return [({"image": g.integers(0, 256, (3, 4, 4), dtype=np.uint8), "state": g.normal(size=5).astype(np.float32)},
             int(g.integers(3)), float(g.normal()), False, t % 7 == 0) for t in range(n)]


def on_disk(directory) -> dict[str, np.ndarray]:
    files = sorted(directory.glob("*.npz"), key=lambda p: ChunkName.parse(p.name).order)
    parts = [read_chunk(p, ChunkName.parse(p.name).rows)[0] for p in files]
    return {k: np.concatenate([d[k] for d in parts]) for k in parts[0]}


def test_a_dict_replay_written_interrupted_resumed_reads_back_identical(tmp_path, monkeypatch):
    import wmzoo.data.replay as replay_module

    data = rows(23)
    replay = Replay(tmp_path, capacity=1000, chunk_size=4)
    for row in data[:10]:  # two chunks written, two rows pending
        replay.add(0, *row)
    real_write = replay_module.write_chunk

    def killed(path, arrays):  # the process dies in the middle of the write: a torn temporary file
        path.with_name(path.name + ".tmp").write_bytes(b"PK\x03\x04 torn")
        raise KeyboardInterrupt

    monkeypatch.setattr(replay_module, "write_chunk", killed)
    with pytest.raises(KeyboardInterrupt):
        replay.flush()
    monkeypatch.setattr(replay_module, "write_chunk", real_write)
    assert len(list(tmp_path.glob("*.tmp"))) == 1
    # a new process resumes on the folder: the torn file is dropped, the 8 written rows load
    resumed = Replay(tmp_path, capacity=1000, chunk_size=4)
    assert len(resumed) == 8 and not list(tmp_path.glob("*.tmp"))
    for row in data[8:]:
        resumed.add(0, *row)
    resumed.flush()
    back = on_disk(tmp_path)
    assert sorted(back) == ["action", "is_first", "obs.image", "obs.state", "reward", "terminal"]
    np.testing.assert_array_equal(back["obs.image"], np.stack([r[0]["image"] for r in data]))
    np.testing.assert_array_equal(back["obs.state"], np.stack([r[0]["state"] for r in data]))
    assert back["obs.state"].dtype == np.float32
    np.testing.assert_array_equal(back["reward"], np.asarray([r[2] for r in data], np.float32))
    batch = Replay.load(tmp_path).sample(3, 5)
    assert set(batch.obs) == {"image", "state"} and batch.obs["state"].dtype == torch.float32
    assert tuple(batch.obs["image"].shape) == (3, 5, 3, 4, 4) and tuple(batch.obs["state"].shape) == (3, 5, 5)


def test_a_replay_refuses_a_row_with_other_entries(tmp_path):
    replay = Replay(tmp_path, capacity=100)
    replay.add(0, *rows(1)[0])
    obs = {"image": np.zeros((3, 4, 4), np.uint8)}
    with pytest.raises(ValueError, match=r"entries \['image'\] differ from the stored rows' \['image', 'state'\]"):
        replay.add(0, obs, 0, 0.0, False, False)


def test_a_dict_dataset_written_interrupted_resumed_reads_back_identical(tmp_path, monkeypatch):
    quiet = lambda *_: None  # noqa: E731
    generate("fake-dict", 6, tmp_path / "whole", size=8, seed=2, log=quiet)
    root, calls, original = tmp_path / "ds", {"n": 0}, gen.record_episode

    def record_then_die(env, seed):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return original(env, seed)

    monkeypatch.setattr(gen, "record_episode", record_then_die)
    with pytest.raises(WmzooError, match="interrupted after 3 of 6 episodes"):
        generate("fake-dict", 6, root, size=8, seed=2, log=quiet)
    monkeypatch.setattr(gen, "record_episode", original)
    whole = Manifest.read(tmp_path / "whole")
    (root / whole.files[3].file).with_suffix(".npz.tmp").write_bytes(b"PK\x03\x04 torn")  # killed mid-write
    generate("fake-dict", 6, root, size=8, seed=2, log=quiet)
    manifest = Manifest.read(root)
    assert [e.sha256 for _, e in sorted(manifest.files.items())] == [e.sha256 for _, e in sorted(whole.files.items())]
    assert not any(p.name.endswith(".tmp") for p in root.rglob("*"))
    assert manifest.env_info.obs_shape is None and manifest.env_info.describe_obs() == \
        "image uint8 [3, 8, 8], state float32 [3]"
    assert recorded_env_info(root / "train") == manifest.env_info
    a, b = list(iter_episodes(root, "train")), list(iter_episodes(tmp_path / "whole", "train"))
    assert len(a) == len(b) and a
    for x, y in zip(a, b):
        assert sorted(x) == sorted(y) and {"obs.image", "obs.state"} <= set(x)
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])
    first = a[0]
    assert first["obs.state"].dtype == np.float32 and first["obs.state"].shape == (13, 3)
    np.testing.assert_array_equal(first["obs.state"][:, 0], np.arange(13, dtype=np.float32))
    batch = Replay.load(root / "train").sample(2, 6)
    assert set(batch.obs) == {"image", "state"}


WRITER = """
import sys, numpy as np
from wmzoo.data import Replay
replay = Replay(sys.argv[1], capacity=10**9, chunk_size=16)
i = 0
while True:
    obs = {"image": np.full((3, 32, 32), i % 256, np.uint8), "state": np.asarray([i, -i], np.float32)}
    replay.add(0, obs, i % 3, float(i), False, i % 50 == 0)
    i += 1
    if i == 64:
        print("written", flush=True)
"""


def test_a_dict_replay_killed_by_sigkill_while_writing_resumes_with_every_whole_chunk(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "written"
    time.sleep(0.3)  # it goes on writing chunk after chunk
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = Replay(tmp_path, capacity=10**9, chunk_size=16)
    n = len(resumed)
    assert n >= 64 and n % 16 == 0 and not list(tmp_path.glob("*.tmp"))
    back = on_disk(tmp_path)  # every row the killed process finished, in order, intact
    np.testing.assert_array_equal(back["obs.state"][:, 0], np.arange(n, dtype=np.float32))
    np.testing.assert_array_equal(back["obs.image"][:, 0, 0, 0], np.arange(n) % 256)
    resumed.add(0, {"image": np.zeros((3, 32, 32), np.uint8), "state": np.zeros(2, np.float32)}, 0, 0.0, False, True)
    resumed.flush()
    assert len(Replay.load(tmp_path)) == n + 1
