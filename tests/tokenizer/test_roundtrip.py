"""What the tokenizer guarantees on text: exact round trips, no unknowns, digits, CJK, specials."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tokenizer.tok_helpers import EDGE_CASES, load_pieces
from tokenizer.lock import load_locked

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def hf(tokenizer_dir: Path):
    tokenizer = load_locked(tokenizer_dir).tokenizer
    tokenizer.encode_special_tokens = True
    return tokenizer


@pytest.mark.parametrize("group", ["en", "zh", "python", "math"])
def test_roundtrip_is_exact_per_language(hf, group: str) -> None:
    pieces = [p["text"] for p in load_pieces() if p["lang"] == group or p["domain"] == group]
    assert pieces
    for text in pieces:
        ids = hf.encode(text, add_special_tokens=False).ids
        assert hf.decode(ids, skip_special_tokens=False) == text


def test_unseen_scripts_and_edge_cases_roundtrip_without_unknowns(hf) -> None:
    texts = [r["text"] for r in EDGE_CASES] + ["Ελληνικά 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u200b\x00 ☃ עברית"]
    for text in texts:
        encoding = hf.encode(text, add_special_tokens=False)
        assert None not in encoding.ids and all(0 <= i < hf.get_vocab_size() for i in encoding.ids)
        assert hf.decode(encoding.ids, skip_special_tokens=False) == text


def test_special_token_text_in_a_document_is_not_an_eod(hf) -> None:
    ids = hf.encode("end <|endoftext|> here", add_special_tokens=False).ids
    assert 0 not in ids and 1 not in ids


def test_digits_are_split_and_cjk_is_isolated(hf) -> None:
    tokens = hf.encode("year 2024 and 世界abc", add_special_tokens=False).tokens
    assert [t for t in tokens if any(c.isdigit() for c in t)] == ["2", "0", "2", "4"]
    decoded = [hf.decode([hf.token_to_id(t)]) for t in tokens]
    # no token mixes Chinese characters with Latin letters or spaces
    for piece in decoded:
        has_cjk = any("\u4e00" <= c <= "\u9fff" for c in piece)
        assert not has_cjk or all("\u4e00" <= c <= "\u9fff" for c in piece)
