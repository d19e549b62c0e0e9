"""`pretrain launch --smoke`: a few steps at the target layout on the real code path.

Forward, backward and gradient sync (two optimizer steps), a forward-only loss on a fixed batch,
checkpoint save, one more step to move the weights, reload, the same loss again; then an
all-reduce bandwidth test over the whole world.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from pretrain.errors import PretrainError
from trainer.loop import Trainer
from trainer.model import device_type


def _eval_loss(trainer: Trainer, batch: int) -> float:
    tokens, _ = trainer.data.rank_batch(batch, trainer.dp_rank, trainer.dp_size)
    from trainer.cpu_compat import device_context

    with device_context(), torch.no_grad():
        return trainer._run_schedule(tokens, forward_only=True)


def allreduce_bandwidth(num_bytes: int, device: str, repeat: int = 3) -> dict[str, float]:
    """Bus bandwidth of an all-reduce of `num_bytes` fp32 over the world (NCCL-tests' busbw)."""
    tensor = torch.ones(num_bytes // 4, device=device)
    torch.distributed.all_reduce(tensor)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        torch.distributed.all_reduce(tensor)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / repeat
    world = torch.distributed.get_world_size()
    algbw = num_bytes / seconds / 1e9
    return {
        "bytes": num_bytes,
        "seconds": seconds,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * 2 * (world - 1) / world if world > 1 else algbw,
    }


def smoke_checks(trainer: Trainer, steps: int = 2) -> dict[str, Any]:
    """Run the checks; raise PretrainError naming the first that fails."""
    losses = []
    for _ in range(steps):
        result = trainer.train_step(trainer.state.batch)
        if not math.isfinite(result.loss) or not math.isfinite(result.grad_norm):
            raise PretrainError(
                f"smoke: step {trainer.state.step + 1} gave loss {result.loss}, "
                f"grad norm {result.grad_norm}; check the model config and data"
            )
        losses.append(result.loss)
        trainer.state.step += 1
        trainer.state.batch += 1
    probe = trainer.state.batch
    before = _eval_loss(trainer, probe)
    save_s = trainer.save(blocking=True)
    path = trainer.newest_checkpoint()
    trainer.train_step(probe + 1)
    moved = _eval_loss(trainer, probe)
    trainer.restore(path)
    after = _eval_loss(trainer, probe)
    if abs(after - before) > 1e-5 * max(1.0, abs(before)):
        raise PretrainError(
            f"smoke: loss after reloading {path.name} is {after:.6f}, before "
            f"saving {before:.6f}; checkpoint save/load does not round-trip"
        )
    device = device_type(trainer.config)
    bandwidth = allreduce_bandwidth((256 if device == "cuda" else 16) * 2**20, device)
    report = {
        "train_losses": losses,
        "probe_loss_before_save": before,
        "probe_loss_after_extra_step": moved,
        "probe_loss_after_reload": after,
        "checkpoint_save_s": save_s,
        "allreduce": bandwidth,
        "passed": True,
        "world_size": torch.distributed.get_world_size(),
    }
    if trainer.rank == 0:
        print(
            f"[smoke] losses {losses}; reload {before:.6f} == {after:.6f}; all-reduce "
            f"{bandwidth['busbw_GBps']:.2f} GB/s bus bandwidth",
            flush=True,
        )
    return report
