"""``wmzoo data generate``: splits, manifest, checksums, determinism, resuming, one-line errors."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from memory_fakes import CONTEXT, QUERY, FakeEnvs, FakeMemoryTask

from wmzoo.atomic import temporary_path
from wmzoo.cli import main
from wmzoo.data import Replay
from wmzoo.data import generate as gen
from wmzoo.data.dataset import MANIFEST, Manifest, iter_episodes, sha256, training_dir
from wmzoo.data.generate import generate
from wmzoo.data.splits import parse_split, split_counts, split_of
from wmzoo.data.store import ChunkName
from wmzoo.errors import WmzooError
from wmzoo.registry import default_registry


@pytest.fixture(autouse=True)
def fake_envs():
    plugin = FakeEnvs()
    default_registry().register(plugin)
    yield
    default_registry().unregister(plugin)


def quiet(*_: object) -> None:
    pass


def checksums(root) -> list[str]:
    return [e.sha256 for _, e in sorted(Manifest.read(root).files.items())]


def test_generate_writes_splits_manifest_and_checksums(tmp_path):
    root = tmp_path / "ds"
    generate("fake-memory", 10, root, size=16, seed=3, log=quiet)
    raw = json.loads((root / MANIFEST).read_text())
    assert raw["counts"] == {"train": 8, "val": 1, "test": 1} and raw["complete"]
    assert (raw["env"], raw["size"], raw["seed"], raw["policy"]) == ("fake-memory", 16, 3, "scripted")
    assert (raw["context_length"], raw["query_length"]) == (CONTEXT, QUERY)
    assert [f["index"] for f in raw["files"]] == list(range(10))
    assert [f["split"] for f in raw["files"]] == ["train"] * 8 + ["val", "test"]
    for f in raw["files"]:
        path = root / f["file"]
        assert path.parent.name == f["split"] and sha256(path) == f["sha256"]
        assert f["rows"] == CONTEXT + QUERY == ChunkName.parse(path.name).rows
    for split in ("train", "val", "test"):
        assert json.loads((root / split / "env.json").read_text())["obs_shape"] == [3, 16, 16]
    episode = next(iter_episodes(root, "test"))
    assert episode["obs"].shape == (11, 3, 16, 16) and episode["is_first"].tolist() == [True] + [False] * 10
    assert episode["phase"].tolist() == [0] * CONTEXT + [1] * QUERY
    assert episode["probe_pos"].shape == (11, 2) and episode["info_unlock_attempt"].dtype == np.bool_
    assert episode["action"][-1] == 0 and episode["reward"][-1] == 0 and not episode["terminal"][-1]
    assert episode["terminal"][-2]  # the task ends on its last step


def test_the_replay_and_the_offline_trainer_read_a_dataset(tmp_path):
    root = tmp_path / "ds"
    generate("fake-memory", 10, root, size=16, log=quiet)
    assert training_dir(root) == root / "train" and training_dir(root / "train") == root / "train"
    replay = Replay.load(training_dir(root))  # extra arrays (phase, probe_*, info_*) are ignored
    assert len(replay) == 8 * 11 and replay.episodes == 8
    batch = replay.sample(16, 30)  # the train split is one stream: windows cross episodes
    assert batch.obs.shape == (16, 30, 3, 16, 16) and batch.is_first.any()
    assert not any(p.name.endswith(".tmp") for p in root.rglob("*"))


def test_generation_is_deterministic_per_seed(tmp_path):
    generate("fake-memory", 6, tmp_path / "a", size=16, seed=5, log=quiet)
    generate("fake-memory", 6, tmp_path / "b", size=16, seed=5, log=quiet)
    generate("fake-memory", 6, tmp_path / "c", size=16, seed=6, log=quiet)
    assert checksums(tmp_path / "a") == checksums(tmp_path / "b")  # byte-identical files
    assert checksums(tmp_path / "a") != checksums(tmp_path / "c")
    # episode i is episode 0 of a dataset seeded seed + i
    generate("fake-memory", 6, tmp_path / "d", size=16, seed=7, log=quiet)
    a = dict(np.load(tmp_path / "a" / Manifest.read(tmp_path / "a").files[2].file))
    d = dict(np.load(tmp_path / "d" / Manifest.read(tmp_path / "d").files[0].file))
    assert all(np.array_equal(a[k], d[k]) for k in a)


def test_one_split_alone_is_the_same_files_and_a_full_run_completes_it(tmp_path):
    # Catches: ``only`` ignored (every episode written) or the wrong split's indices kept
    generate("fake-memory", 10, tmp_path / "full", size=16, seed=3, log=quiet)
    generate("fake-memory", 10, tmp_path / "part", size=16, seed=3, log=quiet, only="test")
    part = Manifest.read(tmp_path / "part")
    assert [e.split for e in part.files.values()] == ["test"] and not part.complete
    assert part.files[9].sha256 == Manifest.read(tmp_path / "full").files[9].sha256
    generate("fake-memory", 10, tmp_path / "part", size=16, seed=3, log=quiet)
    assert checksums(tmp_path / "part") == checksums(tmp_path / "full")


@pytest.mark.parametrize("start", ["forkserver", pytest.param("spawn", marks=pytest.mark.slow)])
def test_workers_give_the_same_files_and_random_policy_is_announced(tmp_path, monkeypatch, start):
    monkeypatch.setattr(gen, "_START_METHOD", start)
    lines: list[str] = []
    generate("minigrid-empty-5x5", 5, tmp_path / "one", size=16, seed=1, log=quiet)
    generate("minigrid-empty-5x5", 5, tmp_path / "two", size=16, seed=1, workers=2, log=lines.append)
    assert checksums(tmp_path / "one") == checksums(tmp_path / "two")
    assert "uniformly random policy" in lines[0] and "2 workers" in lines[1]
    assert Manifest.read(tmp_path / "two").policy == "random"


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupted_run_resumes_and_leaves_no_partial_episode(tmp_path, monkeypatch, how):
    generate("fake-memory", 10, tmp_path / "whole", size=16, log=quiet)
    root, calls, original = tmp_path / "ds", {"n": 0}, gen.record_episode

    def record_then_stop(env, seed):
        calls["n"] += 1
        if calls["n"] == 5:
            if how == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
            raise KeyboardInterrupt
        return original(env, seed)

    monkeypatch.setattr(gen, "record_episode", record_then_stop)
    with pytest.raises(WmzooError, match="interrupted after 4 of 10 episodes; run the same command"):
        generate("fake-memory", 10, root, size=16, log=quiet)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is restored
    assert sorted(Manifest.read(root).files) == [0, 1, 2, 3]
    assert len(list((root / "train").glob("*.npz"))) == 4
    # a kill in the middle of writing episode 4 left its temporary file, and episode 5 was
    # written after the manifest was last saved: the first is dropped, the second kept
    monkeypatch.setattr(gen, "record_episode", original)
    whole = Manifest.read(tmp_path / "whole").files
    (root / whole[4].file).with_suffix(".npz.tmp").write_bytes(b"PK\x03\x04 partial")
    (root / whole[5].file).write_bytes((tmp_path / "whole" / whole[5].file).read_bytes())
    lines: list[str] = []
    generate("fake-memory", 10, root, size=16, log=lines.append)
    assert any("generating 5 of 10" in line for line in lines)
    assert checksums(root) == checksums(tmp_path / "whole")
    assert not any(p.name.endswith(".tmp") for p in root.rglob("*"))


def test_a_leftover_of_an_atomic_write_is_removed_on_the_next_run(tmp_path):
    generate("fake-memory", 4, tmp_path, size=16, log=quiet)
    leftover = temporary_path(tmp_path / Manifest.read(tmp_path).files[0].file)
    leftover.write_bytes(b"PK\x03\x04 partial")
    generate("fake-memory", 4, tmp_path, size=16, log=quiet)
    assert not leftover.exists()


@pytest.mark.heavy
def test_an_interrupted_pool_stops_its_workers_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setattr(gen, "_MANIFEST_EVERY_S", -1.0)  # record (and log) after every episode
    progress: list[str] = []

    def log(line: str) -> None:
        progress.append(line)
        if line.startswith("  3/"):
            raise KeyboardInterrupt  # Ctrl-C reaches the parent while the workers record

    root = tmp_path / "ds"
    with pytest.raises(WmzooError, match="interrupted after 3 of 8 episodes"):
        generate("minigrid-empty-5x5", 8, root, size=16, workers=2, log=log)
    listed = Manifest.read(root).files
    assert len(listed) >= 3 and all(sha256(root / e.file) == e.sha256 for e in listed.values())
    assert not any(p.name.endswith(".tmp") for p in root.rglob("*"))
    generate("minigrid-empty-5x5", 8, root, size=16, workers=2, log=quiet)
    generate("minigrid-empty-5x5", 8, tmp_path / "whole", size=16, log=quiet)
    assert checksums(root) == checksums(tmp_path / "whole")


def test_a_corrupt_episode_is_generated_again(tmp_path):
    root = tmp_path / "ds"
    generate("fake-memory", 4, root, size=16, split=(0.5, 0.25, 0.25), log=quiet)
    before = checksums(root)
    path = root / Manifest.read(root).files[1].file
    raw = bytearray(path.read_bytes())
    raw[100] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(WmzooError, match="checksum differs"):
        list(iter_episodes(root, "train"))
    lines: list[str] = []
    generate("fake-memory", 4, root, size=16, split=(0.5, 0.25, 0.25), log=lines.append)
    assert any("incomplete or corrupt" in line for line in lines) and checksums(root) == before
    lines.clear()
    generate("fake-memory", 4, root, size=16, split=(0.5, 0.25, 0.25), log=lines.append)
    assert any("all 4 episodes already complete" in line for line in lines)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--seed", "1"], "generated with --seed 0, not 1"),
        (["--split", "0.6,0.2,0.2"], "generated with --split 0.8,0.1,0.1, not 0.6,0.2,0.2"),
        (["--size", "32"], "generated with --size 16, not 32"),
    ],
)
def test_mismatched_arguments_are_one_line_errors(tmp_path, capsys, extra, message):
    args = ["data", "generate", "--env", "fake-memory", "--episodes", "3", "--out", str(tmp_path), "--size", "16"]
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_dataset_of_another_env_version_is_read_as_it_is_and_never_resumed(tmp_path, capsys, monkeypatch):
    # Catches: a resumed dataset mixing episodes from before and after a change that makes a seed
    # draw other episodes; or the refusal deleting, rewriting or re-verifying-away what is there.
    whole, part = tmp_path / "whole", tmp_path / "part"
    args = ["data", "generate", "--env", "fake-memory", "--episodes", "4", "--size", "16"]
    assert main([*args, "--out", str(whole)]) == main([*args, "--episodes", "4", "--out", str(part)]) == 0
    manifest = Manifest.read(part)
    del manifest.files[3]  # interrupted before its last episode
    manifest.write(part)
    assert Manifest.read(whole).env_version == 1  # FakeMemoryTask declares no data_version
    files = {p: p.read_bytes() for p in part.rglob("*") if p.is_file()}
    monkeypatch.setattr(FakeMemoryTask, "data_version", 2, raising=False)
    capsys.readouterr()
    assert main([*args, "--out", str(part)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "3 verified of 4 episodes, recorded by version 1 of fake-memory's" in err
    assert "this wmzoo records version 2" in err and "choose another --out" in err
    assert {p: p.read_bytes() for p in part.rglob("*") if p.is_file()} == files  # nothing changed
    assert main([*args, "--out", str(whole)]) == 0  # complete: read as it is, its version said
    out = capsys.readouterr().out
    assert "all 4 episodes already complete (checksums verified; recorded by version 1" in out
    assert Manifest.read(whole).env_version == 1
    path = whole / Manifest.read(whole).files[2].file
    path.write_bytes(path.read_bytes()[:-7])  # a damaged episode cannot be regenerated either
    assert main([*args, "--out", str(whole)]) == 2
    assert "3 verified of 4 episodes" in capsys.readouterr().err and path.exists()
    fresh = tmp_path / "fresh"
    assert main([*args, "--out", str(fresh)]) == 0 and Manifest.read(fresh).env_version == 2
    monkeypatch.setattr(FakeMemoryTask, "data_version", 0)
    assert main([*args, "--out", str(tmp_path / "bad")]) == 2
    assert "FakeMemoryTask.data_version is 0; it must be a positive integer" in capsys.readouterr().err


@pytest.mark.parametrize(("version", "shown"), [('"2"', "'2'"), ("0", "0"), ("true", "True")])
def test_a_manifest_with_a_bad_env_version_is_corrupt(tmp_path, version, shown):
    # Catches: a hand-edited version accepted (a string never equals the env's int: resumes refused forever)
    generate("fake-memory", 2, tmp_path, size=16, split=(0.5, 0.5, 0.0), log=quiet)
    raw = (tmp_path / MANIFEST).read_text()
    assert '"env_version": 1' in raw
    (tmp_path / MANIFEST).write_text(raw.replace('"env_version": 1', f'"env_version": {version}'))
    with pytest.raises(WmzooError, match=f"corrupt .*env_version {shown} is not a positive integer"):
        Manifest.read(tmp_path)
    old = json.loads(raw)
    del old["env_version"]  # a manifest written before the field
    (tmp_path / MANIFEST).write_text(json.dumps(old))
    assert Manifest.read(tmp_path).env_version == 1


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        ("corrupt manifest", [], "manifest.json is corrupt"),
        (None, ["--split", "0.5,0.5"], "expected three non-negative numbers"),
        (None, ["--split", "0,1,1"], "with train > 0"),
        (None, ["--workers", "0"], "--workers 0: must be between 1 and 256"),
        (None, ["--env", "no-such-env"], "unknown environment"),
    ],
)
def test_bad_input_is_a_one_line_error(tmp_path, capsys, setup, args, message):
    if setup == "corrupt manifest":
        (tmp_path / MANIFEST).write_text("{not json")
    base = {"--env": "fake-memory", "--episodes": "3", "--out": str(tmp_path), "--size": "16"}
    for key, value in zip(args[::2], args[1::2]):
        base[key] = value
    assert main(["data", "generate", *[x for kv in base.items() for x in kv]]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@given(st.integers(1, 50_000), st.sampled_from([(0.8, 0.1, 0.1), (28 / 30, 1 / 30, 1 / 30), (1.0, 0.0, 0.0),
                                                  (0.5, 0.25, 0.25)]))
def test_split_counts_cover_every_episode_once(episodes, split):
    counts = split_counts(episodes, split)
    assert sum(counts.values()) == episodes and counts["train"] >= 1
    places = [split_of(i, counts) for i in range(min(episodes, 200))]
    assert len(set(places)) == len(places)
    if episodes in (10_000, 30_000) and split != (1.0, 0.0, 0.0):
        assert counts["val"] == counts["test"] == round(episodes * split[1])


def test_split_ratios_are_normalised_and_compared_with_tolerance(tmp_path):
    assert parse_split("28,1,1") == pytest.approx((28 / 30, 1 / 30, 1 / 30))
    generate("fake-memory", 3, tmp_path, size=16, split=parse_split("8,1,1"), log=quiet)
    lines: list[str] = []
    generate("fake-memory", 3, tmp_path, size=16, split=parse_split("0.8,0.1,0.1"), log=lines.append)
    assert any("already complete" in line for line in lines)


def test_paper_sizes():
    assert split_counts(10_000, (0.8, 0.1, 0.1)) == {"train": 8000, "val": 1000, "test": 1000}
    assert split_counts(30_000, (28 / 30, 1 / 30, 1 / 30)) == {"train": 28000, "val": 1000, "test": 1000}


# catches: taking an unlisted file that reads as a chunk for its episode when it holds another
# episode's rows (a copy of a listed file), so the dataset silently holds one episode twice
def test_an_unlisted_copy_of_another_episode_is_generated_again(tmp_path):
    whole = tmp_path / "whole"
    generate("fake-memory", 6, whole, size=16, log=quiet)
    root = tmp_path / "root"
    generate("fake-memory", 6, root, size=16, log=quiet)
    manifest = Manifest.read(root)
    copy, victim = manifest.files[1], manifest.files.pop(4)  # 4: written after the last save
    (root / victim.file).write_bytes((root / copy.file).read_bytes())
    manifest.write(root)
    lines: list[str] = []
    generate("fake-memory", 6, root, size=16, log=lines.append)
    assert any("generating 1 of 6" in line for line in lines), lines
    assert checksums(root) == checksums(whole)


def test_babyai_dataset_is_expert_demonstrations_with_missions(tmp_path):
    # catches: a BabyAI dataset recorded with random actions (manifest "random", rewards ~0), the
    # mission lost on the way to disk (unicode arrays need no pickle)
    pytest.importorskip("minigrid")
    manifest = generate("babyai-goto-local", 10, tmp_path / "d", size=16, log=lambda _: None)
    assert manifest.policy == "expert" and Manifest.read(tmp_path / "d").policy == "expert"
    episodes = list(iter_episodes(tmp_path / "d", "train", None))
    assert len(episodes) == 8
    assert all(e["reward"].sum() > 0 and e["mission"].dtype.kind == "U" for e in episodes)
    assert all(str(e["mission"][0]).startswith("go to") for e in episodes)


@pytest.mark.heavy  # a real `wmzoo data generate` with worker processes, stopped by its process group
def test_sigterm_to_the_whole_process_group_stops_generation_within_seconds(tmp_path):
    # Catches: SIGTERM sent to the process group (as `timeout` and shells send it) killing a pool
    # worker while it held the task queue's lock, so the parent printed its interruption line and
    # then hung in Pool.terminate() for good; and the run not resuming afterwards.
    import os
    import signal
    import subprocess
    import sys
    import time

    root = tmp_path / "ds"
    # 3 workers, 4 long episodes: once the first three are written, two workers wait for work (a
    # pool's idle worker blocks in the task queue's get() holding its lock) while one records
    argv = [sys.executable, "-m", "wmzoo.cli", "data", "generate", "--env", "distracting-memory-400", "--episodes",
            "4", "--size", "16", "--workers", "3", "--out", str(root)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 120
    while len(list(root.rglob("*.npz"))) < 3 and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    start = time.time()
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = [line for line in err.splitlines() if line.strip()]
    assert time.time() - start < 15, f"took {time.time() - start:.1f} s to stop"
    assert proc.returncode == 2 and len(lines) == 1 and "interrupted after" in lines[0], (proc.returncode, err)
    listed = Manifest.read(root).files
    assert listed and all(sha256(root / e.file) == e.sha256 for e in listed.values())
    assert not any(p.name.endswith(".tmp") for p in root.rglob("*"))
