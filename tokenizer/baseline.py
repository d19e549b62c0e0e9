"""The SentencePiece BPE baseline on the same sample (line by line) and vocabulary size as ours,
set to be comparable: byte fallback, digits split, identity normalisation (an exact round trip
is possible), 3 reserved ids like our 3 specials."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

from pretrain.errors import InputError

MAX_LINE_BYTES = 16384


def train_sentencepiece(batches: Iterable[list[str]], vocab_size: int) -> Any:
    """Train a SentencePiece BPE in memory on the texts of `batches`; return the processor."""
    import sentencepiece as spm

    model = io.BytesIO()
    lines = (line for batch in batches for text in batch for line in text.split("\n"))
    kept = (line for line in lines if line.strip() and len(line.encode()) <= MAX_LINE_BYTES)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=kept,
            model_writer=model,
            model_type="bpe",
            vocab_size=vocab_size,
            byte_fallback=True,
            split_digits=True,
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            add_dummy_prefix=False,
            allow_whitespace_only_pieces=True,
            character_coverage=0.9995,
            max_sentence_length=MAX_LINE_BYTES,
            hard_vocab_limit=False,
            unk_id=0,
            bos_id=1,
            eos_id=2,
            pad_id=-1,
            num_threads=2,
            minloglevel=2,
            train_extremely_large_corpus=False,
        )
    except RuntimeError as exc:  # SentencePiece refuses a sample it cannot train on
        reason = " ".join(str(exc).split())
        raise InputError(
            f"the SentencePiece baseline cannot be trained at vocab_size {vocab_size} on this "
            f"sample ({reason}); pass --no-baseline, or train the tokenizer on more text"
        ) from None
    return spm.SentencePieceProcessor(model_proto=model.getvalue())
