"""Vector memory benchmarks (issue 31): POPGym (``popgym-*``) and BSuite's memory experiments
(``bsuite-memory-len-*``, ``bsuite-discounting-chain-*``), each checked against its package's
own env stepped directly. Every test says the wiring bug it catches."""

from __future__ import annotations

from importlib.util import find_spec

import gymnasium as gym
import numpy as np
import pytest

from wmzoo.cli import main
from wmzoo.data.dataset import Manifest, iter_episodes
from wmzoo.envs.plugin import BSUITE_DISCOUNTING_CHAIN_IDS, BSUITE_MEMORY_LENGTHS, POPGYM_TASKS
from wmzoo.errors import UnknownNameError, WmzooError
from wmzoo.interfaces import ObsEntry
from wmzoo.registry import env_info, make_env

needs_popgym = pytest.mark.skipif(find_spec("popgym") is None, reason='needs pip install "wmzoo[popgym]"')
needs_bsuite = pytest.mark.skipif(find_spec("bsuite") is None, reason='needs pip install "wmzoo[bsuite]"')

POPGYM_NAMES = [f"popgym-{t}-{d}{full}" for t in POPGYM_TASKS for d in ("easy", "medium", "hard") for full in ("", "-full")]
BSUITE_NAMES = [f"bsuite-memory-len-{n}" for n in BSUITE_MEMORY_LENGTHS] + [
    f"bsuite-discounting-chain-{i}" for i in BSUITE_DISCOUNTING_CHAIN_IDS]


def _rollout(env: gym.Env, steps: int, seed: int = 0, **reset) -> list:
    """Observations, rewards and ends of ``steps`` seeded random actions (resetting after an end)."""
    env.action_space.seed(seed)
    obs, _ = env.reset(**reset)
    rows = [obs]
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        rows.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            rows.append(env.reset()[0])
    return rows


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        str(x) == str(y) if not isinstance(x, dict) else all(np.array_equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b))


def _check_contract(name: str) -> None:
    """The env contract of ``EnvEntry`` for a vector env: the spec env_info reads is what reset and
    step return (float32 vectors of that shape), ``make(name, seed=s).reset()`` equals
    ``make(name).reset(seed=s)``, and one seed gives one episode stream."""
    env = make_env(name, seed=3)
    info = env_info(env, name)
    assert info.obs_shape is None and not info.pixel and len(info.obs_space) == 1
    ((key, entry),) = info.obs_space
    assert entry.kind == "vector" and entry.dtype == "float32"
    first = env.reset()[0]
    assert set(first) == {key} and first[key].dtype == np.float32 and first[key].shape == entry.shape
    np.testing.assert_array_equal(first[key], make_env(name).reset(seed=3)[0][key])
    for row in _rollout(make_env(name, seed=3), 12, seed=1)[1:]:
        obs = row if isinstance(row, dict) else row[0]
        assert obs[key].dtype == np.float32 and obs[key].shape == entry.shape
        if not isinstance(row, dict):
            assert isinstance(float(row[1]), float) and isinstance(row[2], bool) and isinstance(row[3], bool)
    assert _same(_rollout(make_env(name, seed=5), 12), _rollout(make_env(name, seed=5), 12))


@needs_popgym
@pytest.mark.parametrize("name", POPGYM_NAMES)
def test_popgym_env_contract(name):
    """Catches: a task whose spec and observations disagree (a flattening that changes length
    mid-episode), a non-float32 entry, make's seed ignored, unseeded noise or decks."""
    _check_contract(name)


@needs_bsuite
@pytest.mark.parametrize("name", BSUITE_NAMES)
def test_bsuite_env_contract(name):
    """Catches the same for every BSuite setting (e.g. BSuite's (1, 3) array not flattened)."""
    _check_contract(name)


@needs_popgym
def test_popgym_observations_are_one_hots_of_popgyms():
    """Catches: a one-hot at the wrong index, the parts of a Tuple (Autoencode's mode, suit) or a
    MultiDiscrete (CountRecall's dealt card, query) swapped or merged. The expected vectors are
    built by hand from POPGym's raw observations, not by the flatten under test."""
    import popgym.envs as P

    cases = [("repeat-previous-easy", P.RepeatPreviousEasy, lambda o: np.eye(4)[o]),
             ("autoencode-easy", P.AutoencodeEasy, lambda o: np.r_[np.eye(2)[o[0]], np.eye(4)[o[1]]]),
             ("count-recall-medium", P.CountRecallMedium, lambda o: np.r_[np.eye(4)[o[0]], np.eye(4)[o[1]]])]
    for task, cls, one_hot in cases:
        env, raw = make_env(f"popgym-{task}"), cls()
        obs, raw_obs = env.reset(seed=7)[0]["observation"], raw.reset(seed=7)[0]
        np.testing.assert_array_equal(obs, one_hot(raw_obs))
        for t in range(40):
            obs = env.step(t % raw.action_space.n)[0]["observation"]
            np.testing.assert_array_equal(obs, one_hot(raw.step(t % raw.action_space.n)[0]))
    env = make_env("popgym-repeat-first-easy")
    assert env.reset(seed=0)[0]["observation"].tolist() == [0, 0, 0, 1]  # this seed's first card: suit 3


@needs_popgym
@pytest.mark.parametrize("task, cls, to_raw", [
    ("stateless-cartpole-easy", "PositionOnlyCartPoleEasy", int),
    ("noisy-stateless-cartpole-hard", "NoisyPositionOnlyCartPoleHard", int),
    ("battleship-easy", "BattleshipEasy", lambda a: np.unravel_index(a, (8, 8))),  # MultiDiscrete raveled
    ("stateless-pendulum-medium", "PositionOnlyPendulumMedium", lambda a: 2.0 * np.asarray(a)),  # [-1, 1] -> [-2, 2]
    ("count-recall-easy", "CountRecallEasy", int)])
def test_popgym_rewards_and_ends_pass_through_unchanged(task, cls, to_raw):
    """Catches: rewards rescaled or re-typed, terminated/truncated swapped or lost, a MultiDiscrete
    action unraveled in the wrong order, a Box action not rescaled to POPGym's bounds; over a
    whole episode of one scripted action sequence."""
    import popgym.envs as P

    env, raw = make_env(f"popgym-{task}"), getattr(P, cls)()
    env.reset(seed=2), raw.reset(seed=2)
    env.action_space.seed(0)
    for _ in range(1000):
        a = env.action_space.sample()
        obs, reward, terminated, truncated, _ = env.step(a)
        raw_obs, raw_reward, raw_terminated, raw_truncated, _ = raw.step(to_raw(a))
        assert (reward, terminated, truncated) == (raw_reward, raw_terminated, raw_truncated)
        if isinstance(raw.observation_space, gym.spaces.Box):
            np.testing.assert_allclose(obs["observation"], raw_obs, rtol=1e-6)
        if terminated or truncated:
            break
    assert terminated or truncated


@needs_popgym
@pytest.mark.parametrize("task, answer", [
    ("repeat-first-easy", lambda seen: seen[0]),
    ("repeat-previous-easy", lambda seen: seen[-4] if len(seen) >= 4 else 0)])  # k = 4: the suit 3 cards back
def test_popgym_a_perfect_memory_scores_popgyms_normalised_one(task, answer):
    """Catches: the suit read from the wrong one-hot index, POPGym's reward scale changed (a
    perfect episode returns exactly 1), the episode cut short or run past its 51 steps."""
    env = make_env(f"popgym-{task}", seed=4)
    seen = [int(env.reset()[0]["observation"].argmax())]
    total, steps, done = 0.0, 0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(answer(seen))
        seen.append(int(obs["observation"].argmax()))
        total, steps, done = total + reward, steps + 1, terminated or truncated
    assert terminated and steps == 51 and total == pytest.approx(1.0)


@needs_popgym
@pytest.mark.parametrize("difficulty, steps", [("easy", 51), ("medium", 103), ("hard", 155)])
def test_popgym_difficulty_selects_popgyms_class(difficulty, steps):
    """Catches: every difficulty built as easy (or the wrong class): RepeatPrevious's episodes
    are 1, 2 and 3 decks long."""
    env = make_env(f"popgym-repeat-previous-{difficulty}", seed=0)
    env.reset()
    n, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(0)
        n, done = n + 1, terminated or truncated
    assert n == steps


@needs_popgym
def test_popgym_full_observes_popgyms_markov_state():
    """Catches: ``-full`` ignored (the partial observation under the name ``state``) or the two
    swapped: the full control sees CartPole's 4 state values, the stateless task position and
    angle only."""
    full, partial = make_env("popgym-stateless-cartpole-easy-full", seed=1), make_env("popgym-stateless-cartpole-easy", seed=1)
    assert env_info(full, "f").obs_space == (("state", ObsEntry((4,), "float32")),)
    assert env_info(partial, "p").obs_space == (("observation", ObsEntry((2,), "float32")),)
    s, o = full.reset()[0]["state"], partial.reset()[0]["observation"]
    np.testing.assert_array_equal(s, np.asarray(full.unwrapped.state, np.float32))
    np.testing.assert_array_equal(o, s[[0, 2]])
    for _ in range(5):
        s, o = full.step(1)[0]["state"], partial.step(1)[0]["observation"]
        np.testing.assert_array_equal(o, s[[0, 2]])
        assert s[1] != 0 and s[3] != 0  # the velocities, which the stateless task hides


def test_popgym_refuses_an_action_space_it_cannot_map_in_one_line():
    """Catches: an unmappable (e.g. nested) POPGym action space passed on to crash in a model."""
    from wmzoo.envs.pomdp import popgym_actions

    env = gym.make("CartPole-v1")
    env.action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))
    with pytest.raises(WmzooError, match=r"^environment 'popgym-x': POPGym action space Tuple\(.*\) has no"):
        popgym_actions(env, "popgym-x")


def test_unknown_names_suggest_the_familys():
    """Catches: a misspelt name or a setting BSuite does not sweep built as something else. The
    makers are called directly: the registry first asks for the package, these lines do not."""
    from wmzoo.envs.pomdp import make_bsuite, make_popgym

    with pytest.raises(UnknownNameError, match="popgym-repeat-previous-easy"):
        make_popgym("popgym-repeat-previus-easy")
    with pytest.raises(UnknownNameError, match="popgym-"):
        make_popgym("popgym-repeat-previous-extreme")
    with pytest.raises(UnknownNameError, match="bsuite-memory-len-"):
        make_bsuite("bsuite-memory-len-11")  # not one of BSuite's lengths
    with pytest.raises(UnknownNameError, match="bsuite-discounting-chain-"):
        make_bsuite("bsuite-discounting-chain-20")


@needs_popgym
def test_popgym_task_table_names_classes_popgym_has():
    """Catches: a task name mapped to a class POPGym does not define (a typo, a renamed class)."""
    import popgym.envs as P

    assert {f"{c}{d}" for c in POPGYM_TASKS.values() for d in ("Easy", "Medium", "Hard")} <= {c.__name__ for c in P.ALL}


@needs_bsuite
def test_bsuite_settings_are_bsuites_sweeps():
    """Catches: the registered lengths or chain ids out of step with BSuite's own sweeps."""
    from bsuite.experiments.discounting_chain import sweep as chain
    from bsuite.experiments.memory_len import sweep as memory

    assert BSUITE_MEMORY_LENGTHS == tuple(s["memory_length"] for s in memory.SETTINGS)
    assert BSUITE_DISCOUNTING_CHAIN_IDS == tuple(s["mapping_seed"] for s in chain.SETTINGS)


@needs_bsuite
@pytest.mark.parametrize("length", [1, 5, 30])
def test_bsuite_memory_len_is_bsuites_env_and_success_is_plus_one(length):
    """Catches: observations, rewards or ends differing from BSuite's MemoryChain built with the
    same seed, the episode not L + 1 steps, make's seed not reaching BSuite; a policy that repeats
    the first observation's context bit gets +1 at the last step, the other answer -1."""
    from bsuite.experiments.memory_len import memory_len

    env, raw = make_env(f"bsuite-memory-len-{length}", seed=9), memory_len.load(length, seed=9)
    for episode in range(4):
        obs, ts = env.reset()[0]["observation"], raw.reset()
        np.testing.assert_array_equal(obs, ts.observation.reshape(-1))
        bit = int(obs[2] > 0)  # the context, +1 or -1, shown on the first step
        answer = bit if episode % 2 == 0 else 1 - bit
        steps, done = 0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(answer)
            ts = raw.step(answer)
            np.testing.assert_array_equal(obs["observation"], ts.observation.reshape(-1))
            assert reward == ts.reward and terminated == ts.last() and not truncated
            steps, done = steps + 1, terminated or truncated
            if not done:
                assert reward == 0.0
        assert steps == length + 1 and reward == (1.0 if episode % 2 == 0 else -1.0)


@needs_bsuite
def test_bsuite_memory_len_seeds_choose_the_contexts():
    """Catches: ``reset(seed=s)`` not rebuilding BSuite's env with ``s`` (its random state is fixed
    when built), or ``reset()`` rebuilding it (every episode the same context)."""
    def contexts(seed: int) -> list[float]:
        env = make_env("bsuite-memory-len-1", seed=seed)
        out = []
        for _ in range(24):
            out.append(float(env.reset()[0]["observation"][2]))
            while not env.step(0)[2]:
                pass
        return out

    assert contexts(1) == contexts(1) and contexts(1) != contexts(2) and len(set(contexts(1))) == 2


@needs_bsuite
@pytest.mark.parametrize("setting", [0, 3, 7, 19])
def test_bsuite_discounting_chain_pays_the_bonus_chain_of_its_setting(setting):
    """Catches: the setting not passed to BSuite (every id chain 0's bonus), rewards or the
    100-step termination changed: the chain ``id % 5`` returns 1.1 (BSuite's optimal return),
    every other chain 1.0."""
    for chain in range(5):
        env = make_env(f"bsuite-discounting-chain-{setting}", seed=0)
        env.reset()
        total, steps, done = 0.0, 0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(chain if steps == 0 else 0)
            total, steps, done = total + reward, steps + 1, terminated or truncated
        assert terminated and steps == 100
        assert total == pytest.approx(1.1 if chain == setting % 5 else 1.0)


@pytest.mark.parametrize("env, entry, length", [
    pytest.param("popgym-repeat-previous-easy", "observation float32 [4]", 52, marks=needs_popgym),
    pytest.param("bsuite-memory-len-5", "observation float32 [3]", 7, marks=needs_bsuite)])
def test_data_generate_records_episodes(tmp_path, env, entry, length):
    """Catches: a vector memory env the recorder cannot write (its entry, its discrete actions,
    episodes of the task's own length: the final observation is one more row)."""
    root = tmp_path / "ds"
    assert main(["data", "generate", "--env", env, "--episodes", "4", "--out", str(root), "--seed", "1",
                 "--workers", "1"]) == 0
    manifest = Manifest.read(root)
    assert manifest.env_info.describe_obs() == entry and manifest.complete
    episodes = [e for split, n in manifest.counts.items() if n for e in iter_episodes(root, split)]
    assert len(episodes) == 4
    for episode in episodes:
        key = "obs." + entry.split()[0]
        assert episode[key].dtype == np.float32 and len(episode[key]) == length


@needs_popgym
@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_popgym_memory_lengths_are_popgyms(difficulty):
    """Catches: a declared memory length out of step with POPGym's classes (RepeatPrevious's k,
    RepeatFirst's last step), a ``-full`` control declared as needing memory, a task with no single
    span (Autoencode) given one."""
    import popgym.envs as P

    from wmzoo.registry import default_registry

    entry, cap = default_registry().env("popgym-repeat-previous-easy"), difficulty.capitalize()
    previous, first = getattr(P, f"RepeatPrevious{cap}")(), getattr(P, f"RepeatFirst{cap}")()
    assert entry.memory(f"popgym-repeat-previous-{difficulty}").steps == previous.k
    assert entry.memory(f"popgym-repeat-first-{difficulty}").steps == first.max_episode_length
    assert entry.memory(f"popgym-repeat-first-{difficulty}-full").steps == 0
    assert entry.memory(f"popgym-repeat-first-{difficulty}").task == "popgym-repeat-first"
    assert entry.memory(f"popgym-autoencode-{difficulty}") is None


@needs_bsuite
@pytest.mark.parametrize("length", [1, 2, 5])
def test_bsuite_memory_len_memory_and_memoryless_bound_are_exact(length):
    """Catches: the declared memory length or memoryless bound (return 0) wrong: the bit is in
    view in observations 0 and 1 (BSuite repeats its first), observations 2 to L (the last, after
    which the answer is given) are the same whichever bit the episode drew, so a policy without
    memory answers both bits alike and averages 0; at L = 1 the answer sees the bit (no bound)."""
    from wmzoo.registry import default_registry

    name = f"bsuite-memory-len-{length}"
    memory = default_registry().env(name).memory(name)
    assert memory.steps == length - 1
    assert dict(memory.memoryless) == ({"mean_return": 0.0} if length > 1 else {})
    by_bit: dict[int, list] = {}
    env = make_env(name)
    for seed in range(40):
        seen = [env.reset(seed=seed)[0]["observation"]]
        done = False
        while not done:
            obs, _, terminated, truncated, _ = env.step(0)
            seen.append(obs["observation"])
            done = terminated or truncated
        answered_after = seen[:-1]  # the last observation comes with the reward, after the answer
        assert len(answered_after) == length + 1
        by_bit.setdefault(int(seen[0][2] > 0), []).append(answered_after)
    assert len(by_bit) == 2
    (a, *_), (b, *_) = by_bit.values()
    assert a[0][2] == a[1][2] == -b[0][2] == -b[1][2] != 0  # observations 0 and 1 show the bit
    np.testing.assert_array_equal(np.array(a[2:]), np.array(b[2:]))  # nothing after them does
    assert length > 1 or len(a[2:]) == 0


def test_memory_declarations_are_checked_without_popgym_or_bsuite():
    """They parse names only, so they are checked where neither package is installed (the checks
    above against the packages' classes skip there). Catches: BSuite's steps taken as L (not L − 1),
    a bound declared at L = 1, a ``-full`` control declaring memory, every difficulty read as easy."""
    from wmzoo.envs.pomdp import bsuite_memory, popgym_memory

    names = ("bsuite-memory-len-1", "bsuite-memory-len-2", "bsuite-memory-len-30")
    assert {name: (m.task, m.steps, dict(m.memoryless)) for name in names if (m := bsuite_memory(name))} == {
        "bsuite-memory-len-1": ("bsuite-memory-len", 0, {}),
        "bsuite-memory-len-2": ("bsuite-memory-len", 1, {"mean_return": 0.0}),
        "bsuite-memory-len-30": ("bsuite-memory-len", 29, {"mean_return": 0.0}),
    }
    assert bsuite_memory("bsuite-discounting-chain-3") is None
    steps = {d: popgym_memory(f"popgym-repeat-previous-{d}").steps for d in ("easy", "medium", "hard")}
    assert steps == {"easy": 4, "medium": 32, "hard": 64}
    assert popgym_memory("popgym-repeat-first-hard").steps == 831
    assert popgym_memory("popgym-repeat-first-hard-full").steps == 0
    assert popgym_memory("popgym-repeat-first-medium").task == "popgym-repeat-first"
    assert popgym_memory("popgym-autoencode-easy") is None


@needs_popgym
def test_each_popgym_name_builds_the_class_the_docstring_names():
    # Catches: a task (or a difficulty) mapped to another's class, e.g. the noisy Pendulum to the plain one
    # The class is the task's name in CamelCase but where the module docstring names another (and
    # for two that POPGym spells its own way).
    differs = {"stateless-cartpole": "PositionOnlyCartPole", "noisy-stateless-cartpole": "NoisyPositionOnlyCartPole",
               "stateless-pendulum": "PositionOnlyPendulum", "noisy-stateless-pendulum": "NoisyPositionOnlyPendulum",
               "velocity-only-cartpole": "VelocityOnlyCartPole", "minesweeper": "MineSweeper"}
    assert len(POPGYM_TASKS) == 14 and set(differs) < set(POPGYM_TASKS)
    for task in POPGYM_TASKS:
        cls = differs.get(task, task.title().replace("-", ""))
        for difficulty in ("easy", "medium", "hard"):
            env = make_env(f"popgym-{task}-{difficulty}")
            assert type(env.unwrapped).__name__ == cls + difficulty.capitalize(), task


def test_names_without_the_family_prefix_or_with_a_non_number_setting_are_unknown():
    """Parsed by name only (no package needed)."""
    from wmzoo.envs.pomdp import bsuite_memory, make_bsuite, make_popgym, popgym_memory

    # Catches: popgym_parts accepting a name without "popgym-" (its task and difficulty alone)
    with pytest.raises(UnknownNameError, match="popgym-repeat-previous-easy"):
        make_popgym("repeat-previous-easy")
    with pytest.raises(UnknownNameError):
        popgym_memory("repeat-first-hard")
    # Catches: a setting that is not a number reaching int() (a ValueError, not the one-line error)
    for name in ("bsuite-memory-len-five", "bsuite-memory-len-1.5", "bsuite-discounting-chain-x"):
        with pytest.raises(UnknownNameError, match=name.rsplit("-", 1)[0]):
            make_bsuite(name)
    with pytest.raises(UnknownNameError):
        bsuite_memory("bsuite-memory-len-ten")
    # Catches: _setting reading a name without its family's prefix (a bare "7" built as chain 7)
    with pytest.raises(UnknownNameError, match="bsuite-discounting-chain-"):
        make_bsuite("7")
