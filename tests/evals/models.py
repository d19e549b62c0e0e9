"""Tiny real torch language models for the evals tests (bytes as tokens, id 256 = end of doc)."""

from __future__ import annotations

import torch

from trainer.scoring import Encoder

EOD = 256
VOCAB = 257


def byte_encoder() -> Encoder:
    return Encoder(encode_batch=lambda texts: [list(t.encode("utf-8")) for t in texts], eod_id=EOD)


class BigramLM(torch.nn.Module):
    """log p(next | current) from add-one smoothed bigram counts of `text` (uniform if empty)."""

    def __init__(self, text: str = "") -> None:
        super().__init__()
        counts = torch.ones(VOCAB, VOCAB)
        ids = [EOD, *text.encode("utf-8")]
        for current, nxt in zip(ids, ids[1:]):
            counts[current, nxt] += 50.0
        self.table = torch.nn.Embedding.from_pretrained(torch.log_softmax(counts.log(), dim=-1))
        self.calls = 0

    def logprobs(self, tokens: torch.Tensor) -> torch.Tensor:
        """Log-prob of each next token: [B, S] -> [B, S-1]."""
        self.calls += 1
        logp = self.table(tokens[:, :-1])
        return logp.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)
