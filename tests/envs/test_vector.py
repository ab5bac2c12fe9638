"""Vectorised collection: the rows written through sync and async vector envs equal those of a
plain per-env loop (same seeds, random actions), in wmzoo's row convention."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("minigrid")

from wmzoo.envs.vector import action_samplers, make_vector_env, vector_env_info  # noqa: E402
from wmzoo.errors import UnknownNameError  # noqa: E402
from wmzoo.registry import make_env  # noqa: E402
from wmzoo.train.collector import Collector  # noqa: E402

ENV, N, SEED, STEPS = "minigrid-empty-5x5", 2, 5, 230  # random episodes end within 100 steps


class RandomAgent:
    """The part of Agent the collector reads, acting only with the forced (random) actions."""

    policy = SimpleNamespace(spec=SimpleNamespace(epsilon=0.0))

    def reset_acting(self) -> None:
        pass

    def act(self, obs, is_first, sample=True, actions=None, override=None):
        assert actions is not None and override is None and len(obs) == len(is_first) == len(actions)
        return actions


class Rows:
    """Records replay rows per worker."""

    def __init__(self) -> None:
        self.rows: dict[int, list[tuple]] = defaultdict(list)

    def add(self, worker, obs, action, reward, terminal, is_first) -> None:
        self.rows[worker].append((np.array(obs), int(action), float(reward), bool(terminal), bool(is_first)))


def _reference_rows() -> dict[int, list[tuple]]:
    """The single-process loop written out: step, store, on episode end store the final
    observation (zero action and reward, not terminal) and reset."""
    rows = Rows()
    envs = [make_env(ENV, seed=SEED + i) for i in range(N)]
    spaces = []
    for i, env in enumerate(envs):
        space = env.action_space
        space.seed(SEED + i)
        spaces.append(space)
    obs = [env.reset(seed=SEED + i)[0] for i, env in enumerate(envs)]
    first = [True] * N
    for _ in range(STEPS):
        actions = [space.sample() for space in spaces]
        for i, env in enumerate(envs):
            nxt, reward, terminated, truncated, _ = env.step(actions[i])
            rows.add(i, obs[i], actions[i], reward, terminated, first[i])
            first[i] = False
            if terminated or truncated:
                rows.add(i, nxt, 0, 0.0, False, False)
                nxt, _ = env.reset()
                first[i] = True
            obs[i] = nxt
    return rows.rows


def _collected_rows(mode: str) -> tuple[dict[int, list[tuple]], int]:
    rows = Rows()
    envs = make_vector_env(ENV, N, seed=SEED, mode=mode)
    try:
        collector = Collector(envs, RandomAgent(), rows, seed=SEED)
        ended = sum(len(collector.step(random=True)) for _ in range(STEPS))
    finally:
        envs.close()
    return rows.rows, ended


@pytest.fixture(scope="module")
def reference() -> dict[int, list[tuple]]:
    return _reference_rows()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_rows_equal_single_process_rows(reference, mode):
    rows, ended = _collected_rows(mode)
    assert ended >= N  # several episodes ended, so autoreset was exercised
    assert sorted(rows) == sorted(reference) == list(range(N))
    for i in range(N):
        assert len(rows[i]) == len(reference[i]) == STEPS + sum(r[4] for r in rows[i]) - 1
        for got, want in zip(rows[i], reference[i]):
            assert np.array_equal(got[0], want[0]) and got[1:] == want[1:]


def test_row_convention_at_episode_boundaries(reference):
    """Final observation row (zero action/reward, not terminal), then an is_first row."""
    for stream in reference.values():
        firsts = [t for t, row in enumerate(stream) if row[4]]
        assert firsts[0] == 0 and len(firsts) >= 2
        for t in firsts[1:]:
            final = stream[t - 1]
            assert final[1:] == (0, 0.0, False, False)
            assert not np.array_equal(final[0], stream[t][0])  # the last frame, not the next reset


def test_vector_env_info_and_errors():
    envs = make_vector_env(ENV, 2, seed=0, mode="sync")
    info = vector_env_info(envs, ENV)
    assert info.obs_shape == (3, 64, 64) and info.num_actions == 7 and info.discrete
    a = [s.sample() for s in action_samplers(envs, 3)]
    b = [s.sample() for s in action_samplers(envs, 3)]
    assert a == b
    envs.close()
    with pytest.raises(UnknownNameError):
        make_vector_env("minigrid-nonexistent", 2, mode="async")
