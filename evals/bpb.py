"""Bits per byte, loss and perplexity of a model on eval sets, per domain and language.

The scoring core is `trainer.evalcore` (the trainer uses it for evaluation during training and
must not import evals); this module re-exports it for `pretrain eval run` and keeps `EvalHook`.

In-training hook: `evaluate(model, eval_sets, encoder=tokenizer)` returns a flat metrics dict
(`bpb`, `loss`, `ppl`, `bpb/<domain>/<lang>`, ...); the trainer itself runs it every
`eval.every` steps (trainer/periodic_eval.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.evalcore import (
    LN2,
    Encoder,
    EvalSet,
    Scorer,
    as_encoder,
    evaluate,
    load_eval_sets,
    score_sequences,
)

__all__ = [
    "LN2",
    "Encoder",
    "EvalHook",
    "EvalSet",
    "Scorer",
    "as_encoder",
    "evaluate",
    "load_eval_sets",
    "score_sequences",
]


class EvalHook:
    """In-training evaluation every `every` steps: `hook(step, model)` appends one JSONL line
    `{"step", "metrics"}` to `out_jsonl` (rank 0 only; the trainer decides who calls it).

    `model` is anything with `.logprobs(tokens)`; the sets are loaded once.
    """

    def __init__(
        self,
        sets_dir: str | Path,
        tokenizer: Any,
        every: int,
        out_jsonl: str | Path,
        max_docs: int | None = 50,
        seq_length: int | None = None,
        batch_size: int = 8,
    ) -> None:
        self.sets = load_eval_sets(sets_dir, max_docs)
        self.encoder = as_encoder(tokenizer)
        self.every, self.out = every, Path(out_jsonl)
        self.seq_length, self.batch_size = seq_length, batch_size

    def __call__(self, step: int, model: Scorer) -> dict[str, float] | None:
        if step % self.every:
            return None
        import json

        metrics = evaluate(
            model,
            self.sets,
            encoder=self.encoder,
            seq_length=self.seq_length,
            batch_size=self.batch_size,
        )
        self.out.parent.mkdir(parents=True, exist_ok=True)
        with open(self.out, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"step": step, "metrics": metrics}, sort_keys=True) + "\n")
        return metrics
