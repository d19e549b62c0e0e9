"""The trackers of `metrics.trackers` beside metrics.jsonl: TensorBoard, MLflow (a local file store
in RUN/mlruns unless MLFLOW_TRACKING_URI) and W&B (offline in RUN/wandb unless WANDB_MODE), each
given the record's flat scalars; mlflow and wandb are imported only when named."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from trainer.config import Tracker


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The record's numbers by tracker tag (`step` is the x axis, not a value): `val/...` keys
    as they are, the rest under `train/`; a dict of numbers (tokens per component) is flattened
    to `train/<key>/<name>`."""
    values: dict[str, float] = {}
    for key, value in record.items():
        tag = key if key.startswith("val/") else f"train/{key}"
        if isinstance(value, dict):
            for name, item in value.items():
                if isinstance(item, (int, float)) and not isinstance(item, bool):
                    values[f"{tag}/{name}"] = float(item)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step":
            values[tag] = float(value)
    return values


class Sink(Protocol):
    def log(self, values: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink:
    """RUN/tensorboard/ event files."""

    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, values: dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def close(self) -> None:
        self.writer.close()


class MlflowSink:
    """One MLflow run per run directory (a resumed launch appends to it), in experiment
    `run.name`. Tracking URI: MLFLOW_TRACKING_URI, else the file store RUN/mlruns (MLflow 3
    refuses file stores unless MLFLOW_ALLOW_FILE_STORE=true, which is set for that one)."""

    def __init__(self, run_dir: Path, experiment: str) -> None:
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (run_dir.resolve() / "mlruns").as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        key = str(run_dir.resolve()).replace("'", "")
        runs = self.client.search_runs(
            [experiment_id], filter_string=f"tags.`pretrain.run_dir` = '{key}'", max_results=1
        )
        if runs:
            self.run_id = runs[0].info.run_id
        else:
            tags = {"pretrain.run_dir": key}
            created = self.client.create_run(experiment_id, run_name=run_dir.name, tags=tags)
            self.run_id = created.info.run_id

    def log(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(tag, value, now, step) for tag, value in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandbSink:
    """A W&B run in RUN/wandb, offline unless WANDB_MODE says otherwise (`wandb sync RUN/wandb/
    offline-run-*` uploads it), project WANDB_PROJECT or `run.name`, its id fixed by the run
    directory so a resumed launch continues the same run. W&B ignores a step lower than one it
    has seen: the replayed steps after a rollback are in metrics.jsonl, not in W&B."""

    def __init__(self, run_dir: Path, project: str) -> None:
        import wandb

        run_id = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:16]
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True)
        self.run = wandb.init(
            dir=str(run_dir),
            mode=None if os.environ.get("WANDB_MODE") else "offline",  # None: wandb reads it
            project=os.environ.get("WANDB_PROJECT") or project,
            name=run_dir.name,
            id=run_id,
            resume="allow",
            settings=settings,
        )

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()


def open_sinks(trackers: tuple[Tracker, ...], run_dir: Path, name: str) -> list[Sink]:
    """The sinks of `metrics.trackers` (each once, in order) for the run in `run_dir`."""
    import importlib.util

    from pretrain.errors import ConfigError

    sinks: list[Sink] = []
    for tracker in dict.fromkeys(trackers):
        if tracker != "tensorboard" and importlib.util.find_spec(tracker) is None:
            raise ConfigError(
                f"metrics.trackers names {tracker} but it is not installed; "
                "pip install 'pretrain-corpus[tracking]' or drop it from metrics.trackers"
            )
        if tracker == "tensorboard":
            sinks.append(TensorBoardSink(run_dir))
        elif tracker == "mlflow":
            sinks.append(MlflowSink(run_dir, name))
        else:
            sinks.append(WandbSink(run_dir, name))
    return sinks
