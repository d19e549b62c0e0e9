"""A cloze continuation longer than the model's window is scored whole: every token it has is
predicted (in windows, as lm-eval's `loglikelihood_rolling` scores a document), so its bits per
byte divide the log-likelihood of all its bytes by all its bytes. Before, only the tail that fit
one window was scored but every byte counted, which made bpb too low."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from evals.tasks import encode_pair, load_task, score_task
from tests.evals.models import BigramLM, byte_encoder

TEXT = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat. " * 4
SEQ = 16


def _task(tmp_path: Path, continuation: str) -> Path:
    path = tmp_path / "long_cloze.jsonl"
    row = {"id": "c1", "context": "once upon a time", "continuation": continuation}
    path.write_text(json.dumps(row) + "\n")
    return path


def _bigram_nll(model: BigramLM, ids: list[int]) -> float:
    """Exact negative log-likelihood (nats) of ids[1:] under the bigram, no window at all."""
    table = model.table.weight
    return -sum(float(table[a, b]) for a, b in zip(ids, ids[1:]))


def test_a_continuation_longer_than_the_window_is_scored_on_all_its_bytes(tmp_path):
    model, encoder = BigramLM(TEXT), byte_encoder()
    continuation = " " + TEXT[: 3 * SEQ + 5]  # 54 bytes: four windows of 16
    task = load_task(_task(tmp_path, continuation))
    metrics = score_task(model, task, encoder, seq_length=SEQ)
    ctx, cont = encode_pair(encoder, "once upon a time", continuation)
    assert len(cont) > 3 * SEQ and metrics["n_windowed"] == 1
    # a bigram sees one token back, so windows lose nothing: the exact whole-sequence value
    expected = _bigram_nll(model, [ctx[-1], *cont]) / math.log(2) / len(continuation.encode())
    assert metrics["bpb"] == pytest.approx(expected, rel=1e-5)
    tail_only = _bigram_nll(model, cont[-(SEQ + 1) :]) / math.log(2) / len(continuation.encode())
    assert metrics["bpb"] > tail_only * 2  # what the old denominator made of it


def test_the_windows_are_lm_evals_rolling_windows(tmp_path):
    """Same log-likelihood as lm-eval's own rolling windows over the continuation (prefix: the
    context's last token), scored by the same model."""
    model, encoder = BigramLM(TEXT[::-1]), byte_encoder()
    continuation = " " + TEXT[: 2 * SEQ + 3]
    task = load_task(_task(tmp_path, continuation))
    ours = score_task(model, task, encoder, seq_length=SEQ)
    ctx, cont = encode_pair(encoder, "once upon a time", continuation)
    total = 0.0
    for window in get_rolling_token_windows(cont, ctx[-1], SEQ, 1):
        context, predicted = make_disjoint_window(window)
        ids = torch.tensor([context + predicted])
        logp = model.logprobs(ids)[0, -len(predicted) :]
        total += float(logp.double().sum())
    expected = -total / math.log(2) / len(continuation.encode())
    assert ours["bpb"] == pytest.approx(expected, rel=1e-6)
    assert ours["mean_logprob"] == pytest.approx(total / len(cont), rel=1e-6)


def test_a_continuation_that_fits_is_scored_after_its_left_truncated_context(tmp_path):
    model, encoder = BigramLM(TEXT), byte_encoder()
    path = tmp_path / "short.jsonl"
    path.write_text(json.dumps({"context": TEXT, "continuation": " mat"}) + "\n")
    metrics = score_task(model, load_task(path), encoder, seq_length=SEQ)
    ctx, cont = encode_pair(encoder, TEXT, " mat")
    expected = _bigram_nll(model, (ctx + cont)[-(len(cont) + 1) :]) / math.log(2) / 4
    assert metrics["n_windowed"] == 0 and metrics["bpb"] == pytest.approx(expected, rel=1e-5)


class _BigramLogits(BigramLM):
    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.table(tokens)  # log-probabilities are logits of the same softmax


def test_our_lm_eval_adapter_refuses_a_continuation_it_cannot_score_whole():
    """lm-eval's loglikelihood of a continuation longer than the window: ProjectLM scored its
    tail as if it were the whole (HFLM fails on it); now a one-line refusal with the remedy."""
    from types import SimpleNamespace

    from evals.lm_eval_model import ProjectLM
    from pretrain.errors import InputError

    model = _BigramLogits(TEXT)
    lm = ProjectLM(model, byte_encoder(), seq_length=SEQ)
    short = SimpleNamespace(args=("once upon a time", " the cat"))
    ctx, cont = encode_pair(byte_encoder(), *short.args)
    ((value, _),) = lm.loglikelihood([short])
    assert value == pytest.approx(-_bigram_nll(model, [ctx[-1], *cont]), rel=1e-5)
    long = SimpleNamespace(args=("once upon a time", " " + TEXT[: 2 * SEQ]))
    with pytest.raises(InputError, match="more than the model's seq_length 16") as info:
        lm.loglikelihood([short, long])
    assert "\n" not in str(info.value)


def test_an_lm_eval_rolling_request_on_a_checkpoint_uses_lm_evals_rolling_windows():
    """`ProjectLM.loglikelihood_rolling` (a checkpoint under `--lm-eval`, a rolling task such as
    a user's wikitext YAML) gives what lm-eval's own rolling windows give: the whole document
    after the end-of-document id, every token predicted once."""
    from types import SimpleNamespace

    from evals.lm_eval_model import ProjectLM

    model, encoder = BigramLM(TEXT[::-1]), byte_encoder()
    ids = encoder.encode_batch([TEXT])[0]
    total = 0.0
    for window in get_rolling_token_windows(ids, encoder.eod_id, SEQ, 1):
        context, predicted = make_disjoint_window(window)
        logp = model.logprobs(torch.tensor([context + predicted]))[0, -len(predicted) :]
        total += float(logp.double().sum())
    (ours,) = ProjectLM(model, encoder, SEQ, 3).loglikelihood_rolling(
        [SimpleNamespace(args=(TEXT,))]
    )
    assert ours == pytest.approx(total, rel=1e-6)
