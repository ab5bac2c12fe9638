"""The experiment trackers a run logs to (``train.loggers``): TensorBoard, Weights & Biases, MLflow.

Every tracker receives the same things from :class:`wmzoo.train.logger.Logger`: the averaged
scalars at a step, the real-vs-imagined image strip, and the run's ``imagination.gif``.

- ``tensorboard`` (always installed): ``<logdir>/tb``; the GIF as an animated image.
- ``wandb``: a W&B run named after the logdir, the resolved spec as its config, files in
  ``<logdir>/wandb`` (unless ``WANDB_DIR`` says otherwise); project ``WANDB_PROJECT`` (default
  ``wmzoo``); ``WANDB_MODE=offline`` for no network (``wandb sync`` later). Scalars are plotted
  against the run's own ``step`` (env steps online, updates offline).
- ``mlflow``: an MLflow run in experiment ``MLFLOW_EXPERIMENT_NAME`` (default ``wmzoo``) at
  MLflow's tracking URI (``MLFLOW_TRACKING_URI``; without one, MLflow's default). The spec's
  fields are its params; images and the GIF are artifacts. A ``file:`` store is allowed
  (``MLFLOW_ALLOW_FILE_STORE`` defaults to true here). Scalar names use ``.`` where TensorBoard's
  use ``/`` (``model/loss`` → ``model.loss``): the file store keeps one file per name, and
  ``model`` beside ``model/loss`` cannot be a file and a folder at once.

W&B and MLflow come with ``pip install "wmzoo[trackers]"``. A run records their run ids in
``<logdir>/trackers.json``, so ``--resume`` continues the same tracker runs. On ``--resume``
TensorBoard drops what the interrupted attempt logged after the checkpoint's step
(``purge_step``); W&B and MLflow keep it (neither can remove logged points).
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from wmzoo.atomic import write_text_atomic
from wmzoo.errors import MissingDependencyError, WmzooError

EXTRA = "trackers"
IDS = "trackers.json"


class Tracker(ABC):
    """One destination of a run's scalars, images and GIFs."""

    #: what a tracker needs to remember to continue its run on ``--resume`` ("" for nothing)
    run_id: str = ""

    @abstractmethod
    def scalars(self, values: Mapping[str, float], step: int) -> None:
        """Scalars at ``step``."""

    @abstractmethod
    def image(self, tag: str, image: np.ndarray, step: int) -> None:
        """An image, uint8 ``[H, W, C]``."""

    @abstractmethod
    def gif(self, tag: str, path: Path, step: int) -> None:
        """An animated GIF already written at ``path``."""

    @abstractmethod
    def close(self) -> None:
        """Flush and end the run."""


class TensorBoardTracker(Tracker):
    def __init__(self, logdir: Path, config: Mapping[str, Any], run_id: str, resumed_at: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: TensorBoard hides the events an interrupted attempt wrote past the checkpoint
        self.writer = SummaryWriter(str(logdir / "tb"), purge_step=None if resumed_at is None else resumed_at + 1)

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def image(self, tag: str, image: np.ndarray, step: int) -> None:
        self.writer.add_image(tag, image, step, dataformats="HWC")
        self.writer.flush()

    def gif(self, tag: str, path: Path, step: int) -> None:
        """TensorBoard's image dashboard shows an encoded GIF as an animation."""
        from PIL import Image
        from tensorboard.compat.proto.summary_pb2 import Summary

        with Image.open(path) as gif:
            width, height = gif.size
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=path.read_bytes())
        self.writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker(Tracker):
    def __init__(self, logdir: Path, config: Mapping[str, Any], run_id: str, resumed_at: int | None = None) -> None:
        import wandb

        self.wandb = wandb
        where = {} if os.environ.get("WANDB_DIR") else {"dir": str(logdir)}
        try:
            self.run = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "wmzoo"), name=logdir.resolve().name,
                config=dict(config), id=run_id or None, resume="allow" if run_id else None, **where,
            )
        except Exception as exc:  # noqa: BLE001 - no login, no network, a bad setting: one line
            raise WmzooError(f"train.loggers: wandb could not start a run ({_first_line(exc)}); "
                             "log in with `wandb login`, or set WANDB_MODE=offline") from exc
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")
        self.run_id = self.run.id

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        self.run.log({**values, "step": step})

    def image(self, tag: str, image: np.ndarray, step: int) -> None:
        self.run.log({tag: self.wandb.Image(image), "step": step})

    def gif(self, tag: str, path: Path, step: int) -> None:
        self.run.log({tag: self.wandb.Video(str(path), format="gif"), "step": step})

    def close(self) -> None:
        self.run.finish()


class MlflowTracker(Tracker):
    def __init__(self, logdir: Path, config: Mapping[str, Any], run_id: str, resumed_at: int | None = None) -> None:
        import mlflow
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self.Metric = Metric
        uri = mlflow.get_tracking_uri()
        if uri.startswith("file:") or "://" not in uri:  # MLflow 3 refuses its file store unless asked
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        try:
            self.client = MlflowClient(uri)
            if run_id:
                self.client.update_run(run_id, status="RUNNING")
                self.run_id = run_id
                return
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "wmzoo")
            experiment = self.client.get_experiment_by_name(name)
            eid = experiment.experiment_id if experiment else self.client.create_experiment(name)
            run = self.client.create_run(eid, run_name=logdir.resolve().name,
                                         tags={"wmzoo.logdir": str(logdir.resolve())})
        except Exception as exc:  # noqa: BLE001 - an unreachable server, a refused store: one line
            raise WmzooError(f"train.loggers: mlflow could not start a run at {uri} ({_first_line(exc)}); "
                             "check MLFLOW_TRACKING_URI") from exc
        self.run_id = run.info.run_id
        params = [Param(key, str(value)[:6000]) for key, value in flatten(config)]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
            self.client.log_batch(self.run_id, params=params[i : i + 100])

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        metrics = [self.Metric(mlflow_key(key), float(value), now, step) for key, value in values.items()]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def image(self, tag: str, image: np.ndarray, step: int) -> None:
        self.client.log_image(self.run_id, image, key=tag, step=step)

    def gif(self, tag: str, path: Path, step: int) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path=tag)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


# name -> (the module it imports, its class); TrainSpec.loggers accepts these names
TRACKERS: dict[str, tuple[str, type[Tracker]]] = {
    "tensorboard": ("tensorboard", TensorBoardTracker),
    "wandb": ("wandb", WandbTracker),
    "mlflow": ("mlflow", MlflowTracker),
}


def check_trackers(names: Iterable[str]) -> None:
    """One line naming the extra to install for the first tracker whose package is missing."""
    for name in names:
        module = TRACKERS[name][0]
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise MissingDependencyError(
                f"train.loggers: {name} needs the package {module}, which is not installed: "
                f'pip install "wmzoo[{EXTRA}]"'
            )


def open_trackers(names: Iterable[str], logdir: Path, config: Mapping[str, Any],
                  resumed_at: int | None = None) -> list[Tracker]:
    """The trackers ``names``, continuing the runs recorded in ``<logdir>/trackers.json`` (from
    the checkpoint's step ``resumed_at``: see :class:`~wmzoo.train.logger.Logger`)."""
    names = list(names)
    check_trackers(names)
    path = logdir / IDS
    ids: dict[str, str] = json.loads(path.read_text()) if path.is_file() else {}
    trackers: list[Tracker] = []
    try:
        for name in names:
            trackers.append(TRACKERS[name][1](logdir, config, ids.get(name, ""), resumed_at))
    except BaseException:
        for tracker in trackers:
            tracker.close()
        raise
    new = {**ids, **{name: t.run_id for name, t in zip(names, trackers) if t.run_id}}
    if new != ids:
        write_text_atomic(path, json.dumps(new, indent=1))
    return trackers


def mlflow_key(key: str) -> str:
    """The MLflow name of a scalar: ``model/loss`` → ``model.loss`` (see the module's docstring)."""
    return key.replace("/", ".")


def flatten(tree: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    """``("model.deter", 512)`` pairs of a nested mapping."""
    for key, value in tree.items():
        if isinstance(value, Mapping):
            yield from flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}".rstrip(": ")
