"""The training loop, run by every rank (torchrun worker): read top to bottom.

setup (process groups, data, model, optimizer) -> resume from the newest valid checkpoint ->
for each step: next non-skipped global batch -> forward/backward through megatron's schedule ->
optimizer step -> guard (roll back on a spike or NaN) -> metrics -> checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pretrain.config import config_dict, config_sha256
from pretrain.errors import ConfigError, LockMismatch
from trainer import checkpoint
from trainer import model as mcore
from trainer.config import TrainConfig
from trainer.cpu_compat import device_context
from trainer.data import TrainData, check_identity
from trainer.flops import flops_per_token
from trainer.guard import SpikeGuard
from trainer.lr_schedule import lr_at
from trainer.metrics import MetricsWriter, memory_mb
from trainer.setup import open_data, resolve_vocab


@dataclass
class TrainState:
    """What a checkpoint must hold besides weights and optimizer state to resume exactly."""

    step: int = 0
    batch: int = 0
    tokens_seen: int = 0
    tokens_per_component: list[int] = field(default_factory=list)
    sequences_per_component: list[int] = field(default_factory=list)
    skipped_batches: list[int] = field(default_factory=list)


@dataclass
class StepResult:
    loss: float
    grad_norm: float
    update_norm: float | None
    timings: dict[str, float]
    batch: int


class Trainer:
    """One rank's trainer: holds the model chunks, optimizer, data and state."""

    def __init__(self, config: TrainConfig, run_dir: Path) -> None:
        from megatron.core import parallel_state as ps

        self.config, self.run_dir = config, run_dir
        mcore.init_distributed(config)
        if config.parallel.context > 1:
            raise ConfigError(
                "parallel.context > 1 is plan-only until measured on a GPU; set "
                "parallel.context=1 to launch"
            )
        self.rank = torch.distributed.get_rank()
        self.ps = ps
        self.dp_rank, self.dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
        self.data: TrainData = open_data(config, run_dir, self.rank)
        self.vocab_size = resolve_vocab(config, self.data)
        self.total_steps = self._total_steps()
        self._check_batch_layout()
        self.chunks = mcore.build_model_chunks(config, self.vocab_size)
        self.model = mcore.wrap_ddp(config, self.chunks)
        self.optimizer = mcore.build_optimizer(config, self.model)
        zeros = [0] * len(self.data.component_names)
        self.state = TrainState(tokens_per_component=zeros, sequences_per_component=list(zeros))
        self.guard = SpikeGuard(config.guard)
        self.num_params = self._count_params()
        self.metrics = (
            MetricsWriter(run_dir, config.metrics.tensorboard) if self.rank == 0 else None
        )
        self._inject_nan = False
        self.saver = checkpoint.AsyncSaver() if config.checkpoint.async_save else None
        self.has_checkpoint = bool(checkpoint.list_checkpoints(run_dir))

    # ----- setup helpers -------------------------------------------------------------------
    def _total_steps(self) -> int:
        run, data = self.config.run, self.config.data
        if run.train_steps:
            steps = run.train_steps
        elif data.train_tokens:
            steps = data.train_tokens // (self.data.global_batch * self.data.phases[0].seq_length)
        else:
            steps = self.data.num_batches
        return max(1, min(steps, self.data.num_batches))

    def _check_batch_layout(self) -> None:
        batch = self.config.batch
        per_rank = batch.global_batch_size // self.dp_size
        if batch.global_batch_size % self.dp_size or per_rank % batch.micro_batch_size:
            raise ConfigError(
                f"batch.global_batch_size = {batch.global_batch_size} is not divisible by "
                f"micro_batch_size {batch.micro_batch_size} x data-parallel {self.dp_size}; "
                "change one of them"
            )
        self.num_microbatches = per_rank // batch.micro_batch_size

    def _count_params(self) -> int:
        from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate

        local = sum(
            p.numel()
            for chunk in self.chunks
            for p in chunk.parameters()
            if param_is_not_tensor_parallel_duplicate(p)
        )
        total = torch.tensor([float(local)])
        torch.distributed.all_reduce(total)
        return int(total.item() / self.dp_size)

    # ----- one step --------------------------------------------------------------------------
    def _forward_step(self, iterator: Any, model: Any) -> tuple[torch.Tensor, Any]:
        tokens = next(iterator)
        inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        positions = torch.arange(inputs.shape[1]).unsqueeze(0).expand_as(inputs)
        output = model(inputs, positions, None, labels=labels)
        inject = self._inject_nan

        def loss_func(output_tensor: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
            loss = output_tensor.float().mean()
            if inject:
                loss = loss * float("nan")
            return loss, {"loss": loss.detach().clone()}

        return output, loss_func

    def _run_schedule(self, tokens: np.ndarray, forward_only: bool) -> float:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        mbs = self.config.batch.micro_batch_size
        batch = torch.from_numpy(tokens)
        micro_batches = [batch[i : i + mbs] for i in range(0, len(batch), mbs)]
        # interleaved pipelining takes one iterator per model chunk, each over all micro-batches
        iterators: Any = [iter(micro_batches) for _ in self.model]
        if len(self.model) == 1:
            iterators = iterators[0]
        losses = get_forward_backward_func()(
            forward_step_func=self._forward_step,
            data_iterator=iterators,
            model=self.model if len(self.model) > 1 else self.model[0],
            num_microbatches=self.num_microbatches,
            seq_length=tokens.shape[1] - 1,
            micro_batch_size=mbs,
            forward_only=forward_only,
        )
        return self._reduce_loss(losses)

    def _reduce_loss(self, losses: list[dict[str, torch.Tensor]]) -> float:
        """Mean loss over the global batch, identical on every rank."""
        contributes = (
            self.ps.is_pipeline_last_stage() and self.ps.get_tensor_model_parallel_rank() == 0
        )
        value = (
            sum(float(x["loss"]) for x in losses) / len(losses) if contributes and losses else 0.0
        )
        total = torch.tensor([value], dtype=torch.float64)
        torch.distributed.all_reduce(total)
        return float(total.item()) / self.dp_size

    def _count_components(self, components: np.ndarray, seq_length: int) -> None:
        counts = np.bincount(components, minlength=len(self.data.component_names))
        first = self.ps.get_tensor_model_parallel_rank() == 0 and self.ps.is_pipeline_first_stage()
        total = torch.from_numpy((counts if first else np.zeros_like(counts)).astype(np.float64))
        torch.distributed.all_reduce(total)
        for index, value in enumerate(total.tolist()):
            self.state.tokens_per_component[index] += int(value) * seq_length
            self.state.sequences_per_component[index] += int(value)

    def train_step(self, batch_index: int) -> StepResult:
        timings: dict[str, float] = {}
        start = time.perf_counter()
        tokens, components = self.data.rank_batch(batch_index, self.dp_rank, self.dp_size)
        self._count_components(components, tokens.shape[1] - 1)
        lr = lr_at(self.state.step, self.config.optim, self.total_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        timings["data_s"] = time.perf_counter() - start
        with device_context():
            for chunk in self.model:
                chunk.zero_grad_buffer()
            self.optimizer.zero_grad()
            start = time.perf_counter()
            self._inject_nan = self.guard.should_inject_nan(self.state.step + 1)
            loss = self._run_schedule(tokens, forward_only=False)
            timings["fwd_bwd_s"] = time.perf_counter() - start
            start = time.perf_counter()
            log_now = (self.state.step + 1) % self.config.run.log_every == 0
            before = [p.detach().clone() for p in self._params()] if log_now else None
            _, grad_norm, _ = self.optimizer.step()
            update = self._update_norm(before) if before is not None else None
            timings["optimizer_s"] = time.perf_counter() - start
        grad_norm = float("nan") if grad_norm is None else float(grad_norm)
        return StepResult(loss, grad_norm, update, timings, batch_index)

    def _params(self) -> list[torch.Tensor]:
        return [p for chunk in self.chunks for p in chunk.parameters()]

    def _update_norm(self, before: list[torch.Tensor]) -> float:
        from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate

        square = sum(
            float((p.detach().float() - b.float()).pow(2).sum())
            for p, b in zip(self._params(), before, strict=True)
            if param_is_not_tensor_parallel_duplicate(p)
        )
        total = torch.tensor([square], dtype=torch.float64)
        torch.distributed.all_reduce(total)
        return float((total.item() / self.dp_size) ** 0.5)

    # ----- checkpoints ---------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        return {
            **self.data.identity,
            "config_sha256": config_sha256(self.config),
            "model_sha256": config_sha256(self.config.model),
        }

    def save(self, blocking: bool = False) -> float:
        """Checkpoint the current state (asynchronously when checkpoint.async_save)."""
        start = time.perf_counter()
        ckpt = self.config.checkpoint
        state = {
            **asdict(self.state),
            **self.identity(),
            "guard": self.guard.state(),
            "total_steps": self.total_steps,
            "vocab_size": self.vocab_size,
            "world_size": torch.distributed.get_world_size(),
            "lr": lr_at(max(0, self.state.step - 1), self.config.optim, self.total_steps),
            "config": config_dict(self.config),
        }
        saver = None if blocking else self.saver
        keep = (ckpt.keep_last, ckpt.keep_every)
        checkpoint.save(
            self.run_dir, self.state.step, self.model, self.optimizer, state, keep, saver
        )
        self.has_checkpoint = True
        return time.perf_counter() - start

    def newest_checkpoint(self) -> Path | None:
        """Rank 0 picks the newest valid checkpoint (logging corrupt ones) and tells the others."""
        chosen: list[Any] = [None]
        if self.rank == 0:
            path, skipped = checkpoint.newest_valid(self.run_dir)
            for entry in skipped:
                print(f"[train] {entry['checkpoint']} is corrupt, skipped: {entry['reason']}")
                if self.metrics is not None:
                    self.metrics.log({"event": "checkpoint_skipped", **entry})
            chosen = [str(path) if path else ""]
        torch.distributed.broadcast_object_list(chosen, src=0)
        return Path(chosen[0]) if chosen[0] else None

    def restore(self, path: Path, keep_skips: bool = False) -> dict[str, Any]:
        recorded = checkpoint.load(path, self.model, self.optimizer)
        check_identity(self.config, self.data, recorded)
        if recorded.get("model_sha256") != self.identity()["model_sha256"]:
            raise LockMismatch(
                f"resume refused: checkpoint {path.name} holds a different model "
                "architecture than the config; restore model.* or use a new "
                "run.out_dir"
            )
        skipped = set(self.state.skipped_batches) | set(recorded["skipped_batches"])
        names = TrainState.__dataclass_fields__
        self.state = TrainState(**{k: recorded[k] for k in names if k in recorded})
        if keep_skips:
            self.state.skipped_batches = sorted(skipped)
        return recorded

    def next_batch(self) -> int | None:
        batch = self.state.batch
        skipped = set(self.state.skipped_batches)
        while batch in skipped:
            batch += 1
        return batch if batch < self.data.num_batches else None

    def step_record(self, result: StepResult, seconds: float) -> dict[str, Any]:
        seq_length = self.data.seq_length(result.batch)
        tokens = self.data.global_batch * seq_length
        tokens_per_s = tokens / seconds if seconds > 0 else 0.0
        flops = flops_per_token(
            self.config.model, self.vocab_size, seq_length, self.config.parallel.tensor
        )["model"]
        world = torch.distributed.get_world_size()
        per_component = dict(
            zip(self.data.component_names, self.state.tokens_per_component, strict=True)
        )
        return {
            "step": self.state.step,
            "loss": result.loss,
            "grad_norm": result.grad_norm,
            "update_norm": result.update_norm,
            "batch": result.batch,
            "lr": lr_at(self.state.step - 1, self.config.optim, self.total_steps),
            "seq_length": seq_length,
            "tokens_seen": self.state.tokens_seen,
            "tokens_per_s": tokens_per_s,
            "model_flops_per_token": flops,
            "achieved_flops_per_device": flops * tokens_per_s / world,
            "step_s": seconds,
            **{k: round(v, 6) for k, v in result.timings.items()},
            **memory_mb(),
            "tokens_per_component": per_component,
            "sequences_per_component": dict(
                zip(self.data.component_names, self.state.sequences_per_component, strict=True)
            ),
        }
