"""Drive a run on every rank: resume, step, guard, metrics, checkpoints, smoke checks, manifest."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from pretrain.config import config_dict
from pretrain.manifest import atomic_write_json, write_manifest
from trainer import metrics as run_metrics
from trainer.config import TrainConfig
from trainer.guard import GuardGaveUp
from trainer.loop import StepResult, Trainer

CRASH_EXIT_CODE = 17


def _log(trainer: Trainer, message: str) -> None:
    if trainer.rank == 0:
        print(f"[train] {message}", flush=True)


def resume(trainer: Trainer) -> int | None:
    """Load the newest valid checkpoint when resuming is on; its step, or None."""
    if not trainer.config.checkpoint.resume:
        return None
    path = trainer.newest_checkpoint()
    if path is None:
        from trainer.data import check_identity

        check_identity(trainer.config, trainer.data, None)
        return None
    recorded = trainer.restore(path)
    trainer.guard = type(trainer.guard)(trainer.config.guard, recorded.get("guard"))
    _log(trainer, f"resumed from {path.name} (step {trainer.state.step})")
    if trainer.metrics is not None:
        trainer.metrics.log(
            {"event": "resume", "checkpoint": path.name, "step": trainer.state.step}
        )
    return trainer.state.step


def rollback(trainer: Trainer, result: StepResult, reason: str) -> None:
    """Go back to the last good checkpoint and skip the offending batches (or give up)."""
    if trainer.saver is not None:
        trainer.saver.poll(blocking=True)  # a save still in flight may be the good state
    path = trainer.newest_checkpoint()
    if path is None:
        raise GuardGaveUp(
            f"step {trainer.state.step + 1}: {reason}, before any checkpoint existed to roll back "
            "to; lower optim.lr or raise optim.warmup_fraction, and check the data"
        )
    skip = list(range(result.batch, result.batch + trainer.config.guard.skip_batches))
    samples = [list(trainer.data.sample_ids(b)) for b in skip if b < trainer.data.num_batches]
    failed_step = trainer.state.step + 1
    to_step = int(path.name.split("_")[1])
    trainer.guard.rolled_back(failed_step, reason, skip, samples, to_step)
    trainer.state.skipped_batches = sorted(set(trainer.state.skipped_batches) | set(skip))
    recorded = trainer.restore(path, keep_skips=True)
    history = recorded.get("guard") or {}
    trainer.guard.losses.clear()
    trainer.guard.losses.extend(history.get("losses", []))
    trainer.guard.grad_norms.clear()
    trainer.guard.grad_norms.extend(history.get("grad_norms", []))
    event = {
        "event": "rollback",
        "step": failed_step,
        "reason": reason,
        "to_step": to_step,
        "skipped_batches": skip,
        "sample_ids": samples,
    }
    _log(
        trainer,
        f"guard: step {failed_step}: {reason}; rolled back to step {to_step}, "
        f"skipping batches {skip} (phase, samples [start, end)): {samples}",
    )
    if trainer.metrics is not None:
        trainer.metrics.log(event)


def _after_step(trainer: Trainer, result: StepResult, seconds: float) -> dict[str, Any]:
    state, ckpt = trainer.state, trainer.config.checkpoint
    trainer.guard.record(result.loss, result.grad_norm)
    state.step += 1
    state.batch = result.batch + 1
    state.tokens_seen += trainer.data.global_batch * trainer.data.seq_length(result.batch)
    checkpoint_s = 0.0
    # the guard needs a good state to roll back to: the first step that passes it is saved too
    # (not step 0: megatron's distributed optimizer has no state to save before its first step)
    first_good = trainer.config.guard.enabled and not trainer.has_checkpoint
    if trainer.saver is not None:
        trainer.saver.poll()
    if state.step % ckpt.every == 0 or state.step == trainer.total_steps or first_good:
        checkpoint_s = trainer.save()
    record = trainer.step_record(result, seconds)
    record["checkpoint_s"] = round(checkpoint_s, 6)
    peak = getattr(trainer, "peak_flops", None)
    if peak:
        record["mfu"] = record["achieved_flops_per_device"] / peak
    return record


def train_loop(trainer: Trainer, evaluator: Any = None) -> None:
    """Step until total_steps (or the data runs out), with the guard, checkpoints and, with
    `evaluator` (trainer.periodic_eval.PeriodicEval), evaluation every eval.every steps."""
    from pretrain.progress import Progress

    bar = Progress(
        total=trainer.total_steps,
        initial=trainer.state.step,
        unit="step",
        desc="train",
        disable=trainer.rank != 0,
        mininterval=1.0,
    )
    while trainer.state.step < trainer.total_steps:
        batch = trainer.next_batch()
        if batch is None:
            _log(trainer, f"data exhausted after {trainer.state.step} steps")
            break
        start = time.perf_counter()
        result = trainer.train_step(batch)
        reason = trainer.guard.check(result.loss, result.grad_norm)
        if reason is not None:
            rollback(trainer, result, reason)
            bar.n = trainer.state.step
            continue
        record = _after_step(trainer, result, time.perf_counter() - start)
        if trainer.metrics is not None:
            trainer.metrics.log(record)
            bar.set_postfix(
                loss=f"{record['loss']:.4f}", tok_s=f"{record['tokens_per_s']:.0f}", refresh=False
            )
        bar.update(1)
        _periodic_eval(trainer, evaluator)
        if trainer.config.run.crash_at_step == trainer.state.step:
            os._exit(CRASH_EXIT_CODE)  # testing aid: die like a killed job, no cleanup
    bar.close()
    if trainer.metrics is not None and trainer.state.step:
        losses = [r["loss"] for r in run_metrics.read_metrics(trainer.metrics.path) if "loss" in r]
        _log(trainer, f"{trainer.state.step} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}")


def _periodic_eval(trainer: Trainer, evaluator: Any) -> None:
    """eval.every: every rank scores the eval sets, rank 0 logs val/* (trainer/periodic_eval.py)."""
    if evaluator is None or not evaluator.due(trainer.state.step, trainer.total_steps):
        return
    record = evaluator.run(trainer.state.step)
    if trainer.metrics is not None:
        trainer.metrics.log(record)


def _peak(trainer: Trainer) -> None:
    from trainer.model import use_gpu

    metrics_cfg = trainer.config.metrics
    peak, source = run_metrics.assumed_peak(
        metrics_cfg.peak_flops, metrics_cfg.mfu_gpu, use_gpu(trainer.config)
    )
    holder = [peak, source]
    torch.distributed.broadcast_object_list(holder, src=0)
    trainer.peak_flops, trainer.peak_source = holder


def write_run_manifest(trainer: Trainer, launch_info: dict[str, Any], extra: dict) -> None:
    identity = trainer.data.identity
    inputs = [trainer.config.data.mixture_dir] if trainer.config.data.source == "mixture" else []
    write_manifest(
        trainer.run_dir,
        "run",
        config=config_dict(trainer.config),
        inputs=inputs,
        counts={
            "steps": trainer.state.step,
            "tokens_seen": trainer.state.tokens_seen,
            "parameters": trainer.num_params,
        },
        extra={
            "tokenizer": identity.get("tokenizer") or {"sha256": identity.get("tokenizer_sha256")},
            "mixture": {
                "build_sha256": identity.get("build_sha256"),
                "recipe_sha256": identity.get("recipe_sha256"),
            },
            "gate": launch_info.get("gate"),
            "mfu": {
                "formula": run_metrics.MFU_FORMULA,
                "peak_flops": trainer.peak_flops,
                "peak_source": trainer.peak_source,
            },
            "world_size": torch.distributed.get_world_size(),
            "guard": {"rollbacks": trainer.guard.rollbacks, "events": trainer.guard.events},
            **extra,
        },
        command=launch_info.get("command"),
    )


def run_training(
    config: TrainConfig, launch_info: dict[str, Any] | None = None, smoke: bool = False
) -> dict[str, Any]:
    """One rank's whole run. Rank 0 writes metrics, loss.png and the run manifest."""
    warnings.filterwarnings("ignore", message=".*(Apex|Transformer Engine).*")
    launch_info = launch_info or {}
    run_dir = Path(config.run.out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(config, run_dir)
    evaluator = None
    if config.eval.every and not smoke:
        from trainer.model import use_gpu
        from trainer.periodic_eval import PeriodicEval

        evaluator = PeriodicEval(config, trainer.chunks[0], use_gpu(config))
    _peak(trainer)
    extra: dict[str, Any] = {}
    if smoke:
        from trainer.smoke import smoke_checks

        extra["smoke"] = smoke_checks(trainer)
    else:
        resume(trainer)
        train_loop(trainer, evaluator)
        if trainer.saver is not None:
            trainer.saver.close()
    torch.distributed.barrier()
    if trainer.metrics is not None:
        trainer.metrics.close()
        write_run_manifest(trainer, launch_info, extra)
        atomic_write_json(run_dir / "summary.json", summary(trainer, extra))
    torch.distributed.barrier()
    return summary(trainer, extra)


def summary(trainer: Trainer, extra: dict[str, Any]) -> dict[str, Any]:
    last = run_metrics.read_metrics(trainer.run_dir / "metrics.jsonl")
    losses = [r for r in last if "loss" in r]
    return {
        "steps": trainer.state.step,
        "tokens_seen": trainer.state.tokens_seen,
        "final_loss": losses[-1]["loss"] if losses else None,
        "rollbacks": trainer.guard.rollbacks,
        "parameters": trainer.num_params,
        **extra,
    }


def load_launch_info(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "launch.json"
    return json.loads(path.read_text()) if path.is_file() else {}
