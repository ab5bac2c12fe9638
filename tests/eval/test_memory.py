"""The s4wm memory metrics against hand-computed values, and ``wmzoo evaluate`` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis.extra.numpy import arrays
from memory_fakes import FakeEnvs, KnownModel

from wmzoo.cli import main
from wmzoo.data.dataset import Manifest, iter_episodes
from wmzoo.data.generate import generate
from wmzoo.errors import WmzooError
from wmzoo.eval.memory import (
    ATTEMPT_KEY,
    _batch,
    rate_baselines,
    attempts,
    batches,
    context_rows,
    long_enough,
    image_error,
    imagination_metrics,
    recall_metrics,
    reward_accuracy,
    reward_baselines,
    summary,
    teleport_row,
)
from wmzoo.interfaces import EnvInfo, Filtered
from wmzoo.registry import default_registry

ENV = EnvInfo("known", (3, 4, 4), 3)
PIXELS = 3 * 4 * 4
REAL = 51  # 0.2 after scaling


def err(value: float) -> float:
    """Per-image error of a constant model image ``value`` against the constant real image."""
    return PIXELS * ((REAL - value) / 255) ** 2


def episode(T: int, actions: list[int] | None = None, rewards: list[float] | None = None,
            **extras: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "obs": np.full((T, *ENV.obs_shape), REAL, np.uint8),
        "action": np.asarray(actions if actions is not None else [1] * T, np.int64),
        "reward": np.asarray(rewards if rewards is not None else [0.0] * T, np.float32),
        "terminal": np.zeros(T, bool),
        "is_first": np.arange(T) == 0,
        **extras,
    }


@given(arrays(np.uint8, (2, 3, 5, 5)), arrays(np.uint8, (2, 3, 5, 5)))
def test_image_error_is_the_per_image_sum_over_pixels_in_unit_scale(real, model):
    expected = [((real[i] / 255.0 - model[i] / 255.0) ** 2).sum() for i in range(2)]
    np.testing.assert_allclose(image_error(real, model), expected, rtol=1e-12)


def test_image_error_units():
    black, white = np.zeros((3, 64, 64), np.uint8), np.full((3, 64, 64), 255, np.uint8)
    assert image_error(black, white) == 64 * 64 * 3
    assert image_error(black, np.full_like(black, 51)) == pytest.approx(64 * 64 * 3 * 0.04)


def test_imagination_metrics_against_hand_computed_values():
    wm = KnownModel(ENV)
    batch, extras = _batch([episode(7), episode(7)])
    out = imagination_metrics(wm, iter([(batch, extras, 3)]))
    # observed rows decode as black (k = 0); the j-th imagined frame has value 10 j
    assert out["recon_mse"] == pytest.approx(err(0))
    per_step = [err(10 * j) for j in range(1, 5)]
    np.testing.assert_allclose(out["gen_mse_per_step"], per_step)
    assert out["gen_mse"] == pytest.approx(np.mean(per_step)) and out["episodes"] == 2


def test_mean_frame_error_is_the_error_of_drawing_the_context_frames_mean():
    # catches: the baseline taken over the query rows too, or in other units than recon_mse
    # (0-255 instead of [0, 1], a mean over pixels instead of the per-image sum)
    wm = KnownModel(ENV)
    rng = np.random.default_rng(0)
    batch, extras = _batch([episode(7), episode(7)])
    batch.obs[:] = torch.as_tensor(rng.integers(0, 256, batch.obs.shape, dtype=np.uint8))
    out = imagination_metrics(wm, iter([(batch, extras, 3)]))
    context = batch.obs[:, :3].numpy().reshape(-1, *ENV.obs_shape)
    mean = np.round(context.mean(0)).astype(np.uint8)  # near enough: the error of the exact mean is below
    assert out["mean_frame_mse"] <= image_error(context, np.broadcast_to(mean, context.shape)).mean()
    assert out["mean_frame_mse"] == pytest.approx(((context / 255.0 - context.mean(0) / 255.0) ** 2).sum((1, 2, 3)).mean())
    assert "latent_perplexity" not in out  # KnownModel's states have no categorical logits


def test_class_usage_is_one_for_a_collapsed_latent_and_the_class_count_when_used_evenly():
    # catches: the perplexity of each state's own (sharp) posterior instead of the average over
    # states (it would read 1 for a model that uses every class), groups summed instead of averaged
    from wmzoo.eval.memory import ClassUsage

    collapsed, even = ClassUsage(), ClassUsage()
    sharp = torch.full((4, 2, 8), -30.0)
    sharp[..., 3] = 30.0
    collapsed.add({"logits": sharp})
    for k in range(8):  # every state sharp, each on another class
        logits = torch.full((1, 2, 8), -30.0)
        logits[..., k] = 30.0
        even.add({"logits": logits})
    assert collapsed.perplexity == pytest.approx(1.0) and even.perplexity == pytest.approx(8.0)
    assert even.classes == 8 and ClassUsage().classes == 0


def test_reward_auc_is_the_rank_statistic():
    # catches: labels and scores swapped (AUC 1 - x), ties not counted half
    from wmzoo.eval.memory import reward_auc

    assert reward_auc(np.array([0.9, 0.8, 0.1, 0.2]), np.array([True, True, False, False])) == 1.0
    assert reward_auc(np.array([0.1, 0.8, 0.9, 0.2]), np.array([True, False, False, True])) == 0.0
    assert reward_auc(np.array([0.5, 0.5, 0.5]), np.array([True, False, False])) == 0.5
    assert reward_auc(np.array([0.3, 0.6, 0.6, 0.1]), np.array([False, True, False, True])) == pytest.approx(0.375)
    assert reward_auc(np.array([0.3, 0.6]), np.array([True, True])) is None


def test_reward_accuracy_inference_versus_imagination():
    # rewards follow action 2; the model predicts them only after seeing 4 rows
    actions, rewards = [0, 2, 2, 0, 2, 0], [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    attempts = np.zeros(6, bool)
    attempts[[2, 3, 5]] = True  # transitions 1, 2 and 4 (their info comes with the next row)
    data = episode(6, actions, rewards, info_unlock_attempt=attempts)
    data["terminal"][4] = True
    wm = KnownModel(ENV, sees=4)
    batch, extras = _batch([data])
    out = reward_accuracy(wm, iter([(batch, extras, 2)]), None)  # scored: the ending transition 4
    assert (out["inference_accuracy"], out["imagination_accuracy"], out["scored_transitions"]) == (1.0, 0.0, 1)
    assert out["inference_auc"] is None  # one scored transition: nothing to rank
    out = reward_accuracy(wm, iter([(batch, extras, 2)]), "info_unlock_attempt")
    # inference sees rows 0..t: t = 1, 2 (2, 3 rows seen) miss, t = 4 (5 rows) hits; imagination
    # keeps the 2 context rows and misses all three
    assert out["inference_accuracy"] == pytest.approx(1 / 3) and out["imagination_accuracy"] == 0.0
    # without the env's flags the attempts are the transitions taking the rewarded action (2)
    assert reward_accuracy(wm, iter([(batch, {}, 2)]), "info_unlock_attempt") == out



def test_reward_accuracy_keeps_per_episode_counts_and_the_base_rate():
    # Catches: per-episode counts summed over every transition instead of the scored ones, or not
    # per episode (the unit of the intervals); the base rate not the majority class's share
    actions, rewards = [0, 2, 2, 0, 2, 0], [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    attempts = np.zeros(6, bool)
    attempts[[2, 3, 5]] = True
    other = np.zeros(6, bool)
    other[[4]] = True  # one attempt, transition 3 (not rewarded)
    batch, extras = _batch([episode(6, actions, rewards, info_unlock_attempt=attempts),
                            episode(6, actions, rewards, info_unlock_attempt=other)])
    out = reward_accuracy(KnownModel(ENV, sees=4), iter([(batch, extras, 2)]), "info_unlock_attempt")
    assert out["per_episode"]["scored"] == [3, 1]
    assert out["per_episode"]["inference_accuracy"] == [1, 1] and out["per_episode"]["imagination_accuracy"] == [0, 1]
    assert out["baselines"] == {"majority_class_accuracy": 0.75, "chance_auc": 0.5, "positives": 3, "negatives": 1}
    assert rate_baselines(np.array([False, True, False, False]))["majority_class_accuracy"] == 0.75


def testrate_baselines_without_a_model_are_those_of_the_protocol(tmp_path):
    # Catches: the model-free baselines scoring other transitions than reward_accuracy does
    plugin = FakeEnvs()
    default_registry().register(plugin)
    try:
        generate("fake-memory", 10, tmp_path, size=16, log=lambda *_: None)
    finally:
        default_registry().unregister(plugin)
    manifest = Manifest.read(tmp_path)
    out = reward_accuracy(KnownModel(ENV), batches(iter_episodes(tmp_path, "train"), manifest), ATTEMPT_KEY)
    found = reward_baselines(tmp_path, ATTEMPT_KEY, "train")
    assert found == {**out["baselines"], "episodes": 8}

class WideTrainingForm(KnownModel):
    """Filtered in its training form it knows the rewards from the start (as a backbone whose
    training form sees more context than its step); one row at a time it is :class:`KnownModel`."""

    def observe_sequence(self, batch, state=None, *, step=False):
        out = super().observe_sequence(batch, state, step=step)
        if step:
            return out
        wide = {**out.state, "seen": out.state["seen"] + 100}
        return Filtered(wide, (batch.action[:, :-1] == 2).float())


def test_reward_accuracy_scores_the_training_form_and_the_step_form_beside_it():
    """Catches: the reward protocol filtering every backbone one row at a time only (TSSM-XL then
    sees its m-step cache per layer, not the m + i steps per query it trained with), so the
    protocol, not the model, decides the ranking; the step form is reported beside, labelled."""
    actions, rewards = [0, 2, 2, 0, 2, 0], [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    attempts = np.zeros(6, bool)
    attempts[[2, 3, 5]] = True
    wm = WideTrainingForm(ENV, sees=4)
    batch, extras = _batch([episode(6, actions, rewards, info_unlock_attempt=attempts)])
    out = reward_accuracy(wm, iter([(batch, extras, 2)]), "info_unlock_attempt")
    assert (out["inference_accuracy"], out["imagination_accuracy"]) == (1.0, 1.0)
    assert out["step_inference_accuracy"] == pytest.approx(1 / 3) and out["step_imagination_accuracy"] == 0.0
    assert any("(one row at a time)" in line and line.startswith("step_inference_accuracy: 33.3%")
               for line in summary(out))


def test_recall_metrics_per_number_of_extra_frames():
    teleport = np.full(10, -1)
    teleport[4] = 1  # row 4 is the first frame after the teleport
    out = recall_metrics(KnownModel(ENV), iter([episode(10, info_teleport_to=teleport)]), extra=2)
    assert out["extra_frames"] == [0, 1, 2]
    for k in range(3):
        first = 5 + k  # rows 0..4 + k observed, rows first..9 imagined at steps 1, 2, ...
        steps = [r - first + 1 for r in range(first, 10)]
        common = [r - first + 1 for r in range(7, 10)]
        assert out["gen_mse"][k] == pytest.approx(np.mean([err(10 * j) for j in steps]))
        assert out["gen_mse_common"][k] == pytest.approx(np.mean([err(10 * j) for j in common]))


def test_recall_compares_only_the_rows_the_env_marks_as_replayed():
    teleport, replay = np.full(10, -1), np.zeros(10, bool)
    teleport[4:], replay[5:8] = 1, True  # rows 8, 9 continue past the replayed history
    data = episode(10, info_teleport_to=teleport, info_replay=replay)
    out = recall_metrics(KnownModel(ENV), iter([data]), extra=20)
    assert out["extra_frames"] == [0, 1, 2, 3, 4]  # one frame is always left to imagine
    for k in range(3):
        first = 5 + k
        steps = [r - first + 1 for r in range(first, 8)]
        assert out["gen_mse"][k] == pytest.approx(np.mean([err(10 * j) for j in steps]))
    assert np.isnan(out["gen_mse"][3]) and np.isnan(out["gen_mse_common"][0])  # nothing compared


def test_attempts_are_the_env_flags_else_the_rewarded_action():
    data = episode(6, [0, 5, 3, 5, 5, 0], [0.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    batch, extras = _batch([data])
    assert attempts(batch, extras).tolist() == [[False, True, False, True, True, False]]
    flags = np.array([0, 0, 1, 0, 0, 0], bool)  # the env flags transition 1 only
    batch, extras = _batch([{**data, "info_unlock_attempt": flags}])
    assert attempts(batch, extras).tolist() == [[False, True, False, False, False, False]]
    batch, extras = _batch([episode(4, [1, 2, 0, 0], [1.0, 1.0, 0.0, 0.0])])
    with pytest.raises(WmzooError, match="take 2 different actions"):
        attempts(batch, extras)


def test_phases_and_teleports_are_required_with_one_line_errors(tmp_path):
    manifest = Manifest.__new__(Manifest)
    manifest.context_length = None
    manifest.args = type("A", (), {"env": "minigrid-empty-5x5"})()
    with pytest.raises(WmzooError, match="has no context/query phases"):
        context_rows(episode(5), manifest)
    assert context_rows(episode(5, phase=np.array([0, 0, 1, 1, 1], np.uint8)), manifest) == 2
    with pytest.raises(WmzooError, match="needs at least one of each phase"):
        context_rows(episode(3, phase=np.zeros(3, np.uint8)), manifest)
    with pytest.raises(WmzooError, match="needs a teleport dataset"):
        teleport_row(episode(5))


def test_a_fixed_context_leaves_out_the_episodes_too_short_for_a_query_and_counts_them():
    # catches: an episode of exactly `context` rows kept (no query row: the evaluation dies), or
    # a long one dropped; and an episode with its own phases judged by the fixed context
    manifest = Manifest.__new__(Manifest)
    manifest.context_length = 4
    skipped: list[int] = []
    lengths = [3, 4, 5, 9]
    kept = list(long_enough(iter([episode(T) for T in lengths]), manifest, skipped))
    assert [len(e["reward"]) for e in kept] == [5, 9] and skipped == [3, 4]
    phased = episode(3, phase=np.array([0, 1, 1], np.uint8))
    assert len(list(long_enough(iter([phased]), manifest, []))) == 1
    with pytest.raises(WmzooError, match="none of the 2 episodes is longer than the context of 4 rows"):
        list(long_enough(iter([episode(2), episode(4)]), manifest, []))


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A fake teleport-task dataset and a tiny RSSM trained on it for 3 offline updates."""
    plugin = FakeEnvs()
    default_registry().register(plugin)
    root = tmp_path_factory.mktemp("memory")
    data = root / "data"
    generate("fake-memory-teleport", 10, data, size=16, log=lambda *_: None)
    logdir = root / "run"
    torch.manual_seed(0)
    code = main(["run", "--offline", str(data), "--env", "fake-memory-teleport", "--steps", "3",
                 "--logdir", str(logdir), "--no-progress", "--set", "train.image_size=16"])
    assert code == 0
    yield data, logdir / "checkpoint.safetensors"
    default_registry().unregister(plugin)


@pytest.mark.parametrize(
    ("protocol", "keys"),
    [
        ("imagination", {"recon_mse", "gen_mse", "gen_mse_per_step", "mean_frame_mse", "latent_perplexity"}),
        ("recall", {"extra_frames", "gen_mse", "gen_mse_common"}),
        ("reward", {"inference_accuracy", "imagination_accuracy", "step_inference_accuracy",
                    "step_imagination_accuracy", "scored_transitions", "inference_auc", "imagination_auc"}),
        ("reasoning", {"inference_accuracy", "imagination_accuracy", "step_inference_accuracy",
                       "step_imagination_accuracy", "scored_transitions"}),
    ],
)
def test_evaluate_cli_end_to_end(trained, tmp_path, capsys, protocol, keys):
    data, checkpoint = trained
    args = ["evaluate", "--checkpoint", str(checkpoint), "--protocol", protocol, "--data", str(data),
            "--split", "train", "--episodes", "3", "--out", str(tmp_path)]
    assert main(args) == 0
    result = json.loads((tmp_path / f"{protocol}.json").read_text())
    assert keys <= set(result) and result["episodes"] == 3 and result["env"] == "fake-memory-teleport"
    assert f"wrote {tmp_path / f'{protocol}.json'}" in capsys.readouterr().out
    if protocol == "imagination":
        assert len(result["gen_mse_per_step"]) == 5 and (tmp_path / "imagination.png").stat().st_size > 0
        assert 0 <= result["recon_mse"] <= 3 * 16 * 16
    if protocol == "recall":
        # rows 0-6 are context plus the landing frame; 0..3 more observed leave 1 to imagine
        assert result["extra_frames"] == [0, 1, 2, 3] and (tmp_path / "recall.png").is_file()


def test_evaluate_errors_are_one_line(trained, tmp_path, capsys):
    data, checkpoint = trained
    other = tmp_path / "other"
    generate("minigrid-empty-5x5", 3, other, size=16, log=lambda *_: None)
    cases = [
        (["--data", str(other)], "was trained on fake-memory-teleport"),
        (["--data", str(tmp_path)], "is not a dataset"),
        (["--data", str(data), "--protocol", "probing", "--split", "train", "--episodes", "1"], ""),
    ]
    for extra, message in cases:
        args = {"--checkpoint": str(checkpoint), "--protocol": "imagination", "--out": str(tmp_path / "o")}
        for key, value in zip(extra[::2], extra[1::2]):
            args[key] = value
        assert main(["evaluate", *[x for kv in args.items() for x in kv]]) == 2
        err_text = capsys.readouterr().err
        assert message in err_text and err_text.count("\n") == 1 and err_text.startswith("wmzoo: error:")


def test_a_corrupt_test_episode_is_a_one_line_error(trained, tmp_path, capsys):
    data, checkpoint = trained
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(data, copy)
    entry = Manifest.read(copy).files[9]  # the test episode
    (copy / entry.file).write_bytes(b"garbage")
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--protocol", "imagination",
                 "--data", str(copy), "--out", str(tmp_path / "o")]) == 2
    assert "checksum differs" in capsys.readouterr().err


def test_imagination_baselines_are_the_mean_context_frame_and_the_best_constant():
    # Catches: the mean context frame taken over the whole split instead of each episode, the best
    # constant fitted on the context instead of the evaluated query frames (or not the minimiser)
    wm = KnownModel(ENV)
    rng = np.random.default_rng(1)
    batch, extras = _batch([episode(7), episode(7)])
    batch.obs[:] = torch.as_tensor(rng.integers(0, 256, batch.obs.shape, dtype=np.uint8))
    batch.obs[1] //= 4  # the second episode darker: its own mean differs from the split's
    base = imagination_metrics(wm, iter([(batch, extras, 3)]))["baselines"]
    real = batch.obs.numpy().astype(np.float64) / 255.0
    by_hand = np.mean([((real[e, 3:] - real[e, :3].mean(0)) ** 2).sum((1, 2, 3)) for e in range(2)])
    assert base["mean_context_frame"]["gen_mse"] == pytest.approx(by_hand)
    query = real[:, 3:].reshape(-1, *ENV.obs_shape)
    best = ((query - query.mean(0)) ** 2).sum((1, 2, 3)).mean()
    assert base["best_constant"]["gen_mse"] == pytest.approx(best)
    for other in (query.mean(0) + 0.01, real[:, :3].reshape(-1, *ENV.obs_shape).mean(0)):
        assert best < ((query - other) ** 2).sum((1, 2, 3)).mean()


class _ActionFrames(KnownModel):
    """Decodes an imagined row as the value ``10 a`` of the action that led to it (observed rows: 0)."""

    def initial_state(self, batch_size: int):
        return {**super().initial_state(batch_size), "a": torch.zeros(batch_size)}

    def observe_step(self, state, obs, prev_action, is_first):
        return {**super().observe_step(state, obs, prev_action, is_first), "a": torch.zeros_like(state["a"])}

    def imagine_step(self, state, action):
        step = super().imagine_step(state, action)
        return type(step)({**step.state, "a": action.float()}, step.reward, step.cont, step.features)

    def decode(self, state):
        C, H, W = self.env.obs_shape
        return (state["a"] * 10).clamp(0, 255).to(torch.uint8).view(-1, 1, 1, 1).expand(-1, C, H, W).clone()


def test_imagination_replays_the_recorded_action_that_led_to_each_query_frame():
    """Catches: the imagined query driven by actions one row late (``action[:, context:]``) or early:
    query frame ``context + j`` follows the action taken at row ``context - 1 + j``."""
    batch, extras = _batch([episode(7, actions=[1, 2, 3, 4, 5, 6, 7])])
    out = imagination_metrics(_ActionFrames(ENV), iter([(batch, extras, 3)]))
    np.testing.assert_allclose(out["gen_mse_per_step"], [err(10 * a) for a in (3, 4, 5, 6)])


class SeenCountModel(KnownModel):
    """Imagines the ``k``-th frame after ``seen`` observed rows as value ``10 k + seen``."""

    def decode(self, state):
        C, H, W = self.env.obs_shape
        value = (state["k"] * 10 + state["seen"]).clamp(0, 255).to(torch.uint8)
        return value.view(-1, 1, 1, 1).expand(-1, C, H, W).clone()


def test_recall_observes_the_landing_frame_and_k_more_before_imagining():
    # catches: the recall's context ending one row early (the landing frame not observed, so
    # k = 0 would not see where the teleport put the agent) or one late (the first imagined
    # row observed), and the k-th start state one row short of or past landing + k
    teleport = np.full(10, -1)
    teleport[4] = 1
    out = recall_metrics(SeenCountModel(ENV), iter([episode(10, info_teleport_to=teleport)]), extra=2)
    for k in range(3):
        seen = 5 + k  # rows 0..4 + k
        expected = [err(10 * (r - seen + 1) + seen) for r in range(seen, 10)]
        assert out["gen_mse"][k] == pytest.approx(np.mean(expected))
