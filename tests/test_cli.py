"""The CLI: listing, one-line errors with exit code 2, nothing written over."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from wmzoo.cli import main


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_json_through_the_console_script():
    result = subprocess.run(
        [sys.executable, "-m", "wmzoo.cli", "list", "--format", "json"],
        capture_output=True, text=True, check=True,
    )
    rows = json.loads(result.stdout)
    by_name = {(r["name"], r["kind"]): r for r in rows}
    assert {"name", "kind", "available", "reason"} <= set(rows[0])
    assert by_name[("rssm", "backbone")]["available"] is True
    assert by_name[("dreamer", "policy")]["available"] is True
    for env in ("crafter", "atari-pong", "minigrid-*", "memory-maze", "memory-maze-15x15"):
        assert (env, "env") in by_name, env


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--backbone", "rsm"], "unknown backbone 'rsm'; did you mean: rssm"),
        (["run", "--env", "atari-pongg"], "unknown environment 'atari-pongg'; did you mean: atari-pong?"),
        (["run", "--set", "model.deter=-3"], "model.deter: Input should be greater than or equal to"),
        (["run", "--set", "model.deter=abc"], "model.deter: Input should be a valid integer"),
        (["run", "--set", "deter=64"], "did you mean --set model.deter=64?"),
        (["run", "--set", "train.steps"], "expected KEY=VALUE"),
        (["run", "--preset", "huge"], "unknown preset 'huge' of backbone 'rssm'; known: paper, paper-2d, paper-atari100k, small, tiny"),
        (["bench", "--backbones", "rssm:nope", "--mode", "train"], "unknown preset"),
        (["eval", "--checkpoint", "/nonexistent/ckpt.safetensors"], "no such file"),
        (["eval", "--checkpoint", "x", "--temperature", "0"], "--temperature 0.0: must be between 0.001 and 1000"),
        (["imagine", "--checkpoint", "x", "--out", "movie.mp4"], "must end in .gif or .png"),
        (["run", "--steps", "many"], "invalid int value: 'many'"),
        # a value pydantic accepts but the model cannot be built with (64 / 2**7 < 1 pixel);
        # catches a build error escaping as a traceback, for the bundled rssm as for any plugin
        (["run", "--backbone", "rssm", "--env", "minigrid-empty-5x5", "--set", "model.cnn_stages=7"],
         "backbone 'rssm': cnn_stages=7: a 64x64 image must be divisible by 2**stages = 128; use cnn_stages between 1 and 6"),
        (["run", "--set", "model.detr=64"], "model.detr: unknown field; did you mean deter?"),
        (["run", "--set", "model.optim.lrr=0.1"], "model.optim.lrr: unknown field; did you mean lr?"),
        (["run", "--resume"], "--resume needs --logdir"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(("module", "env", "extra"), [
    ("ale_py", "atari-pong", "atari"), ("dm_control", "dmc-walker-walk", "dmc"),
])
def test_missing_optional_dependency(capsys, tmp_path, monkeypatch, module, env, extra):
    monkeypatch.setitem(sys.modules, module, None)  # as if the extra were not installed
    code, _, err = run_cli(capsys, "run", "--env", env, "--logdir", str(tmp_path / "r"))
    assert code == 2
    assert f'pip install "wmzoo[{extra}]"' in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_corrupt_checkpoint_is_one_line(capsys, tmp_path):
    bad = tmp_path / "checkpoint.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{broken json")
    before = bad.read_bytes()
    for command in (["eval", "--checkpoint", str(bad)], ["imagine", "--checkpoint", str(bad), "--out", str(tmp_path / "x.gif")]):
        code, _, err = run_cli(capsys, *command)
        assert code == 2 and "corrupt or truncated" in err and err.count("\n") == 1
    assert bad.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.safetensors"]


def test_spec_prints_fields_with_bounds(capsys):
    code, out, _ = run_cli(capsys, "spec", "--backbone", "rssm", "--preset", "paper")
    assert code == 0
    assert "deter: 2048" in out
    assert "model.deter" in out and "train.train_ratio" in out and "policy.horizon" in out


def test_spec_prints_the_parameters_of_each_component(capsys):
    # Catches: parameter counts of another preset or env than the one printed above them, or a
    # component left out (IRIS/REM's tokenizer and world model are counted apart).
    from wmzoo.cli import main

    assert main(["spec", "--backbone", "iris", "--preset", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "# parameters on minigrid-empty-5x5 at" in out
    counts = {line.split(":")[0].strip("# ").strip(): int(line.rsplit(":", 1)[1].replace(",", ""))
              for line in out.splitlines() if line.startswith("#   world model /") or line.startswith("#   policy ")}
    from wmzoo.config import run_spec
    from wmzoo.registry import build_world_model, env_info, make_env

    run = run_spec("iris", None, "tiny", None, None, None, [])
    env = make_env(run.env, size=run.train.image_size)
    wm = build_world_model("iris", run.model, env_info(env, run.env))
    env.close()
    assert counts["world model / tokenizer"] == sum(p.numel() for p in wm.tokenizer.parameters())
    assert set(counts) == {"world model / tokenizer", "world model / world_model", "policy iris-ac"}


def test_bench_help_gives_every_size_its_meaning_and_default(capsys):
    # Catches: `wmzoo bench --help` listing --batch, --iters and --warmup without what they mean
    # or their defaults.
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option, default in (("--batch BATCH", 16), ("--iters ITERS", 5), ("--warmup WARMUP", 1), ("--seq-len SEQ_LEN", 64)):
        after = text.split(f"{option} ", 2)[-1]
        assert f"(default: {default})" in after.split(" --")[0], (option, after[:120])


def test_list_keeps_its_columns_aligned_past_long_names(capsys):
    # Catches: a fixed 24-character name column, which pushed the status of
    # `dmc-proprio-cartpole-balance-sparse` (35 characters) out of line with every other row.
    assert main(["list", "--kind", "envs"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()[1:] if line.split()[1:2] == ["ok"]]
    longest = max(len(line.split()[0]) for line in rows)
    assert longest > 24 and {line.index(" ok ", 2) for line in rows} == {2 + longest}


_MALLINFO = """
import ctypes
from wmzoo.cli import keep_freed_memory
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
kept = keep_freed_memory()
before = libc.mallinfo2().hblkhd
block = bytearray(100 << 20)  # over glibc's 32 MiB ceiling of its mmap threshold
print(kept, libc.mallinfo2().hblkhd - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
@pytest.mark.parametrize("setting, kept", [(None, True), ("system", False)])
def test_the_cli_keeps_freed_memory_in_mallocs_heap_unless_told_not_to(setting, kept, monkeypatch):
    # Catches: another mallopt parameter set (the 100 MiB block still mapped on its own), the
    # WMZOO_MALLOC=system opt-out ignored, and (below) the CLI not calling it.
    env = {k: v for k, v in __import__("os").environ.items() if k != "WMZOO_MALLOC"}
    if setting:
        env["WMZOO_MALLOC"] = setting
    out = subprocess.run([sys.executable, "-c", _MALLINFO], env=env, capture_output=True, text=True, check=True)
    flag, mapped = out.stdout.split()
    assert flag == str(kept)
    assert (int(mapped) == 0) is kept  # kept: from the heap, no block mapped for it
    import wmzoo.cli as cli

    calls: list[int] = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: calls.append(1) or True)
    assert main(["list"]) == 0
    assert calls == [1]
