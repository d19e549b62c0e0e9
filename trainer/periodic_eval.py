"""Evaluation during training (`eval.every: N`, `eval.sets: DIR`): every N steps and at the last,
the live model scores the evalset's sets (trainer.scoring, the code of `pretrain eval run`) and
rank 0 logs one `event: eval` record. Every rank runs the forward passes (tensor-parallel ranks
must all take part); pipeline-parallel runs are refused when the config is read (the eval would
need its own schedule)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pretrain.errors import ConfigError
from trainer.callbacks import Callback
from trainer.scoring import as_encoder, evaluate, load_eval_sets
from trainer.step import next_token_logprobs

if TYPE_CHECKING:
    from trainer.loop import Trainer

VAL_METRICS = ("bpb", "loss", "ppl")


class PeriodicEval(Callback):
    """Loads the sets and the run's tokenizer once; `run(step)` returns the metrics record. It is
    its own scorer: `.logprobs(tokens)` of the live model chunk (in eval mode, no grad)."""

    def __init__(self, config: Any, model: Any) -> None:
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
        self.model = model
        self.seq_length = config.model.seq_length
        self.batch_size = settings.batch_size

    def on_step_end(self, trainer: Trainer, record: dict[str, Any]) -> None:
        """Every rank scores the eval sets when due; the callbacks' on_eval gets the record."""
        step = trainer.state.step
        if step % self.every == 0 or step == trainer.total_steps:
            trainer.callbacks.on_eval(trainer, self.run(step))

    def logprobs(self, tokens: torch.Tensor) -> torch.Tensor:
        return next_token_logprobs(self.model, tokens)

    def run(self, step: int) -> dict[str, Any]:
        was_training = self.model.training
        self.model.eval()
        try:
            metrics = evaluate(
                self,
                self.sets,
                encoder=self.encoder,
                seq_length=self.seq_length,
                batch_size=self.batch_size,
            )
        finally:
            self.model.train(was_training)
        kept = {f"val/{k}": v for k, v in metrics.items() if k.split("/")[0] in VAL_METRICS}
        return {"step": step, "event": "eval", **kept}
