"""``wmzoo run --imitation DATA``: world model and imitation policy trained together on BabyAI
demonstrations (TokenWM's setting, eq. 1), resumed, evaluated by success rate; bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from wmzoo.cli import main
from wmzoo.config import load_run
from wmzoo.data.demos import Demonstrations
from wmzoo.train.agent import Agent
from wmzoo.train.checkpoint import load_checkpoint
from wmzoo.train.imitation import imitation_losses
from wmzoo.train.rundir import data_env_info

pytest.importorskip("minigrid")


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imitation") / "gotolocal"
    assert main(["data", "generate", "--env", "babyai-goto-local", "--episodes", "12", "--size", "16",
                 "--out", str(out)]) == 0
    return out


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["run", *argv, "--no-progress"])
    return code, capsys.readouterr().err


def test_tokenwm_imitation_end_to_end_resume_and_success_rate(demos, tmp_path, capsys):
    # catches: the vocabulary not saved with the run (eval could not read missions), the recorded
    # image size lost (eval would build 64x64 frames for a 16x16 model), a resume that restarts the
    # counters or forgets it is an imitation run, eval without the success rate
    logdir = tmp_path / "run"
    assert _run(capsys, "--backbone", "tokenwm", "--imitation", str(demos), "--steps", "3",
                "--logdir", str(logdir))[0] == 0
    tree = load_checkpoint(logdir / "checkpoint.safetensors")
    run = load_run(tree["run"])
    assert run.policy_name == "tokenwm-bc" and run.policy.detach is False and run.train.image_size == 16
    assert {"go", "to", "the"} <= set(run.policy.vocabulary)
    assert json.loads((logdir / "offline.json").read_text())["mode"] == "imitation"
    assert (logdir / "imagination.gif").is_file()
    assert _run(capsys, "--logdir", str(logdir), "--resume", "--steps", "5")[0] == 0
    assert load_checkpoint(logdir / "checkpoint.safetensors")["progress"]["updates"] == 5
    capsys.readouterr()
    out = tmp_path / "eval.json"
    assert main(["eval", "--checkpoint", str(logdir / "checkpoint.safetensors"), "--episodes", "2",
                 "--max-steps", "8", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert "success rate" in capsys.readouterr().out
    assert result["success_rate"] == 50.0 * sum(e["info"]["success"] for e in result["episodes"])


def test_rssm_trains_with_bc_and_its_policy_gradient_stops_at_the_features(demos, tmp_path, capsys):
    # catches: appendix B's rule broken (the policy's gradient trains RSSM's state), or TokenWM's
    # joint training cut (tokenwm-bc's gradient never reaching the world model, eq. 1)
    for backbone, reaches in (("rssm", False), ("tokenwm", True)):
        run_dir = tmp_path / backbone
        assert _run(capsys, "--backbone", backbone, "--imitation", str(demos), "--steps", "1",
                    "--logdir", str(run_dir))[0] == 0
        run = load_run(load_checkpoint(run_dir / "checkpoint.safetensors")["run"])
        agent = Agent(run, data_env_info(demos / "train", run))
        data = Demonstrations(demos)
        data.read_with(agent.policy.encode_mission)
        losses, metrics = imitation_losses(agent, *data.sample(2, 4))
        assert set(losses) == {"model", "policy/policy"} and "policy/bc_accuracy" in metrics
        losses["policy/policy"].backward()
        grads = [p.grad for p in agent.world_model.parameters() if p.grad is not None and p.grad.abs().sum() > 0]
        assert bool(grads) is reaches, backbone
        assert all(p.grad is not None for p in agent.policy.head.parameters())


def test_training_features_are_the_states_the_policy_acts_on(demos):
    # catches: TrainOutput.features one step off (the prior h^p_t, or h*_{t-1}) from what
    # Agent.act gives the policy after observing o_t
    from wmzoo.config import run_spec
    from wmzoo.interfaces import EnvInfo

    torch.manual_seed(0)
    run = run_spec("tokenwm", "babyai-goto-local", "tiny", None, 0, None, ["train.image_size=16"], imitation=True)
    agent = Agent(run, EnvInfo("babyai-goto-local", (3, 16, 16), 7))
    data = Demonstrations(demos)
    data.read_with(agent.policy.encode_mission)
    batch = data.sample(2, 6)[0]
    agent.world_model.eval()
    with torch.no_grad():
        features = agent.world_model.loss(batch).features
        state = agent.world_model.initial_state(2)
        prev = torch.zeros_like(batch.action[:, 0])
        first = batch.is_first.clone()
        first[:, 0] = True  # the training window starts from h_0
        for t in range(6):
            state = agent.world_model.observe_step(state, batch.obs[:, t], prev, first[:, t])
            torch.testing.assert_close(features[:, t], agent.world_model.features(state))
            prev = batch.action[:, t]


@pytest.mark.parametrize("argv, message", [
    (["--imitation", "{tmp}"], "not a dataset of wmzoo data generate"),
    (["--imitation", "{demos}", "--policy", "dreamer"], "policy 'dreamer' does not learn from demonstrations"),
    (["--imitation", "{demos}", "--offline", "{demos}"], "pass one"),
    (["--env", "babyai-goto-local", "--policy", "bc"], "learns from demonstrations, not in imagination"),
])
def test_bad_imitation_input_is_one_line_and_writes_nothing(demos, tmp_path, capsys, argv, message):
    logdir = tmp_path / "run"
    argv = [a.format(tmp=tmp_path, demos=demos) for a in argv]
    code, err = _run(capsys, *argv, "--steps", "2", "--logdir", str(logdir))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not logdir.exists()



def test_evaluation_gives_the_policy_each_episodes_mission(demos, tmp_path, capsys, monkeypatch):
    # catches: evaluation acting without the instruction (the policy would see the empty one), or
    # with the first episode's mission in every episode
    from wmzoo.eval.rollout import evaluate, load_agent
    from wmzoo.registry import make_env

    logdir = tmp_path / "run"
    assert _run(capsys, "--backbone", "tokenwm", "--imitation", str(demos), "--steps", "1",
                "--logdir", str(logdir))[0] == 0
    agent = load_agent(logdir / "checkpoint.safetensors")
    seen: list[list[int]] = []
    act = agent.policy.act

    def spy(features, state, **kwargs):
        seen.append(state["condition"][0].tolist())
        return act(features, state, **kwargs)

    monkeypatch.setattr(agent.policy, "act", spy)
    results = evaluate(agent, 3, max_steps=2, seed=500)
    env = make_env("babyai-goto-local", size=16)
    missions = [env.reset(seed=500 + i)[1]["mission"] for i in range(3)]
    assert len(set(missions)) > 1
    expected = [agent.policy.vocabulary.encode(m).tolist() for m, r in zip(missions, results) for _ in range(r.length)]
    assert seen == expected


def test_the_papers_pretrained_encoders_from_local_folders_end_to_end(demos, tmp_path, capsys):
    # catches: the pre-trained folders not reaching the model and policy through --set (or lost
    # from run.yaml, so eval builds a ViT and a vocabulary policy the checkpoint does not fit),
    # the encoders' weights saved in the checkpoint, evaluation reading the mission with the
    # vocabulary instead of the sentence encoder, a moved folder failing with a traceback
    pytest.importorskip("sentence_transformers")
    from pretrained_fakes import write_dinov2, write_sentence_encoder

    from wmzoo.eval.rollout import load_agent

    dino = write_dinov2(tmp_path / "dinov2", size=8, patch=4, width=24)
    words = write_sentence_encoder(tmp_path / "sentences")
    logdir = tmp_path / "run"
    assert _run(capsys, "--backbone", "tokenwm", "--imitation", str(demos), "--steps", "2", "--logdir", str(logdir),
                "--set", f"model.encoder_weights={dino}", "--set", "model.encoder_size=8",
                "--set", "model.target=features", "--set", f"policy.text_encoder={words}")[0] == 0
    tree = load_checkpoint(logdir / "checkpoint.safetensors")
    run = load_run(tree["run"])
    assert run.model.encoder_weights == str(dino) and run.policy.text_encoder == str(words)
    assert run.policy.vocabulary == []  # the sentence encoder reads the missions, not a vocabulary
    assert not any(k.startswith("encoder.") for k in tree["world_model"]), "DINOv2's weights saved"
    assert not any("sentences" in k or "auto_model" in k for k in tree["policy"]), "the sentence encoder saved"
    agent = load_agent(logdir / "checkpoint.safetensors")
    mission = "go to the red ball"
    np_code = agent.policy.sentences.encode(mission)
    torch.testing.assert_close(agent.policy.condition({"mission": mission})[0], torch.as_tensor(np_code))
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(logdir / "checkpoint.safetensors"), "--episodes", "1",
                 "--max-steps", "4"]) == 0
    assert "success rate" in capsys.readouterr().out
    dino.rename(tmp_path / "elsewhere")
    assert main(["eval", "--checkpoint", str(logdir / "checkpoint.safetensors"), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "model.encoder_weights=" in err and "no such folder" in err and len(err.strip().splitlines()) == 1
