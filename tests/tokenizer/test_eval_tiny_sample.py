"""`tokenizer eval` on a sample SentencePiece cannot train on is one line naming --no-baseline:
a one-document corpus (our tokenizer holds 279 pieces, SentencePiece needs 282) and a corpus
whose every line is longer than the baseline reads (it gets no sentence at all). Before, both
were SentencePiece's RuntimeError traceback; --no-baseline evaluates them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pretrain_app.cli import main
from tests.tokenizer.synthetic import write_shards
from tests.tokenizer.tok_helpers import train_config

ONE_DOCUMENT = "Hello world, this is the only document in this corpus. It has a few words."
ONE_LONG_LINE = " ".join(f"word{index % 997}" for index in range(4000))  # ~30 KB, no newline


@pytest.mark.timeout(120)
@pytest.mark.parametrize("text", [ONE_DOCUMENT, ONE_LONG_LINE], ids=["one-doc", "long-lines"])
def test_a_sample_sentencepiece_cannot_train_on_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    from tokenizer.train import train

    records = [{"text": text, "domain": "web", "lang": "en", "source": "tiny"}]
    shards = write_shards(tmp_path / "shards", records, eval_fraction=0.0)
    tokenizer = tmp_path / "tokenizer"
    train(train_config(shards, tokenizer, vocab_size=512, special_tokens=[]))
    argv = ["tokenizer", "eval", str(tokenizer), "--data", str(shards)]
    assert main([*argv, "--out", str(tmp_path / "eval")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "SentencePiece baseline cannot be trained" in err and "--no-baseline" in err
    assert not (tmp_path / "eval").exists()
    out = tmp_path / "eval-ours"
    assert main([*argv, "--out", str(out), "--no-baseline"]) == 0
    assert json.loads((out / "report.json").read_text())["ours"]["groups"]["all"]
