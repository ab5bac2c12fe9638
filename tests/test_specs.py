"""Specs: validation, overrides, config files, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wmzoo.errors import WmzooError
from wmzoo.specs import (
    TRAIN_PRESETS,
    OptimSpec,
    TrainSpec,
    load_config,
    merge,
    parse_override,
    set_path,
    validate,
)


@given(
    lr=st.floats(1e-8, 1.0),
    eps=st.floats(1e-12, 1.0),
    wd=st.floats(0, 1),
    clip=st.floats(1e-3, 1e6),
    warmup=st.integers(0, 10**6),
)
def test_optim_spec_round_trips_through_json(lr, eps, wd, clip, warmup):
    spec = OptimSpec(lr=lr, eps=eps, weight_decay=wd, clip=clip, warmup=warmup)
    assert OptimSpec.model_validate_json(spec.model_dump_json()) == spec
    assert validate(OptimSpec, spec.model_dump()) == spec


@given(steps=st.integers(1, 10**7), ratio=st.floats(0.01, 4096), envs=st.integers(1, 256))
def test_train_spec_override_round_trip(steps, ratio, envs):
    tree = TRAIN_PRESETS["tiny"].model_dump()
    for key, value in (("steps", steps), ("train_ratio", ratio), ("envs", envs)):
        set_path(tree, key, value)
    spec = validate(TrainSpec, tree)
    assert (spec.steps, spec.train_ratio, spec.envs) == (steps, ratio, envs)
    assert spec.prefill == TRAIN_PRESETS["tiny"].prefill  # untouched fields keep the preset


def test_specs_are_frozen_and_forbid_extra():
    spec = OptimSpec()
    with pytest.raises(Exception):
        spec.lr = 1.0  # type: ignore[misc]
    with pytest.raises(WmzooError, match=r"^model\.bogus: unknown field$"):
        validate(OptimSpec, {"bogus": 1}, prefix="model")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"lr": -1}, r"^optim\.lr: Input should be greater than 0 \(got -1\)$"),
        ({"lr": "fast"}, r"^optim\.lr: Input should be a valid number.*\(got 'fast'\)$"),
        ({"warmup": 1.5}, r"^optim\.warmup: .*integer.*\(got 1\.5\)$"),
    ],
)
def test_bad_values_give_one_line_naming_field_value_and_rule(data, message):
    with pytest.raises(WmzooError, match=message) as info:
        validate(OptimSpec, data, prefix="optim")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("model.deter=512", ("model.deter", 512)),
        ("train.train_ratio=1e-3", ("train.train_ratio", 1e-3)),
        ("model.tbtt=true", ("model.tbtt", True)),
        ("train.device=cuda:0", ("train.device", "cuda:0")),
        ("policy.name=a=b", ("policy.name", "a=b")),
    ],
)
def test_parse_override_reads_yaml_values(text, expected):
    assert parse_override(text) == expected


@pytest.mark.parametrize("text", ["deter", "=5", "model..deter=1", ".x=1"])
def test_parse_override_rejects_malformed(text):
    with pytest.raises(WmzooError, match="expected KEY=VALUE"):
        parse_override(text)


def test_merge_is_deep_and_does_not_mutate():
    base = {"a": {"b": 1, "c": 2}, "d": 3}
    out = merge(base, {"a": {"b": 5}})
    assert out == {"a": {"b": 5, "c": 2}, "d": 3}
    assert base == {"a": {"b": 1, "c": 2}, "d": 3}


def test_load_config_errors(tmp_path):
    with pytest.raises(WmzooError, match="no such file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [unclosed")
    with pytest.raises(WmzooError, match="not valid YAML"):
        load_config(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("3")
    with pytest.raises(WmzooError, match="expected a mapping"):
        load_config(scalar)
    good = tmp_path / "good.yaml"
    good.write_text("train:\n  steps: 123\n")
    assert load_config(good) == {"train": {"steps": 123}}


def test_a_replay_smaller_than_one_batch_is_refused_up_front():
    # Catches: train.replay_capacity < batch x seq_len accepted, so the run never trains and
    # crashes at its end.
    from wmzoo.config import run_spec
    from wmzoo.errors import WmzooError

    with pytest.raises(WmzooError, match="train.replay_capacity 10 holds less than one batch"):
        run_spec("rssm", "minigrid-empty-5x5", "tiny", None, None, None, ["train.replay_capacity=10"])


def test_field_help_shows_the_default_of_a_default_factory():
    # catches: `wmzoo spec` printing "PydanticUndefined" for list fields (bc's vocabulary)
    from wmzoo.agents.imitation import ImitationSpec
    from wmzoo.specs import field_help

    lines = {line.split(" = ")[0]: line for line in field_help(ImitationSpec, "policy.")}
    assert lines["policy.vocabulary"].startswith("policy.vocabulary = []")
    assert "Undefined" not in "".join(lines.values())


def test_spec_field_lines_show_the_resolved_value_the_labelled_default_and_readable_bounds(capsys):
    # Catches: `wmzoo spec` listing the class defaults (batch_size = 16) under a YAML that shows
    # the preset's (batch_size: 4) with no label, and bounds printed as pydantic reprs
    # ("[Ge(ge=1), Le(le=4096)]").
    from wmzoo.cli import main

    assert main(["spec", "--backbone", "rssm", "--preset", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "\n  batch_size: 4\n" in out
    lines = {line.split(" = ")[0].lstrip("# *"): line for line in out.splitlines() if " = " in line}
    assert "model.batch_size = 4 (default 16; ≥ 1, ≤ 4096)" in lines["model.batch_size"]
    assert "Ge(" not in out and "Le(" not in out
