"""Offline probing (wmzoo.eval.probing): metrics by hand, the pipeline on synthetic features that
do or do not carry the targets, Memory Maze's info["probe"], and a tiny RSSM checkpoint (slow)."""

from __future__ import annotations

import math
import os
from dataclasses import asdict

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from wmzoo.errors import WmzooError
from wmzoo.eval.probing import (
    PROBE_PRESETS,
    _fit,
    _object_loss,
    _predict,
    _wall_loss,
    collect_probe_episodes,
    constant_predictions,
    episode_features,
    object_mse,
    probe_data,
    run_probing,
    wall_accuracy,
)
from wmzoo.interfaces import EnvInfo, State, Step, WorldModel
from wmzoo.specs import OptimSpec

FAST = PROBE_PRESETS["tiny"]
N, K = 3, 2  # synthetic maze side and objects


# --------------------------------------------------------------------------- metrics by hand


def test_wall_accuracy_by_hand() -> None:
    pred = torch.tensor([[[1, 0], [0, 0]], [[1, 1], [1, 1]]])
    target = torch.tensor([[[1, 1], [0, 0]], [[0, 0], [0, 1]]])
    assert wall_accuracy(pred, target) == pytest.approx((3 + 1) / 8)


def test_object_mse_by_hand() -> None:
    pred = torch.zeros(2, 2, 2)
    target = torch.tensor([[[3.0, 4.0], [1.0, 0.0]], [[0.0, 0.0], [0.0, 2.0]]])
    # squared distances 25, 1 | 0, 4: summed over x, y, averaged over objects and rows
    assert object_mse(pred, target) == pytest.approx((25 + 1 + 0 + 4) / 4)


def test_object_mse_sums_over_x_and_y_with_three_objects() -> None:
    # Catches: the squared error summed over the objects axis instead of x, y (the same when k = 2)
    target = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]]])
    assert object_mse(torch.zeros(1, 3, 2), target) == pytest.approx((1 + 4 + 0) / 3)


def test_probe_losses_by_hand() -> None:
    # Catches: the wall cross-entropy averaged over cells (not summed), the object loss without its 0.5
    walls = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    assert _wall_loss(torch.zeros(2, 3), walls).item() == pytest.approx(3 * math.log(2))
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # row 0, cell 0: -ln sigmoid(2)
    expected = (math.log(1 + math.exp(-2)) + 2 * math.log(2) + 3 * math.log(2)) / 2
    assert _wall_loss(logits, walls).item() == pytest.approx(expected)
    objects = torch.tensor([[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0]])  # [N, k * 2] as fitted
    assert _object_loss(torch.zeros(2, 4), objects).item() == pytest.approx(0.5 * (1 + 4 + 9) / 2)


def test_constant_predictions_by_hand() -> None:
    walls = torch.tensor([[[1, 0]], [[1, 1]], [[0, 1]], [[1, 0]]])  # cell means 0.75, 0.5 (tie)
    objects = torch.tensor([[[1.0, 2.0]], [[3.0, -2.0]]])
    majority, mean = constant_predictions(walls, objects)
    assert majority.tolist() == [[True, False]]
    assert mean.tolist() == [[2.0, 0.0]]


# --------------------------------------------------------------------------- synthetic pipeline


class FeaturesOfObs(WorldModel):
    """A stand-in world model whose features are its last observation scaled to [0, 1]."""

    def __init__(self) -> None:
        super().__init__()
        self.env = EnvInfo("synthetic", (2, 4, 4), 6)
        self.feature_shape = (32,)
        self.calls: list[tuple[Tensor, Tensor]] = []

    def initial_state(self, batch_size: int) -> State:
        return {"x": torch.zeros(batch_size, 32)}

    def observe_step(self, state: State, obs: Tensor, prev_action: Tensor, is_first: Tensor) -> State:
        assert not self.training, "probing filters in eval mode"
        self.calls.append((prev_action.clone(), is_first.clone()))
        return {"x": obs.float().flatten(1) / 255}

    def features(self, state: State) -> Tensor:
        return state["x"]

    def components(self):  # probing never trains the world model
        raise AssertionError("probing must not ask for the world model's optimizers")

    def loss(self, batch, carry=None):
        raise AssertionError("probing must not train the world model")

    def imagine_step(self, state: State, action: Tensor) -> Step:
        raise AssertionError("probing does not imagine")

    def decode(self, state: State) -> Tensor:
        raise AssertionError("probing does not decode")


def synthetic_episodes(n: int, steps: int, seed: int, informative: bool) -> list[dict[str, np.ndarray]]:
    """Walls fixed per episode, objects and pose new at every row; when ``informative`` the
    observation of each row spells out that row's walls and objects, else it is noise."""
    rng = np.random.default_rng(seed)
    episodes = []
    for _ in range(n):
        walls = np.broadcast_to(rng.random((N, N)) < 0.3, (steps, N, N)).astype(np.uint8)
        objects = rng.uniform(-4, 4, (steps, K, 2)).astype(np.float32)
        angle = rng.uniform(0, 2 * np.pi, steps)
        obs = rng.integers(0, 256, (steps, 2, 4, 4), dtype=np.uint8)
        if informative:
            pixels = obs.reshape(steps, 2, 16)  # a view: writes go to obs
            pixels[:, 0, : N * N] = walls.reshape(steps, -1) * 255
            pixels[:, 1, : 2 * K] = np.round((objects.reshape(steps, -1) + 4) / 8 * 255)
        episodes.append({
            "obs": obs,
            "action": rng.integers(0, 6, steps),
            "reward": np.zeros(steps, np.float32),
            "terminal": np.zeros(steps, bool),
            "is_first": np.arange(steps) == 0,
            "probe_walls": walls,
            "probe_objects": objects,
            "probe_agent_pos": rng.uniform(0, N, (steps, 2)).astype(np.float32),
            "probe_agent_dir": np.stack([np.cos(angle), np.sin(angle)], -1).astype(np.float32),
        })
    return episodes


def _probe(informative: bool) -> tuple[dict[str, float], list, list]:
    train = synthetic_episodes(48, 12, seed=1, informative=informative)
    test = synthetic_episodes(16, 12, seed=2, informative=informative)
    return run_probing(FeaturesOfObs(), train, test, epochs=40, seed=0, spec=FAST), train, test


def test_probe_reads_targets_out_of_informative_features() -> None:
    result, train, test = _probe(informative=True)
    assert result["walls_acc"] > 0.95 and result["walls_acc_baseline"] < 0.8
    assert result["objects_mse"] < 0.1 * result["objects_mse_baseline"]
    # the baselines are the train majority / train mean scored on the test rows
    cat = lambda eps, key: np.concatenate([e[key] for e in eps])  # noqa: E731
    majority = cat(train, "probe_walls").mean(0) > 0.5
    assert result["walls_acc_baseline"] == pytest.approx((cat(test, "probe_walls") == majority).mean())
    mean = cat(train, "probe_objects").mean(0)
    expected = ((cat(test, "probe_objects") - mean) ** 2).sum(-1).mean()
    assert result["objects_mse_baseline"] == pytest.approx(expected, rel=1e-5)
    assert result["train_rows"] == 48 * 12 and result["test_rows"] == 16 * 12


def test_probe_does_not_beat_the_baseline_on_noise() -> None:
    result, _, _ = _probe(informative=False)
    assert result["walls_acc"] < result["walls_acc_baseline"] + 0.02
    assert result["objects_mse"] > 0.95 * result["objects_mse_baseline"]
    assert result["objects_mse_train"] < result["objects_mse"]  # it fits the train noise only


def test_filtering_follows_the_row_layout_and_leaves_rng_alone() -> None:
    model = FeaturesOfObs()
    episodes = synthetic_episodes(2, 4, seed=3, informative=True)
    episodes[1]["is_first"][2] = True  # a reset inside the episode
    # Catches: the global RNG not forked (seeded first: run_probing(seed=0) here always leaves one state)
    torch.manual_seed(12345)
    before = torch.get_rng_state()
    run_probing(model.train(), episodes, episodes[:1], epochs=1, spec=FAST)
    assert torch.equal(torch.get_rng_state(), before) and model.training  # both as they were
    # the train pass filters both episodes side by side: prev_action is the row before's action,
    # zero at each first row
    prev = torch.stack([c[0] for c in model.calls[:4]], 1)
    first = torch.stack([c[1] for c in model.calls[:4]], 1)
    assert first.tolist() == [[True, False, False, False], [True, False, True, False]]
    actions = [e["action"] for e in episodes]
    assert prev.tolist() == [[0, *actions[0][:3]], [0, actions[1][0], 0, actions[1][2]]]


def test_filtering_starts_every_episode_afresh_and_casts_actions() -> None:
    # Catches: a first row not flagged is_first filtered without the reset; int32 actions passed uncast
    model = FeaturesOfObs()
    episodes = synthetic_episodes(1, 3, seed=3, informative=True)
    episodes[0]["is_first"][0] = False
    episodes[0]["action"] = episodes[0]["action"].astype(np.int32)
    features = episode_features(model, episodes)
    assert [c[1].tolist() for c in model.calls] == [[True], [False], [False]]
    assert [c[0].dtype for c in model.calls] == [torch.int64] * 3
    assert [c[0].tolist() for c in model.calls] == [[0], *([a] for a in episodes[0]["action"][:2].tolist())]
    assert torch.equal(features[0], torch.as_tensor(episodes[0]["obs"]).float().flatten(1) / 255)


def test_probe_data_scales_the_position_to_minus_one_one() -> None:
    # Catches: map_coord not [agent_pos / n * 2 - 1, agent_dir] (the - 1 dropped, a wrong scale)
    episode = synthetic_episodes(1, 3, seed=8, informative=True)[0]
    episode["probe_agent_pos"] = np.array([[0.0, 0.0], [1.5, 3.0], [3.0, 0.75]], np.float32)  # n = 3
    data = probe_data(FeaturesOfObs(), [episode])
    assert data.map_coord[:, :2].tolist() == [[-1.0, -1.0], [0.0, 1.0], [1.0, -0.5]]
    assert torch.equal(data.map_coord[:, 2:], torch.as_tensor(episode["probe_agent_dir"]))
    assert data.walls.shape == (3, N, N) and data.objects.shape == (3, K, 2)
    assert data.features.shape == (3, 32)


def test_fit_draws_every_row_once_per_epoch_and_predict_every_row() -> None:
    # Catches: minibatch slices order[start:batch_size] / inputs[i:batch] (rows past the first lost)
    seen: list[list[int]] = []

    class Spy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def forward(self, x: Tensor) -> Tensor:
            seen.append(x[:, 0].long().tolist())
            return x * self.w

    rows = torch.arange(10.0)[:, None]
    spec = FAST.model_copy(update={"batch_size": 4})
    _fit(Spy(), rows, rows, _object_loss, spec, 2, torch.Generator().manual_seed(0))
    assert [len(b) for b in seen] == [4, 4, 2, 4, 4, 2]
    assert sorted(sum(seen[:3], [])) == list(range(10)) == sorted(sum(seen[3:], []))
    assert seen[:3] != seen[3:]  # shuffled anew each epoch
    probe = nn.Linear(2, 1)
    inputs = torch.arange(14.0).view(7, 2)
    assert torch.equal(_predict(probe, inputs, batch=3), probe(inputs).detach())


def test_train_metrics_are_the_train_rows_and_baselines_the_train_fit() -> None:
    # Catches: the train metrics computed on the test rows, a baseline fitted or scored on wrong rows
    # Train walls are all free and objects at (1, 1), test walls all walls and objects at (-1, -1);
    # the features are noise, so the probes learn the train constants.
    def constant(episodes: list, wall: int, position: float) -> list:
        return [{**e, "probe_walls": np.full_like(e["probe_walls"], wall),
                 "probe_objects": np.full_like(e["probe_objects"], position)} for e in episodes]

    train = constant(synthetic_episodes(4, 10, seed=9, informative=False), 0, 1.0)
    test = constant(synthetic_episodes(2, 10, seed=10, informative=False), 1, -1.0)
    spec = FAST.model_copy(update={"optim": OptimSpec(lr=1e-2, eps=1e-5, clip=200.0)})
    result = run_probing(FeaturesOfObs(), train, test, epochs=60, spec=spec)
    assert result["walls_acc_baseline"] == 0.0  # the train majority (free) on walls everywhere
    assert result["objects_mse_baseline"] == pytest.approx(8.0)  # (1 + 1)² + (1 + 1)² per object
    assert result["walls_acc_train"] > 0.99 and result["walls_acc"] < 0.01
    assert result["objects_mse_train"] < 0.5 and result["objects_mse"] > 4.0


def test_seed_sets_the_probes_initialisation() -> None:
    # Catches: the probes initialised from a fixed seed instead of ``seed`` (one batch: order cannot)
    train = synthetic_episodes(4, 10, seed=4, informative=True)
    test = synthetic_episodes(2, 10, seed=5, informative=True)
    spec = FAST.model_copy(update={"batch_size": 10_000})
    a, b = (run_probing(FeaturesOfObs(), train, test, epochs=2, seed=s, spec=spec) for s in (7, 8))
    assert abs(a["objects_mse"] - b["objects_mse"]) > 1e-3


def test_run_probing_is_reproducible() -> None:
    train = synthetic_episodes(4, 10, seed=4, informative=True)
    test = synthetic_episodes(2, 10, seed=5, informative=True)
    a, b = (run_probing(FeaturesOfObs(), train, test, epochs=2, seed=7, spec=FAST) for _ in range(2))
    assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}


def test_bad_episodes_are_one_line_errors() -> None:
    good = synthetic_episodes(1, 5, seed=6, informative=True)
    missing = [{k: v for k, v in good[0].items() if k != "probe_walls"}]
    with pytest.raises(WmzooError, match="lacks probe_walls"):
        run_probing(FeaturesOfObs(), missing, good, epochs=1, spec=FAST)
    small = [{**good[0], "obs": good[0]["obs"][:, :, :2]}]
    with pytest.raises(WmzooError, match=r"does not fit the world model's uint8 \[T, 2, 4, 4\]"):
        run_probing(FeaturesOfObs(), small, good, epochs=1, spec=FAST)
    with pytest.raises(WmzooError, match="at least one episode"):
        run_probing(FeaturesOfObs(), good, [], epochs=1, spec=FAST)


def test_more_bad_inputs_are_one_line_errors() -> None:
    good = synthetic_episodes(1, 5, seed=6, informative=True)
    # Catches: epochs = 0 accepted (probes reported without being fitted)
    with pytest.raises(WmzooError, match="epochs must be at least 1, got 0"):
        run_probing(FeaturesOfObs(), good, good, epochs=0, spec=FAST)
    # Catches: float observations accepted (only the shape checked)
    floats = [{**good[0], "obs": good[0]["obs"].astype(np.float32)}]
    with pytest.raises(WmzooError, match="obs float32 .* does not fit"):
        run_probing(FeaturesOfObs(), floats, good, epochs=1, spec=FAST)
    # Catches: an episode whose arrays differ in length accepted (two lengths passing a > 2 check)
    short = [{**good[0], "probe_objects": good[0]["probe_objects"][:4]}]
    with pytest.raises(WmzooError, match=r"arrays of different lengths \[4, 5\]"):
        run_probing(FeaturesOfObs(), short, good, epochs=1, spec=FAST)
    # Catches: train and test mazes of different sides reaching the probes (only object counts checked)
    wider = [{**good[0], "probe_walls": np.zeros((5, 4, 4), np.uint8)}]
    with pytest.raises(WmzooError, match=r"train and test mazes differ: walls \[3, 3\] vs \[4, 4\]"):
        run_probing(FeaturesOfObs(), good, wider, epochs=1, spec=FAST)
    # Catches: collect_probe_episodes accepting n = 0 or steps = 0 (refused before any env is made)
    for n, steps in ((0, 5), (2, 0)):
        with pytest.raises(WmzooError, match="needs n >= 1 and steps >= 1"):
            collect_probe_episodes("memory-maze-9x9", n, steps, seed=0)


def test_env_without_probe_targets() -> None:
    pytest.importorskip("minigrid")
    with pytest.raises(WmzooError, match="gives no probe targets"):
        collect_probe_episodes("minigrid-empty-5x5", 1, 2, seed=0)


# --------------------------------------------------------------------------- Memory Maze


def _memory_maze_or_skip() -> None:
    os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        import memory_maze  # noqa: F401
        from dm_control import mujoco

        mujoco.Physics.from_xml_string("<mujoco><worldbody/></mujoco>").render(16, 16)
    except Exception as err:  # not installed, or no OpenGL
        pytest.skip(f"Memory Maze does not run here: {err}")


@pytest.fixture(scope="module")
def maze_episodes() -> list[dict[str, np.ndarray]]:
    _memory_maze_or_skip()
    return collect_probe_episodes("memory-maze-9x9", 2, 3, seed=0)


def test_memory_maze_probe_targets(maze_episodes) -> None:
    for episode in maze_episodes:
        # row 0 holds reset's info["probe"], the others step's
        assert {k for k in episode if k.startswith("probe_")} == {
            "probe_walls", "probe_objects", "probe_agent_pos", "probe_agent_dir"}
        rows = 4  # 3 steps + the final observation
        assert episode["obs"].shape == (rows, 3, 64, 64) and episode["obs"].dtype == np.uint8
        assert episode["is_first"].tolist() == [True, False, False, False]
        walls, objects = episode["probe_walls"], episode["probe_objects"]
        pos, heading = episode["probe_agent_pos"], episode["probe_agent_dir"]
        assert walls.shape == (rows, 9, 9) and walls.dtype == np.uint8
        assert objects.shape == (rows, 3, 2) and objects.dtype == np.float32  # 3 objects in 9x9
        assert pos.shape == heading.shape == (rows, 2) and pos.dtype == heading.dtype == np.float32
        assert set(np.unique(walls)) == {0, 1} and (walls == walls[0]).all()  # one maze
        assert ((pos >= 0) & (pos <= 9)).all() and not np.array_equal(pos[0], pos[-1])
        np.testing.assert_allclose(np.linalg.norm(heading, axis=-1), 1, atol=1e-5)
        # layout and position share a frame: the agent stands on a free cell (row y, column x)
        assert all(walls[t, int(y), int(x)] == 0 for t, (x, y) in enumerate(pos))
        assert (np.abs(objects) < 9 * np.sqrt(2)).all() and objects.std() > 0
    assert not np.array_equal(maze_episodes[0]["probe_walls"][0], maze_episodes[1]["probe_walls"][0])


@pytest.mark.slow
def test_tiny_rssm_checkpoint(tmp_path) -> None:
    """A tiny RSSM checkpoint through the whole pipeline on a few short 9x9 episodes."""
    _memory_maze_or_skip()
    from wmzoo.config import run_spec
    from wmzoo.eval.rollout import load_agent
    from wmzoo.registry import env_info, make_env
    from wmzoo.train.agent import Agent
    from wmzoo.train.checkpoint import save_checkpoint

    run = run_spec("rssm", "memory-maze-9x9", "tiny")
    env = make_env(run.env, seed=0)
    info = env_info(env, run.env)
    env.close()
    agent = Agent(run, info)
    path = save_checkpoint(tmp_path / "ckpt.safetensors",
                           {"run": run.model_dump(), "env": asdict(info), **agent.state_tree()})
    agent = load_agent(path)
    weights = {k: v.clone() for k, v in agent.world_model.state_dict().items()}
    train = collect_probe_episodes(run.env, 3, 40, seed=0)
    test = collect_probe_episodes(run.env, 2, 40, seed=100)
    result = run_probing(agent, train, test, epochs=5, seed=0, spec=FAST)
    assert result["train_rows"] == 3 * 41 and result["test_rows"] == 2 * 41
    assert 0 <= result["walls_acc"] <= 1 and 0 <= result["walls_acc_baseline"] <= 1
    assert np.isfinite(result["objects_mse"]) and result["objects_mse_baseline"] > 0
    for key, value in agent.world_model.state_dict().items():
        assert torch.equal(value, weights[key]), key
