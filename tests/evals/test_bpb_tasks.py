"""Bits per byte and task scoring with tiny real torch models whose answers are known."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evals.tasks import evaluate_tasks, load_task, load_tasks, score_task
from pretrain.errors import InputError
from tests.evals.models import BigramLM, byte_encoder
from trainer.scoring import EvalSet, evaluate

DATA = Path(__file__).resolve().parents[1] / "data" / "evals"
TRAIN = "the cat sat on the mat. the dog ran to the park. " * 20
SETS = [
    EvalSet("web__en", "web", "en", ["the cat sat on the mat.", "the dog ran to the park."]),
    EvalSet("code__en", "code", "en", ["def f(x):\n    return x + 1\n", "é ü 中文"]),
]


def test_uniform_model_has_log2_vocab_bits_per_byte():
    metrics = evaluate(BigramLM(), SETS, encoder=byte_encoder())
    assert metrics["bpb"] == pytest.approx(math.log2(257), rel=1e-5)
    assert metrics["loss"] == pytest.approx(math.log(257), rel=1e-5)
    assert metrics["ppl"] == pytest.approx(257, rel=1e-4)
    total_bytes = sum(len(t.encode()) for s in SETS for t in s.texts)
    assert metrics["bytes"] == total_bytes == metrics["tokens"]
    assert metrics["documents/code/en"] == 2


def test_trained_model_is_better_on_its_domain_than_on_others():
    metrics = evaluate(BigramLM(TRAIN), SETS, encoder=byte_encoder())
    assert metrics["bpb/web/en"] < 1.5 < math.log2(257) * 0.9 < metrics["bpb/code/en"]


def test_windowing_and_batching_do_not_change_the_result():
    model = BigramLM(TRAIN)
    reference = evaluate(model, SETS, encoder=byte_encoder(), seq_length=512, batch_size=8)
    windowed = evaluate(model, SETS, encoder=byte_encoder(), seq_length=5, batch_size=3)
    for key, value in reference.items():
        assert windowed[key] == pytest.approx(value, rel=1e-6), key


def test_bits_per_byte_compares_across_tokenizers():
    """A 2-byte tokenizer over the same bigram statistics: loss per token differs, bpb of a
    uniform model over its vocabulary is log2(vocab) * tokens / bytes."""
    pairs = byte_encoder()
    pairs.encode_batch = lambda texts: [list(t.encode())[::2] for t in texts]
    metrics = evaluate(BigramLM(), SETS, encoder=pairs)
    assert metrics["bpb"] == pytest.approx(math.log2(257) * metrics["tokens"] / metrics["bytes"])
    assert metrics["bpb"] < math.log2(257)


def test_multiple_choice_and_cloze_from_the_documented_format():
    model, encoder = BigramLM(TRAIN), byte_encoder()
    mc = score_task(model, load_task(DATA / "tiny_mc.jsonl"), encoder)
    assert mc == {"acc": 1.0, "acc_norm": 1.0, "n": 3}
    assert score_task(BigramLM(), load_task(DATA / "tiny_mc.jsonl"), encoder)["n"] == 3
    metrics = evaluate_tasks(
        model, load_tasks([DATA / "tiny_mc.jsonl", DATA / "tiny_cloze.jsonl"]), encoder
    )
    untrained = evaluate_tasks(BigramLM(), load_tasks([DATA / "tiny_cloze.jsonl"]), encoder)
    assert metrics["task/tiny_cloze/bpb"] < untrained["task/tiny_cloze/bpb"]
    assert untrained["task/tiny_cloze/bpb"] == pytest.approx(math.log2(257), rel=1e-5)


def test_task_file_errors_name_the_line_and_fix(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"context": "a", "choices": [" b", " c"], "answer": 2}\n')
    with pytest.raises(InputError, match="bad.jsonl:1: 'answer' = 2"):
        load_task(bad)
    bad.write_text(
        '{"context": "a", "continuation": " b"}\n{"context": "a", "choices": '
        '[" b", " c"], "answer": 0}\n'
    )
    with pytest.raises(InputError, match="mixes multiple-choice and cloze"):
        load_task(bad)


def test_per_document_records_add_up_to_the_set_metrics():
    """What the paired gate statistic reads: one record per document whose NLL and bytes sum
    to the reported bits per byte of its set and overall."""
    documents: list[dict] = []
    metrics = evaluate(BigramLM(TRAIN), SETS, encoder=byte_encoder(), documents=documents)
    assert [(d["set"], d["id"]) for d in documents] == [
        (s.name, str(i)) for s in SETS for i in range(len(s.texts))
    ]
    for eval_set in SETS:
        mine = [d for d in documents if d["set"] == eval_set.name]
        assert [d["bytes"] for d in mine] == [len(t.encode()) for t in eval_set.texts]
        bpb = sum(d["nll"] for d in mine) / math.log(2) / sum(d["bytes"] for d in mine)
        assert bpb == pytest.approx(metrics[f"bpb/{eval_set.domain}/{eval_set.lang}"], rel=1e-9)
    total = sum(d["nll"] for d in documents) / math.log(2) / sum(d["bytes"] for d in documents)
    assert total == pytest.approx(metrics["bpb"], rel=1e-9)
    assert sum(d["tokens"] for d in documents) == metrics["tokens"]
