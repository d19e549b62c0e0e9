"""Bits per byte, loss and perplexity on eval sets, per domain and language: the scoring shared by
`pretrain eval run` and evaluation during training. In the trainer because the torchrun ranks
run it and the trainer must not import `evals`. Each document is prefixed with the end-of-document
token, so every one of its tokens is predicted; bpb = NLL in bits / UTF-8 bytes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow.parquet as pq

from pretrain.artifacts import evalset as evalset_artifact

LN2 = math.log(2.0)


class Scorer(Protocol):
    def logprobs(self, tokens: Any) -> Any:  # pragma: no cover - protocol
        ...


@dataclass
class Encoder:
    """Text -> token ids, plus the end-of-document id used as leading context."""

    encode_batch: Callable[[list[str]], list[list[int]]]
    eod_id: int


def as_encoder(tokenizer: Any) -> Encoder:
    """An Encoder, or a LockedTokenizer (`.tokenizer`, `.eod_id`) adapted to one."""
    if isinstance(tokenizer, Encoder):
        return tokenizer
    hf = tokenizer.tokenizer

    def encode_batch(texts: list[str]) -> list[list[int]]:
        return [enc.ids for enc in hf.encode_batch(texts, add_special_tokens=False)]

    return Encoder(encode_batch=encode_batch, eod_id=int(tokenizer.eod_id))


@dataclass
class EvalSet:
    """One domain/language set of held-out documents."""

    name: str
    domain: str
    lang: str
    texts: list[str]
    ids: list[str] = field(default_factory=list)


def load_eval_sets(directory: str | Path, max_docs: int | None = None) -> list[EvalSet]:
    """The sets of an `evalset` artifact (verified against its manifest)."""
    evalset = evalset_artifact.open(directory)
    sets = []
    for entry in evalset.fields.sets:
        table = pq.read_table(evalset.set_path(entry))
        texts = table.column("text").to_pylist()[:max_docs]
        ids = table.column("id").to_pylist()[:max_docs]
        sets.append(EvalSet(entry.name, entry.domain, entry.lang, texts, ids))
    return sets


def _windows(ids: list[int], seq_length: int) -> list[list[int]]:
    """Chunks of at most seq_length + 1 tokens overlapping by one (each predicts len - 1)."""
    return [ids[start : start + seq_length + 1] for start in range(0, len(ids) - 1, seq_length)]


def score_sequences(
    model: Scorer,
    sequences: Sequence[Sequence[int]],
    seq_length: int,
    batch_size: int = 8,
    pad_id: int = 0,
) -> list[np.ndarray]:
    """Log-prob of every token after the first, per sequence (windows of seq_length predictions;
    a window's first token is context only)."""
    import torch

    pieces = [(i, w) for i, ids in enumerate(sequences) for w in _windows(list(ids), seq_length)]
    order = sorted(range(len(pieces)), key=lambda k: len(pieces[k][1]))
    scored: dict[int, np.ndarray] = {}
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = max(len(pieces[k][1]) for k in rows)
            batch = torch.full((len(rows), width), pad_id, dtype=torch.long)
            for row, k in enumerate(rows):
                batch[row, : len(pieces[k][1])] = torch.tensor(pieces[k][1], dtype=torch.long)
            logp = model.logprobs(batch).float().cpu().numpy()
            for row, k in enumerate(rows):
                scored[k] = logp[row, : len(pieces[k][1]) - 1]
    per_sequence: list[list[np.ndarray]] = [[] for _ in sequences]
    for k, (i, _) in enumerate(pieces):
        per_sequence[i].append(scored[k])
    return [np.concatenate(p) if p else np.zeros(0, dtype=np.float32) for p in per_sequence]


def _set_metrics(nll_nats: float, tokens: int, num_bytes: int, docs: int) -> dict[str, float]:
    loss = nll_nats / tokens if tokens else float("nan")
    return {
        "bpb": nll_nats / LN2 / num_bytes if num_bytes else float("nan"),
        "loss": loss,
        "ppl": math.exp(min(loss, 700.0)),
        "tokens": tokens,
        "bytes": num_bytes,
        "documents": docs,
    }


def _document_records(
    eval_set: EvalSet, logps: Sequence[np.ndarray], doc_bytes: Sequence[int]
) -> list[dict[str, Any]]:
    ids = eval_set.ids or [str(i) for i in range(len(logps))]
    return [
        {
            "set": eval_set.name,
            "domain": eval_set.domain,
            "lang": eval_set.lang,
            "id": str(doc_id),
            "nll": -float(lp.sum(dtype=np.float64)),
            "bytes": int(size),
            "tokens": len(lp),
        }
        for doc_id, lp, size in zip(ids, logps, doc_bytes)
    ]


def evaluate(
    model: Scorer,
    eval_sets: Sequence[EvalSet],
    encoder: Any,
    seq_length: int = 512,
    batch_size: int = 8,
    documents: list[dict[str, Any]] | None = None,
) -> dict[str, float]:
    """Bits per byte, loss (nats/token) and perplexity overall and per set.

    Returns a flat dict: `bpb`, `loss`, `ppl`, `tokens`, `bytes`, and `bpb/<domain>/<lang>`,
    `loss/<domain>/<lang>`, ... for each set (`encoder`: see `as_encoder`). When `documents` is
    a list, one record per document is appended to it (`set`, `domain`, `lang`, `id`, `nll` in
    nats, `bytes`, `tokens`): what a paired comparison of two models on the same documents needs (trainer/gate_stats.py).
    """
    encoder = as_encoder(encoder)
    metrics: dict[str, float] = {}
    totals = np.zeros(3)
    for eval_set in eval_sets:
        texts = eval_set.texts
        encoded = [[encoder.eod_id, *ids] for ids in encoder.encode_batch(texts)]
        logps = score_sequences(model, encoded, seq_length, batch_size, pad_id=encoder.eod_id)
        nll = -float(sum(lp.sum(dtype=np.float64) for lp in logps))
        tokens = sum(len(lp) for lp in logps)
        doc_bytes = [len(t.encode("utf-8")) for t in texts]
        num_bytes = sum(doc_bytes)
        if documents is not None:
            documents.extend(_document_records(eval_set, logps, doc_bytes))
        per_set = _set_metrics(nll, tokens, num_bytes, len(texts))
        for key, value in per_set.items():
            metrics[f"{key}/{eval_set.domain}/{eval_set.lang}"] = value
        totals += (nll, tokens, num_bytes)
    overall = _set_metrics(totals[0], int(totals[1]), int(totals[2]), 0)
    overall.pop("documents")
    return {**overall, **metrics}
