"""Evaluation during training: `eval.every: N` and `eval.sets: DIR` in the train config.

Every N steps (and at the last step) the live model scores the fixed eval sets of an `evalset`
artifact (bits per byte, loss, perplexity, overall and per domain/language: trainer.evalcore, the
same code as `pretrain eval run`). Every rank runs the forward passes (tensor-parallel ranks
must all take part; data-parallel replicas repeat the same small work), rank 0 logs one record
`{"step", "event": "eval", "val/bpb", "val/loss", "val/bpb/<domain>/<lang>", ...}` to
metrics.jsonl and TensorBoard. Pipeline parallel runs are refused when the config is read (the
eval would need its own pipeline schedule): evaluate their checkpoints with `pretrain eval run`.

A trainer callback (trainer/callbacks.py): `on_step_end` runs the evaluation when it is due and
hands the record to the other callbacks' `on_eval` (the metrics log writes it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pretrain.errors import ConfigError
from trainer.callbacks import Callback
from trainer.evalcore import as_encoder, evaluate, load_eval_sets
from trainer.step import next_token_logprobs

if TYPE_CHECKING:
    from trainer.callbacks import TrainerView


class LiveScorer:
    """The training model chunk as a `.logprobs(tokens)` scorer (run in eval mode, no grad)."""

    def __init__(self, model: Any, on_gpu: bool) -> None:
        self.model, self.on_gpu = model, on_gpu

    def logprobs(self, tokens: torch.Tensor) -> torch.Tensor:
        return next_token_logprobs(self.model, tokens, self.on_gpu)


class PeriodicEval(Callback):
    """Loads the sets and the run's tokenizer once; `run(step)` returns the metrics record."""

    def __init__(self, config: Any, model: Any, on_gpu: bool) -> None:
        from tokenizer.lock import load_locked
        from trainer.data import tokenizer_dir

        settings = config.eval  # a pipeline-parallel run was refused with eval.every (config.py)
        directory = tokenizer_dir(config)
        if directory is None:
            raise ConfigError(
                "eval.every needs the run's tokenizer: train on a mixture (data.source: mixture) "
                "or set data.tokenizer_dir"
            )
        self.every = settings.every
        self.sets = load_eval_sets(settings.sets, settings.max_docs)
        self.encoder = as_encoder(load_locked(Path(directory)))
        self.scorer = LiveScorer(model, on_gpu)
        self.seq_length = config.model.seq_length
        self.batch_size = settings.batch_size

    def on_step_end(self, trainer: TrainerView, record: dict[str, Any]) -> None:
        """Every rank scores the eval sets when due; the callbacks' on_eval gets the record."""
        if self.due(trainer.state.step, trainer.total_steps):
            trainer.callbacks.on_eval(trainer, self.run(trainer.state.step))

    def due(self, step: int, last: int) -> bool:
        return step % self.every == 0 or step == last

    def run(self, step: int) -> dict[str, Any]:
        was_training = self.scorer.model.training
        self.scorer.model.eval()
        try:
            metrics = evaluate(
                self.scorer,
                self.sets,
                encoder=self.encoder,
                seq_length=self.seq_length,
                batch_size=self.batch_size,
            )
        finally:
            self.scorer.model.train(was_training)
        record: dict[str, Any] = {"step": step, "event": "eval"}
        for key, value in metrics.items():
            name = key.split("/")[0]
            if name in ("bpb", "loss", "ppl"):
                record[f"val/{key}"] = value
        return record
