"""Run metrics: the `Throughput` callback (MFU, memory, checkpoint time in each step's record) and
`MetricsLog` (rank 0 writes metrics.jsonl, the trackers and loss.png). MFU counts model FLOPs per
token from trainer.flops (the function `pretrain plan` uses): `MFU_FORMULA`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.callbacks import Callback
from trainer.trackers import Sink, open_sinks, scalars

if TYPE_CHECKING:
    from trainer.config import MetricsConfig, Tracker
    from trainer.loop import Trainer

MFU_FORMULA = "(6*N + 12*L*S*H*Q) * tokens_per_s / (devices * peak_flops)"


def measure_cpu_peak_flops(size: int = 512, repeat: int = 5) -> float:
    """fp32 matmul FLOP/s of this process's threads: the 'peak' MFU is measured against on CPU."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def assumed_peak(peak_flops: float | None, gpu_name: str, on_gpu: bool) -> tuple[float, str]:
    """(peak FLOP/s per device, where it came from)."""
    if peak_flops:
        return peak_flops, "config metrics.peak_flops"
    if on_gpu:
        from trainer.flops import gpu_spec

        name, spec = gpu_spec(gpu_name)
        return spec.peak_bf16, f"{name} dense bf16 datasheet"
    return measure_cpu_peak_flops(), "measured fp32 matmul 512^3 on this CPU, per rank"


def memory_mb(on_gpu: bool) -> dict[str, float]:
    if on_gpu:
        return {"gpu_max_allocated_mb": torch.cuda.max_memory_allocated() / 2**20}
    import psutil

    return {"rss_mb": psutil.Process().memory_info().rss / 2**20}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every record of metrics.jsonl; a line that is not a JSON object (the torn last line of a
    run killed mid-write) is skipped: it crashed the resumed run's close (loss.png, summary)."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _ends_mid_line(path: Path) -> bool:
    if not path.is_file() or path.stat().st_size == 0:
        return False
    with path.open("rb") as handle:
        handle.seek(-1, 2)
        return handle.read(1) != b"\n"


def plot_loss(metrics_path: Path, out: Path) -> None:
    """Loss vs step (the last record per step wins, so rolled-back steps show their replay)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_step: dict[int, float] = {}
    val: dict[int, float] = {}
    events = []
    for record in read_metrics(metrics_path):
        if record.get("event") == "rollback":
            events.append(record["step"])
        elif record.get("event") == "eval" and record.get("val/loss") is not None:
            val[record["step"]] = record["val/loss"]
        elif "loss" in record:
            per_step[record["step"]] = record["loss"]
    steps = sorted(per_step)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, [per_step[s] for s in steps], label="train loss")
    if val:
        ax.plot(
            sorted(val), [val[s] for s in sorted(val)], marker="o", label="val loss (eval sets)"
        )
    for index, step in enumerate(events):
        ax.axvline(step, color="red", alpha=0.4, label="rollback" if index == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(metrics_path.parent.name)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


class Throughput(Callback):
    """Profiling of each step: MFU (peak agreed by all ranks at start), memory, checkpoint time."""

    def __init__(self, settings: MetricsConfig, on_gpu: bool) -> None:
        self.on_gpu = on_gpu
        holder = list(assumed_peak(settings.peak_flops, settings.mfu_gpu, on_gpu))
        torch.distributed.broadcast_object_list(holder, src=0)
        self.peak_flops, self.peak_source = holder
        self.checkpoint_s = 0.0

    def on_checkpoint(self, trainer: Trainer, step: int, seconds: float) -> None:
        self.checkpoint_s = seconds

    def on_step_end(self, trainer: Trainer, record: dict[str, Any]) -> None:
        record.update(memory_mb(self.on_gpu))
        record["checkpoint_s"] = round(self.checkpoint_s, 6)
        self.checkpoint_s = 0.0
        if self.peak_flops:
            record["mfu"] = record["achieved_flops_per_device"] / self.peak_flops

    def manifest(self) -> dict[str, Any]:
        return {
            "formula": MFU_FORMULA,
            "peak_flops": self.peak_flops,
            "peak_source": self.peak_source,
        }


class MetricsLog(Callback):
    """Rank 0 logs every step, eval and event to RUN/metrics.jsonl and the records with a step
    to the `trackers` (opened on rank 0 only, trainer/trackers.py), and draws RUN/loss.png at
    close; every rank keeps the progress bar (shown on rank 0 only)."""

    def __init__(
        self, run_dir: Path, rank: int, trackers: tuple[Tracker, ...] = (), name: str = "run"
    ) -> None:
        self.rank, self.run_dir, self.path = rank, run_dir, run_dir / "metrics.jsonl"
        self.handle: Any = None
        self.sinks: list[Sink] = []
        self.bar: Any = None
        if rank != 0:
            return
        torn = _ends_mid_line(self.path)
        self.handle = self.path.open("a", encoding="utf-8")
        if torn:  # a run killed (or out of disk) mid-write: the next record starts a line
            self.handle.write("\n")
        self.sinks = open_sinks(trackers, run_dir, name)

    def say(self, message: str) -> None:
        if self.rank == 0:
            print(f"[train] {message}", flush=True)

    def log(self, record: dict[str, Any]) -> None:
        if self.handle is None:
            return
        self.handle.write(json.dumps(record, sort_keys=True) + "\n")
        self.handle.flush()
        if self.sinks and "step" in record:
            values = scalars(record)
            for sink in self.sinks:
                sink.log(values, record["step"])

    def on_fit_start(self, trainer: Trainer) -> None:
        from pretrain.progress import Progress

        self.bar = Progress(
            total=trainer.total_steps,
            initial=trainer.state.step,
            unit="step",
            desc="train",
            disable=self.rank != 0,
            mininterval=1.0,
        )

    def on_resume(self, trainer: Trainer, event: dict[str, Any]) -> None:
        self.say(f"resumed from {event['checkpoint']} (step {event['step']})")
        self.log(event)
        if self.bar is not None:
            self.bar.n = trainer.state.step

    def on_checkpoint_skipped(self, trainer: Trainer, entry: dict[str, Any]) -> None:
        print(f"[train] {entry['checkpoint']} is corrupt, skipped: {entry['reason']}")
        self.log({"event": "checkpoint_skipped", **entry})

    def on_step_end(self, trainer: Trainer, record: dict[str, Any]) -> None:
        if self.handle is not None:
            self.log(record)
            self.bar.set_postfix(
                loss=f"{record['loss']:.4f}", tok_s=f"{record['tokens_per_s']:.0f}", refresh=False
            )
        self.bar.update(1)

    def on_rollback(
        self, trainer: Trainer, event: dict[str, Any], restored: dict[str, Any]
    ) -> None:
        self.say(
            f"guard: step {event['step']}: {event['reason']}; rolled back to step "
            f"{event['to_step']}, skipping batches {event['skipped_batches']} (phase, samples "
            f"[start, end)): {event['sample_ids']}"
        )
        self.log(event)
        self.bar.n = trainer.state.step

    def on_eval(self, trainer: Trainer, record: dict[str, Any]) -> None:
        self.log(record)

    def on_fit_end(self, trainer: Trainer) -> None:
        self.bar.close()
        if self.handle is not None and trainer.state.step:
            losses = [r["loss"] for r in read_metrics(self.path) if "loss" in r]
            self.say(f"{trainer.state.step} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}")

    def close(self) -> None:
        """Rank 0: close the files and draw loss.png."""
        if self.handle is None:
            return
        self.handle.close()
        for sink in self.sinks:
            sink.close()
        plot_loss(self.path, self.run_dir / "loss.png")
