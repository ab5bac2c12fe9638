"""The study spec and `wmzoo study` bad input: one line naming the field, exit 2, nothing
overwritten; parameter matching through the width knobs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from wmzoo.cli import main
from wmzoo.errors import WmzooError
from wmzoo.study.run import match_width, plan_cells, prepare, width_fields, world_model_parameters
from wmzoo.study.spec import EXAMPLE, study_from_dict

BASE = {
    "name": "t", "backbones": ["rssm", "s4wm:tiny"], "envs": ["minigrid-empty-5x5"], "seeds": 2,
    "budget": {"updates": 3, "episodes": 5, "size": 16}, "set": {"train.image_size": 16},
}


def test_the_example_is_a_valid_study():
    # Catches: `study init` writing an example the parser refuses (a renamed field).
    study = study_from_dict(yaml.safe_load(EXAMPLE))
    assert study.labels() == ["rssm:tiny", "s4wm:tiny", "rem:tiny"] and study.seeds == [0, 1, 2]
    assert study.budget.steps == 20000 and not study.budget.offline


@pytest.mark.parametrize("change, field", [
    ({"backbones": ["rssm", "nope"]}, "backbones[1]: unknown backbone 'nope'"),
    ({"envs": ["nope-env"]}, "envs[0]: unknown environment 'nope-env'"),
    ({"budget": {"updates": 0}}, "budget.updates"),
    ({"budget": {"steps": 0}}, "budget.steps"),
    ({"budget": {"steps": 5, "updates": 5}}, "budget: give exactly one of steps"),
    ({"seeds": 0}, "seeds"),
    ({"seeds": [1, 1]}, "seeds"),
    ({"backbones": ["rssm", "rssm:tiny"]}, "backbones: rssm:tiny listed twice"),
    ({"backbones": ["rssm:enormous"]}, "backbones[0] (rssm:enormous) on minigrid-empty-5x5: unknown preset"),
    ({"set": {"model.deter": "wide"}}, "model.deter"),
    ({"params": 10}, "params"),
    ({"colour": "red"}, "colour: unknown field"),
    ({"eval": {"temperature": 1e-45}}, "eval.temperature"),  # the range eval --temperature refuses
    ({"eval": {"max_steps": 10**9}}, "eval.max_steps"),
    ({"expect": [{"metric": "accuracy", "order": ["rssm:tiny", "s4wm:tiny"]}]}, "expect.0.metric: unknown metric"),
    ({"expect": [{"metric": "gen_mse", "order": ["rssm:tiny", "s4wm"]}]}, "expect[0].order: 's4wm' is not a row"),
    ({"expect": [{"metric": "gen_mse", "order": ["rssm:tiny", ["s4wm:tiny", "rssm:tiny"]]}]},
     "expect[0].order: rssm:tiny listed twice"),
    ({"expect": [{"metric": "gen_mse", "order": ["rssm:tiny", "s4wm:tiny"], "envs": ["dm"]}]},
     "expect[0].envs: 'dm' is not an env"),
    ({"expect": [{"metric": "gen_mse", "order": ["rssm:tiny", "s4wm:tiny"], "why": "x"}]}, "expect.0.why: unknown field"),
])
def test_bad_study_is_one_line_naming_the_field(tmp_path: Path, capsys, change, field):
    # Catches: a bad field reaching the cells (12 failing runs instead of one line), a traceback.
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({**BASE, **change}))
    out = tmp_path / "out"
    assert main(["study", "run", str(spec), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("wmzoo: error: study ") and field in err, err
    assert not out.exists()  # nothing written before the study is valid


def test_out_holding_another_study_is_refused_and_kept(tmp_path: Path, capsys):
    # Catches: a second study silently writing its cells into (and its study.yaml over) another's.
    out = tmp_path / "out"
    study = study_from_dict(BASE)
    prepare(study, BASE, out, log=lambda _: None)
    before = (out / "study.yaml").read_bytes()
    other = {**BASE, "envs": ["minigrid-empty-6x6"]}
    spec = tmp_path / "other.yaml"
    spec.write_text(yaml.safe_dump(other))
    assert main(["study", "run", str(spec), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds another study (envs differ" in err and err.count("\n") == 0
    assert (out / "study.yaml").read_bytes() == before
    assert not (out / "data" / "minigrid-empty-6x6").exists()


def test_a_rerun_may_change_what_only_the_report_reads(tmp_path: Path):
    # Catches: a study refused on its own folder after an expected direction was added to it (no
    # cell reads `expect`), or the report left reading the old expectations.
    out = tmp_path / "out"
    prepare(study_from_dict(BASE), BASE, out, log=lambda _: None)
    changed = {**BASE, "expect": [{"metric": "gen_mse", "order": ["s4wm:tiny", "rssm:tiny"]}]}
    lines: list[str] = []
    prepare(study_from_dict(changed), changed, out, log=lines.append)
    assert yaml.safe_load((out / "study.yaml").read_text())["expect"] == changed["expect"]
    assert any("expect changed (read by the report alone): rewritten" in line for line in lines), lines
    with pytest.raises(WmzooError, match=r"holds another study \(seeds, expect differ"):
        prepare(study_from_dict({**BASE, "seeds": 3}), {**BASE, "seeds": 3}, out, log=lambda _: None)


def test_out_not_empty_without_a_study_is_refused(tmp_path: Path, capsys):
    # Catches: a study writing into a folder of the user's other files.
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(BASE))
    assert main(["study", "run", str(spec), "--out", str(out), "--no-progress"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_init_writes_the_example_and_never_overwrites(tmp_path: Path, capsys):
    # Catches: `study init` clobbering a user's edited study.
    path = tmp_path / "study.yaml"
    assert main(["study", "init", str(path)]) == 0
    assert path.read_text() == EXAMPLE
    path.write_text("mine")
    assert main(["study", "init", str(path)]) == 2
    assert path.read_text() == "mine" and "exists" in capsys.readouterr().err


def test_plan_has_every_backbone_env_seed_once_with_its_own_sets():
    # Catches: a backbone's `set` leaking into another backbone's cells, a seed or env dropped.
    study = study_from_dict({**BASE, "backbones": ["rssm", {"name": "s4wm", "set": {"model.n_layers": 1}}],
                             "envs": ["minigrid-empty-5x5", "minigrid-empty-6x6"]})
    cells = plan_cells(study, log=lambda _: None)
    assert len(cells) == 2 * 2 * 2 and len({c.path for c in cells}) == 8
    assert {(c.label, c.env, c.seed) for c in cells} == {
        (b, e, s) for b in ("rssm:tiny", "s4wm:tiny") for e in ("minigrid-empty-5x5", "minigrid-empty-6x6")
        for s in (0, 1)}
    assert all(("model.n_layers" in c.overrides) == (c.backbone == "s4wm") for c in cells)
    assert all(c.overrides["train.image_size"] == 16 for c in cells)


@pytest.mark.parametrize("backbone", ["rssm", "rem"])
def test_width_matching_reaches_the_budget(backbone):
    # Catches: the bisection going the wrong way (the smallest or largest width), the tied fields
    # not scaled, a width that is not a multiple of the knob's (REM: rotary heads need even sizes).
    env, sets = "minigrid-empty-5x5", {"train.image_size": 16}
    base = world_model_parameters(backbone, "tiny", env, sets)
    target = 10 * base
    fields = match_width(backbone, "tiny", env, sets, target)
    got = world_model_parameters(backbone, "tiny", env, {**sets, **fields})
    assert abs(got - target) / target < 0.1, (fields, got, target)
    if backbone == "rem":
        assert fields["model.retnet.d_model"] % 16 == 0
        assert fields["model.retnet.d_ff"] == 2 * fields["model.retnet.d_model"]  # tiny: d_ff = 2d
    # the next width either way is no closer
    from wmzoo.config import run_spec
    from wmzoo.registry import default_registry

    knob = default_registry().backbone(backbone).width
    spec = run_spec(backbone, env, "tiny", None, 0, None, sets).model
    width = fields[f"model.{knob.fields[0]}"]
    for other in (width - knob.multiple, width + knob.multiple):
        count = world_model_parameters(backbone, "tiny", env, {**sets, **width_fields(spec, knob, other)})
        assert abs(count - target) >= abs(got - target)


def test_a_backbone_without_a_knob_runs_at_its_preset(monkeypatch):
    # Catches: a study refusing (or crashing on) a third-party backbone that declares no knob.
    import dataclasses

    from wmzoo.registry import default_registry

    registry = default_registry()
    entry = registry.backbone("rssm")
    monkeypatch.setattr(type(registry), "backbone", lambda self, name: dataclasses.replace(entry, width=None))
    assert match_width("rssm", "tiny", "minigrid-empty-5x5", {}, 10**6) == {}


def test_unreachable_budget_is_one_line():
    with pytest.raises(WmzooError, match="cannot reach it"):
        match_width("rssm", "tiny", "minigrid-empty-5x5", {"train.image_size": 16}, 10**13)


def test_the_examples_study_is_valid_and_parameter_matched():
    # Catches: examples/study.yaml drifting from the spec (a renamed field, a removed env).
    from wmzoo.study.spec import load_study

    study = load_study(Path(__file__).resolve().parents[2] / "examples" / "study.yaml")
    assert study.budget.offline and study.params == 400_000 and len(study.labels()) == 5


@pytest.mark.parametrize("change, field", [
    ({"budget": {"steps": 10, "imitation": True}}, "imitation trains on recorded demonstrations"),
    ({"backbones": ["rssm", {"name": "rssm", "row": "rssm:tiny"}]}, "backbones: rssm:tiny listed twice"),
    ({"backbones": [{"name": "rssm", "row": "a b"}]}, "row"),
    ({"set": {"policy.detach": "maybe"}, "budget": {"updates": 3, "episodes": 5, "size": 16, "imitation": True}},
     "policy.detach"),
])
def test_bad_imitation_study_is_one_line(tmp_path: Path, capsys, change, field):
    # Catches: an online imitation budget accepted (nothing to imitate), two rows of one name
    # merged in the report, a policy field of the imitation policy not validated before cells run.
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({**BASE, **change}))
    assert main(["study", "run", str(spec), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err, err
