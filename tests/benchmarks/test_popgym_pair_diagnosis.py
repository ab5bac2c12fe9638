"""``benchmarks/popgym_pair_diagnosis.py`` on the POPGym pair's checked-in checkpoints: what the
study's README says of them (the world models imagine the right answer; S4WM's policy ignores it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmark_scripts import load_script

from wmzoo.cli import main as wmzoo_main

KEPT = Path(__file__).parents[2] / "benchmarks" / "results" / "popgym_repeat_previous_pair" / "diagnosis"
pytest.importorskip("popgym")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pgdata")
    assert wmzoo_main(["data", "generate", "--env", "popgym-repeat-previous-easy", "--episodes", "21",
                       "--out", str(out), "--seed", "50000", "--split", "1,0,20"]) == 0
    return out


def test_the_world_models_imagine_the_answer_and_only_rssms_policy_gives_it(data):
    """Catches: the answer read one row off (its lag: every accuracy falls to chance, 0.25), the
    imagined reward of an action read for another, the policy scored on other rows than the
    world model, a probe scored on the rows it was fitted on (or on no held-out rows). The figures
    are those of the checked-in checkpoints (README of the study)."""
    script = load_script("popgym_pair_diagnosis")
    batch = script.episodes_batch(data, "test")
    rssm = script.diagnose(KEPT / "rssm-tbtt-seed-4.safetensors", batch, lag=3, horizon=3)
    s4wm = script.diagnose(KEPT / "s4wm-seed-3.safetensors", batch, lag=3, horizon=3)
    for r in (rssm, s4wm):
        assert min(r["world_model_argmax_correct_by_imagined_step"]) > 0.7
    assert rssm["policy_greedy_correct"] > 0.85
    assert s4wm["policy_greedy_correct"] < 0.4 and max(s4wm["policy_greedy_actions"]) > 0.9 * s4wm["rows_scored"]
    # the answer is in S4WM's hidden state, not in the features its policy reads; in RSSM's in both
    assert s4wm["probe_of_the_answer_held_out"]["state.ssm"] > 0.7 > 0.45 > s4wm["probe_of_the_answer_held_out"]["features"]
    assert rssm["probe_of_the_answer_held_out"]["features"] > 0.7
    off = script.diagnose(KEPT / "rssm-tbtt-seed-4.safetensors", batch, lag=2, horizon=1)
    assert max(off["world_model_argmax_correct_by_imagined_step"]) < 0.45 and off["policy_greedy_correct"] < 0.45


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, data):
    """Catches: a missing dataset or checkpoint shown as a traceback or exiting 1."""
    script = load_script("popgym_pair_diagnosis")
    for argv in (["--data", str(tmp_path / "none"), "--checkpoint", str(KEPT / "s4wm-seed-3.safetensors")],
                 ["--data", str(data), "--checkpoint", str(tmp_path / "none.safetensors")]):
        with pytest.raises(SystemExit) as exit_:
            script.main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err
