"""Run specs: preset → config file → --set, validated in one place."""

from __future__ import annotations

import pytest

from wmzoo.config import run_spec
from wmzoo.errors import WmzooError
from wmzoo.registry import default_registry


def test_preset_then_config_then_set(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("env: minigrid-empty-8x8\nseed: 3\nmodel:\n  deter: 96\n  hidden: 80\ntrain:\n  steps: 1234\n")
    run = run_spec("rssm", None, "tiny", config=config, overrides=["model.hidden=72", "policy.horizon=7"])
    tiny = default_registry().backbone("rssm").presets["tiny"]
    assert run.env == "minigrid-empty-8x8" and run.seed == 3
    assert run.model.deter == 96  # from the file
    assert run.model.hidden == 72  # --set wins over the file
    assert run.model.stoch == tiny.stoch  # untouched: the preset
    assert run.train.steps == 1234 and run.policy.horizon == 7


def test_variant_preset_falls_back_to_family_for_policy_and_trainer():
    run = run_spec("rssm", "minigrid-empty-5x5", "paper-2d")
    assert run.preset == "paper-2d"
    assert run.model.seq_len == 50 and run.model.cnn_stages == 3
    assert run.train.train_ratio == 512  # the trainer's paper preset


def test_trainer_variant_preset_atari100k():
    """100k agent steps (400k frames at frame skip 4); backbone and policy at their paper presets."""
    run = run_spec("rssm", "atari-pong", "paper-atari100k")
    paper = run_spec("rssm", "atari-pong", "paper")
    assert run.train.steps == 100_000 and run.train.envs == 1
    assert run.model == paper.model and run.policy == paper.policy
    with pytest.raises(WmzooError, match="unknown preset 'paper-atari10k'"):
        run_spec("rssm", "atari-pong", "paper-atari10k")


def test_nested_optimizer_override_keeps_other_fields():
    run = run_spec("rssm", "minigrid-empty-5x5", "paper", overrides=["model.optim.lr=1e-5"])
    assert run.model.optim.lr == 1e-5
    assert run.model.optim.clip == 200  # table 7's clip survives


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"overrides": ["train.steps=0"]}, "train.steps: Input should be greater than or equal to 1 (got 0)"),
        ({"overrides": ["model.optim.lr=2"]}, "model.optim.lr: Input should be less than or equal to 1 (got 2"),
        ({"overrides": ["policy.gama=0.9"]}, "policy.gama: unknown field"),
        ({"overrides": ["horizon=5"]}, "did you mean --set policy.horizon=5?"),
        ({"policy": "dreamr"}, "unknown policy 'dreamr'; did you mean: dreamer"),
    ],
)
def test_errors_name_the_field(kwargs, message):
    with pytest.raises(WmzooError) as info:
        run_spec("rssm", "minigrid-empty-5x5", "tiny", **kwargs)
    assert message in str(info.value)


def test_config_rejects_unknown_top_level_keys(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("modle:\n  deter: 3\n")
    with pytest.raises(WmzooError, match=r"unknown top-level field\(s\) \['modle'\]"):
        run_spec(config=config)


def test_backbone_schedules_its_paper_trainer_preset():
    """REM table 3: one world-model update (64 x 10) per env step, the actor-critic every second
    from epoch 50, 100 training-only epochs; the same under paper-atari100k; --set still wins."""
    for name in ("paper", "paper-atari100k"):
        run = run_spec("rem", "atari-pong", name)
        assert run.train.train_ratio == 640 == run.model.batch_size * run.model.seq_len
        assert run.train.policy_every == 2 and run.train.final_updates == 20_000
        assert run.policy.start == 9000 and run.policy.epsilon == 0.01
    assert run_spec("rem", "atari-pong", "paper", overrides=["train.policy_every=1"]).train.policy_every == 1
    assert run_spec("rem", "atari-pong", "small").train.final_updates == 0  # no schedule for small
    assert run_spec("rssm", "atari-pong", "paper").train.train_ratio == 512  # others keep the trainer's


def test_backbone_only_preset_trains_with_the_trainer_paper_preset():
    run = run_spec("iris", "atari-pong", "rem-config")
    assert run.train.steps == 100_000  # the trainer's paper preset
    assert run.train.train_ratio == 64 * 10 and run.train.policy_every == 2  # iris's rem-config schedule
    assert run.policy.horizon == 10  # iris-ac's rem-config preset
    with pytest.raises(WmzooError, match="unknown preset 'medium'"):
        run_spec("iris", "atari-pong", "medium")


def test_run_presets_are_declared_not_inferred_from_the_name():
    """Every --preset name is a declared combination: s4wm's appendix B.1 variants (which the old
    name splitting could not resolve for the policy) select the dreamer and trainer paper presets;
    a world-model preset that no run preset names is not a --preset."""
    from wmzoo.config import run_presets
    from wmzoo.hookspecs import RunPreset

    for variant in ("no-mlp", "full-posterior", "paper-2d"):
        run = run_spec("s4wm", "minigrid-empty-5x5", variant)
        assert run.model == default_registry().backbone("s4wm").presets[variant]
        assert run.policy == run_spec("s4wm", "minigrid-empty-5x5", "paper").policy
        assert run.train.train_ratio == 512
    assert run_spec("s4wm", "minigrid-empty-5x5", "no-mlp").model.mlp is False
    table = run_presets(default_registry().backbone("rem"))
    assert table["tiny"] == RunPreset("tiny", "tiny", "tiny")
    assert table["paper-atari100k"].model == "paper" and table["paper-atari100k"].train == "paper-atari100k"
    assert table["paper"].schedule["train_ratio"] == 640  # rem's own replaces the standard one


def test_typed_sections_are_the_plugins_spec_classes():
    """RunSpec holds the backbone's and policy's own spec instances (no second validation inside
    Agent): a dict in their place would lose the subclass fields."""
    from wmzoo.specs import RunSpec

    run = run_spec("tssm-xl", "minigrid-empty-5x5", "tiny", overrides=["model.cache_len=9"])
    entry = default_registry().backbone("tssm-xl")
    assert type(run.model) is entry.spec and run.model.cache_len == 9
    assert type(run.policy) is default_registry().policy("dreamer").spec
    with pytest.raises(Exception):
        RunSpec.model_validate(run.model_dump())  # needs the resolver to know the classes


def test_load_run_round_trips_and_reads_runs_saved_before_policy_names_were_kept():
    from wmzoo.config import load_run

    run = run_spec("iris", "atari-pong", "rem-config", overrides=["model.layers=3", "seed=5"])
    assert load_run(run.model_dump()) == run
    old = {**run.model_dump(), "policy_name": ""}  # older run.yaml files
    assert load_run(old).policy_name == "iris-ac" and load_run(old).model.layers == 3
    with pytest.raises(WmzooError, match=r"^run\.yaml: model\.layrs: unknown field; did you mean layers\?$"):
        load_run({**run.model_dump(), "model": {**run.model.model_dump(), "layrs": 2}}, "run.yaml")


def test_resume_spec_changes_only_resumable_train_fields():
    from wmzoo.config import resume_spec

    saved = run_spec("rssm", "minigrid-empty-5x5", "tiny").model_dump()
    run = resume_spec(saved, ["train.steps=999", "train.checkpoint_every=7"])
    assert (run.train.steps, run.train.checkpoint_every) == (999, 7)
    assert run.model_dump(exclude={"train"}) == {k: v for k, v in saved.items() if k != "train"}
    with pytest.raises(WmzooError, match="model.deter=3: cannot change on --resume"):
        resume_spec(saved, ["model.deter=3"])


def test_the_memory_check_builds_the_model_for_the_env_it_is_given(monkeypatch):
    # Catches: check_fits_in_memory sizing the model for its default 18-action RGB frames when the
    # caller (wmzoo bench --env) passed the env's own shapes.
    import wmzoo.config as config
    from wmzoo.interfaces import EnvInfo

    seen = []
    real = config.build_on_meta
    monkeypatch.setattr(config, "build_on_meta", lambda run, info: seen.append(info) or real(run, info))
    run = config.run_spec("rssm", "minigrid-empty-5x5", "tiny", None, None, None, [])
    info = EnvInfo("minigrid-empty-5x5", (3, 32, 32), 7)
    config.check_fits_in_memory(run, info)
    config.check_fits_in_memory(run)
    assert seen == [info, EnvInfo("minigrid-empty-5x5", (3, run.train.image_size, run.train.image_size), 18)]


def test_a_run_preset_naming_a_missing_preset_says_which_run_preset_named_it():
    # Catches: "unknown preset 'nope' of policy 'dreamer'" alone, which reads as if the user had
    # typed 'nope' when they typed --preset mine.
    from wmzoo import BackboneEntry, RunPreset, hookimpl
    from wmzoo_plugins.rssm import PRESETS, RSSMSpec, RSSMWorldModel

    class Plugin:
        @hookimpl
        def wmzoo_backbones(self):
            return [BackboneEntry(name="misnamed-presets", spec=RSSMSpec, presets=PRESETS, build=RSSMWorldModel,
                                  run_presets={"mine": RunPreset(model="tiny", policy="nope", train="tiny")})]

    plugin = Plugin()
    default_registry().register(plugin, name="test-misnamed-presets")
    try:
        with pytest.raises(WmzooError, match=r"^unknown preset 'nope' of policy 'dreamer' \(named by run preset "
                                             r"'mine' of backbone 'misnamed-presets'\); known: "):
            run_spec("misnamed-presets", "minigrid-empty-5x5", "mine")
        with pytest.raises(WmzooError, match=r"^unknown preset 'huge' of backbone 'rssm'; known"):  # typed: no note
            run_spec("rssm", "minigrid-empty-5x5", "huge")
    finally:
        default_registry().unregister(plugin)
