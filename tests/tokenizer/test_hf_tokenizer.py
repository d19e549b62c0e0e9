"""The tokenizer artifact as a complete Hugging Face tokenizer (transformers.AutoTokenizer, offline)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pretrain.artifacts.tokenizer import LOCK_FILE, TOKENIZER_FILE
from pretrain.errors import ArtifactError
from pretrain.manifest import load_manifest
from tests.tokenizer.tok_helpers import make_records
from tokenizer.lock import load_locked

pytestmark = pytest.mark.timeout(120)


def _auto(directory: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)


def test_auto_tokenizer_declares_the_scheme_and_pads(tokenizer_dir: Path) -> None:
    hf = _auto(tokenizer_dir)
    assert (hf.eos_token, hf.eos_token_id) == ("<|endoftext|>", 0)
    assert (hf.pad_token, hf.pad_token_id) == ("<|pad|>", 1)
    assert hf.bos_token is None and hf.unk_token is None
    assert "<|user|>" in hf.all_special_tokens
    assert hf.model_max_length == 4096  # the tokenizer config's default, not 1e30
    batch = hf(["a short one", "a somewhat longer second text"], padding=True)
    short, long = batch["input_ids"]
    assert len(short) == len(long) and short[-1] == 1 and batch["attention_mask"][0][-1] == 0
    assert batch["attention_mask"][1] == [1] * len(long)


def test_auto_tokenizer_gives_our_encoders_ids_also_for_special_token_text(
    tokenizer_dir: Path,
) -> None:
    hf = _auto(tokenizer_dir)
    ours = load_locked(tokenizer_dir).tokenizer
    texts = [r["text"] for r in make_records(60)] + [
        "<|endoftext|>",
        "x<|pad|>y <|user|> z",
        "ends with <|endoftext|>",
    ]
    for text in texts:
        expected = ours.encode(text, add_special_tokens=False).ids
        assert hf(text)["input_ids"] == expected, text
        assert hf.decode(expected) == text
    # the literal string is text, not the EOD id (the issue: 3 tokens outside, 9 inside before)
    assert 0 not in hf("<|endoftext|>")["input_ids"]


def test_one_byte_edit_of_tokenizer_config_is_refused(tokenizer_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, copy)
    assert set(load_manifest(copy)["files"]) == {
        TOKENIZER_FILE,
        LOCK_FILE,
        "tokenizer_config.json",
        "special_tokens_map.json",
    }
    path = copy / "tokenizer_config.json"
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"split_special_tokens":true', b'"split_special_tokens":fals'))
    assert path.read_bytes() != data and len(path.read_bytes()) == len(data)
    with pytest.raises(ArtifactError, match=r"tokenizer_config.json does not match its sha256"):
        load_locked(copy)
    (copy / "tokenizer_config.json").unlink()
    with pytest.raises(ArtifactError, match=r"tokenizer_config.json is missing"):
        load_locked(copy)
