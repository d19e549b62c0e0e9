"""The training loop every rank runs, `config.build().fit()`: resume, then per step the next
non-skipped batch, forward/backward, optimizer step, the guard's verdict (a spike rolls back to
the last good checkpoint), checkpoint, `on_step_end`; then the run's manifest and summary."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pretrain.config import config_dict, config_sha256
from pretrain.errors import ArtifactError
from trainer import checkpoint
from trainer import step as mstep
from trainer.callbacks import Callback, CallbackList
from trainer.cpu_compat import device_context
from trainer.data import TrainData, check_identity, check_init_from, check_resume
from trainer.flops import flops_per_token
from trainer.guard import GuardGaveUp, SpikeGuard
from trainer.metrics import MetricsLog, Throughput
from trainer.run_outputs import summary, write_outputs
from trainer.step import StepResult, TrainState, lr_at

if TYPE_CHECKING:
    from trainer.config import TrainConfig


class Trainer:
    """One rank's trainer: the model, optimizer, data, state, guard and callbacks."""

    def __init__(
        self,
        config: TrainConfig,
        data: TrainData,
        vocab_size: int,
        model: tuple[Any, Any, Any],
        builtin: tuple[SpikeGuard, Throughput, MetricsLog],
        callbacks: Sequence[Callback] = (),
    ) -> None:
        """What `TrainConfig.build()` constructed; `model`: (GPTModel, the same in
        megatron DDP, optimizer); `callbacks` are called after the built-in ones."""
        from megatron.core import parallel_state as ps

        self.config, self.run_dir = config, Path(config.run.out_dir)
        self.rank = torch.distributed.get_rank()
        self.ps = ps
        self.dp_rank, self.dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
        self.data, self.vocab_size = data, vocab_size
        self.total_steps = self._total_steps()
        self.num_microbatches = config.batch.microbatches(self.dp_size)
        self.gpt, self.model, self.optimizer = model
        zeros = [0] * len(self.data.component_names)
        self.state = TrainState(tokens_per_component=zeros, sequences_per_component=list(zeros))
        self.num_params = mstep.count_params(self.gpt, self.dp_size)
        self.saver = checkpoint.AsyncSaver() if config.checkpoint.async_save else None
        self.has_checkpoint = bool(checkpoint.list_checkpoints(self.run_dir))
        self.init_from: str | None = None
        """The checkpoint this run's weights started from (checkpoint.init_from), kept across
        resumes in state.json: the run manifest lists it among its inputs."""
        self.saved_step: int | None = None
        """The step of the newest checkpoint this run saved or restored."""
        self.ended = "not trained"
        """How fit ended: `completed` (total_steps) or `data exhausted` (the summary records it)."""
        self.guard, self.throughput, self.metrics = builtin
        self.callbacks = CallbackList([*builtin, *callbacks])

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

    # ----- the loop ------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Resume, step until total_steps (or the data runs out), write the run's outputs."""
        self.callbacks.on_fit_start(self)
        self.resume()
        self.ended = "completed"
        while self.state.step < self.total_steps:
            batch = self.next_batch()
            if batch is None:
                self.metrics.say(f"data exhausted after {self.state.step} steps")
                self.ended = "data exhausted"
                break
            start = time.perf_counter()
            result = self.train_step(batch)
            reason = self.callbacks.check_step(self, result)
            if reason is not None:
                self.rollback(result, reason)
                continue
            seconds = time.perf_counter() - start
            self._advance(result)
            self._maybe_checkpoint()
            self.callbacks.on_step_end(self, self._record(result, seconds))
        self._save_final()
        if self.saver is not None:
            self.saver.close()
        self.callbacks.on_fit_end(self)
        return self.finish({})

    def _advance(self, result: StepResult) -> None:
        self.state.step += 1
        self.state.batch = result.batch + 1
        self.state.tokens_seen += self.data.global_batch * self.data.seq_length(result.batch)

    def _record(self, result: StepResult, seconds: float) -> dict[str, Any]:
        """The metrics.jsonl line of a finished step (callbacks add MFU, memory, checkpoint time)."""
        config, data, state = self.config, self.data, self.state
        seq_length = data.seq_length(result.batch)
        tokens_per_s = data.global_batch * seq_length / seconds if seconds > 0 else 0.0
        model, tensor = config.model, config.parallel.tensor
        flops = flops_per_token(model, self.vocab_size, seq_length, tensor)["model"]
        names = data.component_names
        return {
            "step": state.step,
            "loss": result.loss,
            "grad_norm": result.grad_norm,
            "update_norm": result.update_norm,
            "batch": result.batch,
            "lr": lr_at(state.step - 1, config.optim, self.total_steps),
            "seq_length": seq_length,
            "tokens_seen": state.tokens_seen,
            "tokens_per_s": tokens_per_s,
            "model_flops_per_token": flops,
            "achieved_flops_per_device": flops * tokens_per_s / torch.distributed.get_world_size(),
            "step_s": seconds,
            **{k: round(v, 6) for k, v in result.timings.items()},
            "tokens_per_component": dict(zip(names, state.tokens_per_component, strict=True)),
            "sequences_per_component": dict(zip(names, state.sequences_per_component, strict=True)),
        }

    def _maybe_checkpoint(self) -> None:
        """Every checkpoint.every steps and at the end; with the guard on, also the first good
        step, so that a rollback has a good state to go to (not step 0: megatron's distributed
        optimizer has no state to save before its first step)."""
        first_good = self.config.guard.enabled and not self.has_checkpoint
        if self.saver is not None:
            self.saver.poll()
        step = self.state.step
        if step % self.config.checkpoint.every == 0 or step == self.total_steps or first_good:
            self.save()

    def _save_final(self) -> None:
        """The last trained step is always a checkpoint, however the loop ended: a run whose data
        ran out (skipped batches after a rollback) had only an earlier checkpoint, and `eval run`
        scored that one as the run's result. Decided from what this rank saved or restored (the
        same on every rank), not from a listing a rank may not see."""
        if self.state.step > 0 and self.saved_step != self.state.step:
            self.save()

    def resume(self) -> None:
        """Load the newest valid checkpoint when resuming is on, else checkpoint.init_from."""
        path = self.newest_checkpoint(resuming=True) if self.config.checkpoint.resume else None
        if path is None:
            if self.config.checkpoint.resume:
                check_identity(self.config, self.data, None)
            self.init_weights()
            return
        recorded = self.restore(path)
        self.guard.load_state(recorded.get("guard"))
        event = {"event": "resume", "checkpoint": path.name, "step": self.state.step}
        self.callbacks.on_resume(self, event)

    def init_weights(self) -> None:
        """checkpoint.init_from: a new run takes that checkpoint's model weights, and nothing
        else (optimizer, RNG, schedule and data position start fresh). Rank 0 picks and verifies
        the checkpoint and tells the others (or every rank raises its one-line refusal)."""
        source = self.config.checkpoint.init_from
        if not source:
            return
        path = Path(self._from_rank0(lambda: str(checkpoint.init_point(Path(source)))))
        recorded = checkpoint.read_state(path)
        check_init_from(self.config, self.data, recorded, self.vocab_size, str(path))
        checkpoint.load(path, self.model, None)
        if hasattr(self.optimizer, "reload_model_params"):  # fp32 master copies of bf16 weights
            self.optimizer.reload_model_params()
        self.init_from = str(path.resolve())
        self.metrics.say(f"weights from {path} (checkpoint.init_from); optimizer, schedule fresh")
        self.metrics.log({"event": "init_from", "checkpoint": self.init_from, "step": 0})

    def rollback(self, result: StepResult, reason: str) -> None:
        """Go back to the last good checkpoint and skip the offending batches (or give up)."""
        if self.saver is not None:
            self.saver.poll(blocking=True)  # a save still in flight may be the good state
        path = self.newest_checkpoint()
        if path is None:
            raise GuardGaveUp(
                f"step {self.state.step + 1}: {reason}, before any checkpoint existed to roll "
                "back to; lower optim.lr or raise optim.warmup_fraction, and check the data"
            )
        skip = list(range(result.batch, result.batch + self.config.guard.skip_batches))
        samples = [list(self.data.sample_ids(b)) for b in skip if b < self.data.num_batches]
        failed_step, to_step = self.state.step + 1, int(path.name.split("_")[1])
        self.guard.rolled_back(failed_step, reason, skip, samples, to_step)
        self.state.skipped_batches = sorted(set(self.state.skipped_batches) | set(skip))
        recorded = self.restore(path, keep_skips=True)
        event = {
            "event": "rollback",
            "step": failed_step,
            "reason": reason,
            "to_step": to_step,
            "skipped_batches": skip,
            "sample_ids": samples,
        }
        self.callbacks.on_rollback(self, event, recorded)

    def finish(self, extra: dict[str, Any]) -> dict[str, Any]:
        """After fit (or the smoke checks): rank 0 writes loss.png, the run manifest and
        summary.json; every rank returns the summary."""
        torch.distributed.barrier()
        if self.rank == 0:
            self.metrics.close()
            write_outputs(self, extra)
        torch.distributed.barrier()
        return summary(self, extra)

    # ----- one step --------------------------------------------------------------------------
    def train_step(self, batch_index: int) -> StepResult:
        """Forward/backward over the global batch `batch_index`, then the optimizer step."""
        timings: dict[str, float] = {}
        start = time.perf_counter()
        tokens, components = self.data.rank_batch(batch_index, self.dp_rank, self.dp_size)
        self._count_components(components, tokens.shape[1] - 1)
        lr = lr_at(self.state.step, self.config.optim, self.total_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        timings["data_s"] = time.perf_counter() - start
        self.callbacks.on_step_start(self, self.state.step + 1)
        with device_context():
            self.model.zero_grad_buffer()
            self.optimizer.zero_grad()
            start = time.perf_counter()
            loss = self._run_schedule(tokens, forward_only=False)
            timings["fwd_bwd_s"] = time.perf_counter() - start
            start = time.perf_counter()
            log_now = (self.state.step + 1) % self.config.run.log_every == 0
            before = [p.detach().clone() for p in self.gpt.parameters()] if log_now else None
            _, grad_norm, _ = self.optimizer.step()
            update = None if before is None else mstep.update_norm(self.gpt, before, self.dp_size)
            timings["optimizer_s"] = time.perf_counter() - start
        grad_norm = float("nan") if grad_norm is None else float(grad_norm)
        return StepResult(loss, grad_norm, update, timings, batch_index)

    def _run_schedule(self, tokens: Any, forward_only: bool) -> float:
        """The global batch's mean loss (backward too unless forward_only), same on every rank."""
        hook = None if forward_only else (lambda loss: self.callbacks.on_loss(self, loss))
        losses = mstep.run_schedule(
            self.model,
            tokens,
            self.config.batch.micro_batch_size,
            self.num_microbatches,
            forward_only,
            hook,
        )
        return mstep.reduce_loss(losses, self.ps, self.dp_size)

    def _count_components(self, components: Any, seq_length: int) -> None:
        counts = mstep.component_counts(components, len(self.data.component_names), self.ps)
        for index, value in enumerate(counts):
            self.state.tokens_per_component[index] += value * seq_length
            self.state.sequences_per_component[index] += value

    # ----- checkpoints ---------------------------------------------------------------------
    def save(self, blocking: bool = False) -> float:
        """Checkpoint the current state (asynchronously when checkpoint.async_save)."""
        start = time.perf_counter()
        ckpt = self.config.checkpoint
        state = {
            **asdict(self.state),
            **self.data.identity,
            "config_sha256": config_sha256(self.config),
            "model_sha256": config_sha256(self.config.model),
            "guard": self.guard.state(),
            "total_steps": self.total_steps,
            "vocab_size": self.vocab_size,
            "world_size": torch.distributed.get_world_size(),
            "lr": lr_at(max(0, self.state.step - 1), self.config.optim, self.total_steps),
            "config": config_dict(self.config),
            "init_from": self.init_from,
        }
        saver = None if blocking else self.saver
        keep = (ckpt.keep_last, ckpt.keep_every)
        checkpoint.save(
            self.run_dir, self.state.step, self.model, self.optimizer, state, keep, saver
        )
        self.has_checkpoint = True
        self.saved_step = self.state.step
        seconds = time.perf_counter() - start
        self.callbacks.on_checkpoint(self, self.state.step, seconds)
        return seconds

    def newest_checkpoint(self, resuming: bool = False) -> Path | None:
        """Rank 0 picks the newest valid checkpoint (logging corrupt ones) and tells the others.
        `resuming`: every rank refuses a run whose checkpoints are all corrupt (it would train
        again from step 0 and replace them: `checkpoint.none_verifies`)."""

        def pick() -> str:
            path, skipped = checkpoint.newest_valid(self.run_dir)
            for entry in skipped:
                self.callbacks.on_checkpoint_skipped(self, entry)
            if resuming and path is None and skipped:
                raise checkpoint.none_verifies(self.run_dir, skipped)
            return str(path) if path else ""

        chosen = self._from_rank0(pick)
        return Path(chosen) if chosen else None

    def _from_rank0(self, decide: Callable[[], str]) -> str:
        """`decide()` on rank 0, told to every rank; its ArtifactError is raised on every rank."""
        chosen: list[Any] = [None, None]
        if self.rank == 0:
            try:
                chosen = [decide(), None]
            except ArtifactError as exc:
                chosen = [None, str(exc)]
        torch.distributed.broadcast_object_list(chosen, src=0)
        if chosen[1] is not None:
            raise ArtifactError(chosen[1])
        return str(chosen[0])

    def restore(self, path: Path, keep_skips: bool = False) -> dict[str, Any]:
        """Load a checkpoint once its recorded data and model match this run's (checked first)."""
        expected = checkpoint.read_state(path)
        check_resume(self.config, self.data, expected, self.vocab_size, path.name)
        recorded = checkpoint.load(path, self.model, self.optimizer)
        self.init_from = recorded.get("init_from")
        skipped = set(self.state.skipped_batches) | set(recorded["skipped_batches"])
        names = TrainState.__dataclass_fields__
        self.state = TrainState(**{k: recorded[k] for k in names if k in recorded})
        if keep_skips:
            self.state.skipped_batches = sorted(skipped)
        self.saved_step = self.state.step
        return recorded

    def next_batch(self) -> int | None:
        batch = self.state.batch
        skipped = set(self.state.skipped_batches)
        while batch in skipped:
            batch += 1
        return batch if batch < self.data.num_batches else None
