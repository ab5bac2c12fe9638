"""Experiment trackers (``train.loggers``): W&B (offline) and MLflow (file store) receive the same
scalar series, image and GIF as TensorBoard; a missing package is one line naming the extra."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from wmzoo.cli import main
from wmzoo.specs import TrainSpec, validate
from wmzoo.train import trackers

HAVE_TRACKERS = all(importlib.util.find_spec(m) for m in ("wandb", "mlflow"))
needs_trackers = pytest.mark.skipif(
    not HAVE_TRACKERS, reason='wandb and mlflow are not installed (pip install "wmzoo[trackers]")'
)

Series = dict[str, list[tuple[int, float]]]


def tensorboard_series(tb: Path) -> tuple[Series, dict[str, list[bytes]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tb), size_guidance={"images": 0, "scalars": 0}).Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    images = {tag: [e.encoded_image_string for e in events.Images(tag)] for tag in events.Tags()["images"]}
    return scalars, images


def wandb_records(path: Path) -> list[bytes]:
    """The records of a ``.wandb`` file: W&B's header (``:W&B``, magic, version: 7 bytes), then
    LevelDB's log format (32 KiB blocks; each record a 7-byte header: CRC, length, type)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, pending, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            records.append(pending)
            pending = b""
    return records


def wandb_series(run_dir: Path) -> Series:
    """Every numeric history value by key, against the run's ``step``."""
    from wandb.proto import wandb_internal_pb2

    series: Series = {}
    for path in sorted(run_dir.glob("offline-run-*/run-*.wandb")):  # the first run, then its resumption
        for data in wandb_records(path):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            if record.WhichOneof("record_type") != "history":
                continue
            items = {tuple(item.nested_key) or (item.key,): json.loads(item.value_json) for item in record.history.item}
            # an image's or video's fields are nested keys beside its _type (imagination/height, ...)
            media = {key[:-1] for key in items if key[-1] == "_type"}
            row = {"/".join(key): value for key, value in items.items()
                   if not any(key[: len(m)] == m for m in media)}
            for key, value in row.items():
                if not key.startswith("_") and key != "step" and isinstance(value, (int, float)):
                    series.setdefault(key, []).append((row["step"], float(value)))
    return series


def _close(a: Series, b: Series) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        steps_a, values_a = zip(*a[key])
        steps_b, values_b = zip(*b[key])
        assert steps_a == steps_b, key
        for x, y in zip(values_a, values_b):
            assert math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-6), (key, x, y)  # TensorBoard keeps float32


@needs_trackers
def test_wandb_and_mlflow_get_tensorboards_scalars_image_and_gif(capsys, tmp_path, monkeypatch):
    # Catches: a tracker missing a write (or getting another step, or the unaveraged values), the
    # image or GIF not sent to one, and --resume starting new tracker runs instead of continuing.
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'mlruns'}")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    logdir = tmp_path / "run"
    common = ["--logdir", str(logdir), "--no-progress"]
    assert main(["run", "--env", "minigrid-empty-5x5", "--preset", "tiny", "--steps", "230",
                 "--set", "train.log_every=10", "--set", "train.loggers=[tensorboard,wandb,mlflow]", *common]) == 0
    ids = json.loads((logdir / "trackers.json").read_text())
    assert main(["run", "--resume", "--steps", "250", *common]) == 0, capsys.readouterr().err
    assert json.loads((logdir / "trackers.json").read_text()) == ids  # the same runs continued

    tb, images = tensorboard_series(logdir / "tb")
    assert {"model/loss", "episode/return", "fps"} <= set(tb) and max(s for s, _ in tb["model/loss"]) == 250
    assert len(tb["model/loss"]) >= 5
    _close(wandb_series(logdir / "wandb"), tb)

    client = MlflowClient(f"file:{tmp_path / 'mlruns'}")
    run = client.get_run(ids["mlflow"])
    # params are the first run's: MLflow never changes a logged param
    assert run.info.status == "FINISHED" and run.data.params["train.steps"] == "230"
    mlflow = {key: [(m.step, m.value) for m in sorted(client.get_metric_history(ids["mlflow"], trackers.mlflow_key(key)),
                                                       key=lambda m: (m.step, m.timestamp))]
              for key in tb}
    assert set(run.data.metrics) == {trackers.mlflow_key(key) for key in tb}
    _close(mlflow, tb)

    gif = (logdir / "imagination.gif").read_bytes()
    assert images["imagination_gif"][-1] == gif and len(images["imagination"]) == 2  # one per run
    media = logdir / "wandb"
    videos = [p.read_bytes() for p in sorted(media.glob("offline-run-*/files/media/videos/*.gif"))]
    assert len(videos) == 2 and videos[-1] == gif and videos[0][:6] == b"GIF89a"  # one per run
    assert len(list(media.glob("offline-run-*/files/media/images/*.png"))) == 2
    artifacts = Path(run.info.artifact_uri.removeprefix("file://").removeprefix("file:"))
    assert (artifacts / "imagination_gif" / "imagination.gif").read_bytes() == gif
    assert len(list((artifacts / "images").glob("imagination+step+*.png"))) == 2


def test_a_missing_tracker_package_is_one_line_naming_the_extra(capsys, tmp_path, monkeypatch):
    # Catches: the run starting (a logdir written) before the missing package is noticed, or a
    # traceback instead of the extra to install.
    monkeypatch.setitem(trackers.TRACKERS, "wandb", ("wmzoo_no_such_module", trackers.WandbTracker))
    logdir = tmp_path / "run"
    code = main(["run", "--steps", "5", "--set", "train.loggers=[tensorboard,wandb]", "--logdir", str(logdir)])
    assert code == 2
    assert capsys.readouterr().err == (
        "wmzoo: error: train.loggers: wandb needs the package wmzoo_no_such_module, which is not installed: "
        'pip install "wmzoo[trackers]"\n'
    )
    assert not logdir.exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [(["tensorboard", "comet"], "train.loggers.1: Input should be 'tensorboard', 'wandb' or 'mlflow' (got 'comet')"),
     (["mlflow", "mlflow"], "train.loggers: mlflow listed more than once")],
)
def test_loggers_are_validated(value, message):
    with pytest.raises(Exception) as info:
        validate(TrainSpec, {"loggers": value}, "train")
    assert str(info.value) == message


def test_one_logger_may_be_named_alone():
    assert validate(TrainSpec, {"loggers": "wandb"}, "train").loggers == ("wandb",)
    assert TrainSpec().loggers == ("tensorboard",)
