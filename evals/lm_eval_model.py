"""Our checkpoints as lm-evaluation-harness LMs (requests encoded as lm-eval's HFLM encodes them,
so a checkpoint and its HF export score the same), and an HF export as a bits-per-byte scorer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lm_eval.api.model import LM

from evals.tasks import encode_pair
from pretrain.artifacts import export as export_artifact
from pretrain.errors import InputError
from trainer.scoring import as_encoder, score_sequences


class ProjectLM(LM):  # type: ignore[misc]
    """A `.logits(tokens)` model + our tokenizer as an lm-eval LM (log-likelihood tasks)."""

    def __init__(self, model: Any, tokenizer: Any, seq_length: int, batch_size: int = 8) -> None:
        super().__init__()
        self.model, self.encoder = model, as_encoder(tokenizer)
        self.seq_length, self.batch = seq_length, batch_size

    def _score(self, rows: list[tuple[list[int], int]]) -> list[tuple[float, bool]]:
        """(sum log p, greedy) of the last `n` tokens of each id list (left-truncated)."""
        results: list[tuple[float, bool]] = [(0.0, True)] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
        for start in range(0, len(order), self.batch):
            chunk = order[start : start + self.batch]
            ids = [rows[i][0][-(self.seq_length + 1) :] for i in chunk]
            width = max(len(x) for x in ids)
            tokens = torch.full((len(ids), width), self.encoder.eod_id, dtype=torch.long)
            for row, x in enumerate(ids):
                tokens[row, : len(x)] = torch.tensor(x)
            logits = self.model.logits(tokens[:, :-1]).float()
            logp = torch.log_softmax(logits, dim=-1)
            for row, index in enumerate(chunk):
                length, n = len(ids[row]), min(rows[index][1], len(ids[row]) - 1)
                targets = tokens[row, length - n : length]
                span = logp[row, length - n - 1 : length - 1]
                total = float(span.gather(-1, targets[:, None]).sum(dtype=torch.float64))
                greedy = bool((span.argmax(-1) == targets).all())
                results[index] = (total, greedy)
        return results

    def loglikelihood(self, requests: list[Any]) -> list[tuple[float, bool]]:
        rows = []
        for request in requests:
            ctx, cont = encode_pair(self.encoder, *request.args)
            if len(cont) > self.seq_length:
                raise InputError(_too_long(len(cont), self.seq_length, request.args[1]))
            rows.append((ctx + cont, len(cont)))
        return self._score(rows)

    def loglikelihood_rolling(self, requests: list[Any]) -> list[float]:
        """Each document after the end-of-document id, in the windows bits per byte is scored in
        (trainer.scoring: lm-eval's rolling windows, context length 1)."""
        eod = self.encoder.eod_id
        docs = [[eod, *ids] for ids in self.encoder.encode_batch([r.args[0] for r in requests])]
        scored = score_sequences(self.model, docs, self.seq_length, self.batch, pad_id=eod)
        return [float(logp.sum(dtype=np.float64)) for logp in scored]

    def generate_until(self, requests: list[Any]) -> list[str]:
        raise NotImplementedError(
            "generation tasks need the HF export: `pretrain export`, then `pretrain eval run "
            "EXPORT_DIR --lm-eval ...`"
        )


class CheckpointLM(ProjectLM):
    """`--model pretrain` of `pretrain eval lm-eval`: a `checkpoints/iter_NNNNNNN` directory of
    `pretrain launch` and its (checked) tokenizer as an lm-eval model."""

    def __init__(
        self,
        checkpoint: str,
        tokenizer: str,
        batch_size: int | str = 8,
        **lm_eval_options: Any,  # device, max_batch_size: a CPU model ignores them
    ) -> None:
        from tokenizer.lock import check_match, load_locked
        from trainer.inference import load_model

        locked = load_locked(tokenizer)
        model = load_model(checkpoint)
        if model.tokenizer_sha256:
            check_match(model.tokenizer_sha256, locked, f"checkpoint {checkpoint}")
        size = int(batch_size) if str(batch_size).isdigit() else 8  # "auto": our default
        super().__init__(model, locked, model.seq_length, batch_size=size)


def _too_long(tokens: int, seq_length: int, continuation: str) -> str:
    """A continuation of more tokens than the window: scoring its tail only would be a wrong
    log-likelihood, and lm-eval's own HFLM fails on it (its continuation slice is longer than
    the window's logits)."""
    return (
        f"an lm-eval request's continuation has {tokens} tokens, more than the model's "
        f"seq_length {seq_length} ({continuation[:40]!r}...); it cannot be scored whole: drop "
        "those documents, or score them as a cloze task file (`--tasks FILE.jsonl`, windowed)"
    )


def load_export(export_dir: str | Path) -> tuple[Any, Any]:
    """(LlamaForCausalLM in eval mode, AutoTokenizer) of a `pretrain export` directory, offline."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    export_artifact.open(export_dir)  # bytes verified, no unlisted file transformers would read
    model = AutoModelForCausalLM.from_pretrained(
        str(export_dir), local_files_only=True, dtype=torch.float32
    )
    model.eval()
    return model, AutoTokenizer.from_pretrained(str(export_dir), local_files_only=True)


def hf_lm(model: Any, tokenizer: Any, batch_size: int = 8) -> Any:
    """lm-eval's own HFLM over an exported model."""
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)


class HFScorer:
    """An HF export with the `.logprobs(tokens)` interface of trainer.scoring, plus its identity."""

    def __init__(self, export_dir: str | Path, model: Any) -> None:
        manifest = json.loads((Path(export_dir) / "manifest.json").read_text())
        self.model = model
        self.step = int(manifest["counts"]["step"])
        self.tokenizer_sha256 = (manifest.get("tokenizer") or {}).get("sha256")
        self.seq_length = int(model.config.max_position_embeddings)

    @torch.no_grad()
    def logprobs(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        logp = torch.log_softmax(self.model(tokens).logits[:, :-1].float(), dim=-1)
        return logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)
