"""metrics.trackers: one short CPU run logs to TensorBoard, MLflow (local file store) and W&B
(offline), each read back with the tool's own reader; nothing reaches the network."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.trainer_testlib import run_ranks, tiny_config
from trainer.metrics import MetricsLog, read_metrics


def _wandb_history(run_file: Path) -> list[dict[str, float]]:
    """The history rows of an offline W&B run, parsed with wandb's own protobuf schema; the file
    is a LevelDB-style log (7-byte header, 32 KiB blocks of crc32/length/type-framed chunks), whose
    Python reader wandb no longer ships."""
    from wandb.proto import wandb_internal_pb2

    data, pos, chunk, rows = run_file.read_bytes(), 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = chunk + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            chunk = b""
            if record.WhichOneof("record_type") == "history":
                items = record.history.item
                rows.append(
                    {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
                )
    return rows


ALL = ["tensorboard", "mlflow", "wandb"]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No tracker configured by the environment: the defaults (local files) are under test."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE", "WANDB_MODE", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")


def _mlflow_run(run_dir: Path, experiment: str) -> tuple[Any, list[tuple[int, float]]]:
    """The one MLflow run in RUN/mlruns and its train/loss history as (step, value)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run_dir / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    history = client.get_metric_history(run.info.run_id, "train/loss")
    return run, [(m.step, m.value) for m in history]


def _tensorboard_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in tags}


def test_each_record_reaches_every_tracker_with_its_nested_counts_flattened(
    tmp_path: Path, offline: None
) -> None:
    """MetricsLog's records (a step, an eval, an event without a step) through the three
    trackers: the step's numbers and its tokens per component, the eval's val/ numbers, and
    nothing of the event; the MLflow and W&B runs are finished at close."""
    log = MetricsLog(tmp_path, rank=0, trackers=tuple(ALL), name="x")
    tokens = {"web": 256, "code": 128}
    log.log({"step": 1, "loss": 5.5, "lr": 0.1, "tokens_per_component": tokens})
    log.log({"step": 1, "event": "eval", "val/loss": 5.0, "val/web/bpb": 1.5})
    log.log({"event": "checkpoint_skipped", "checkpoint": "iter_0000001", "reason": "bad"})
    log.log({"step": 2, "loss": 4.5, "lr": 0.1, "tokens_per_component": {"web": 512, "code": 256}})
    log.close()

    run, losses = _mlflow_run(tmp_path, "x")
    assert losses == [(1, 5.5), (2, 4.5)]
    assert run.data.metrics["train/tokens_per_component/code"] == 256
    assert run.data.metrics["val/web/bpb"] == 1.5
    assert run.info.status == "FINISHED"
    (wandb_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    rows = _wandb_history(wandb_file)
    assert [(row["_step"], row.get("train/loss")) for row in rows] == [(1, 5.5), (2, 4.5)]
    assert rows[0]["train/tokens_per_component/web"] == 256 and rows[0]["val/loss"] == 5.0
    scalars = _tensorboard_scalars(tmp_path)
    assert scalars["train/tokens_per_component/web"] == [(1, 256), (2, 512)]
    assert scalars["val/loss"] == [(1, 5.0)]


@pytest.mark.slow
def test_a_training_run_logs_each_steps_loss_and_tokens_to_every_tracker(
    tmp_path: Path, offline: None
) -> None:
    """A short CPU run with all three trackers: MLflow's and W&B's train/loss histories are
    metrics.jsonl's losses step for step; every tracker has the tokens per component."""
    run_dir = tmp_path / "run"
    metrics = {"trackers": ALL}
    run_ranks(tiny_config(run_dir, run={"train_steps": 3}, metrics=metrics), world=1)
    steps = [r for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    losses = [(r["step"], r["loss"]) for r in steps]
    tokens = {
        f"train/tokens_per_component/{name}": count
        for name, count in steps[-1]["tokens_per_component"].items()
    }
    assert tokens and all(count > 0 for count in tokens.values())

    run, history = _mlflow_run(run_dir, "run")
    assert history == losses
    assert {key: run.data.metrics[key] for key in tokens} == tokens
    (wandb_file,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    rows = _wandb_history(wandb_file)
    assert [(row["_step"], row["train/loss"]) for row in rows] == losses
    assert {key: rows[-1][key] for key in tokens} == tokens
    scalars = _tensorboard_scalars(run_dir)
    assert {key: scalars[key][-1][1] for key in tokens} == tokens
    assert [step for step, _ in scalars["train/loss"]] == [1, 2, 3]
