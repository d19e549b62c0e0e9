"""Helpers for the tokenizer tests: synthetic documents and the training config used in tests.

Documents are composed from the hand-written pieces in tests/data/tokenizer/pieces.jsonl
(English, Chinese, code, math), deterministically, plus a few edge cases for round trips.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizer.config import TokenizerTrainConfig
from tokenizer.lock import LockedTokenizer

PIECES = Path(__file__).resolve().parents[1] / "data" / "tokenizer" / "pieces.jsonl"

EDGE_CASES = [
    {
        "text": "A document that mentions <|endoftext|> and <|pad|> as plain text.",
        "domain": "web",
        "lang": "en",
    },
    {
        "text": "Emoji 🙂👍🏽, accents café naïve (NFD: cafe\u0301), tabs\tand  double  spaces \n",
        "domain": "web",
        "lang": "en",
    },
    {"text": "混合文本 mixed with English, 数字 12345 和标点。", "domain": "web", "lang": "zh"},
    {"text": "", "domain": "web", "lang": "en"},
]


def load_pieces() -> list[dict[str, Any]]:
    return [json.loads(line) for line in PIECES.read_text(encoding="utf-8").splitlines()]


def make_records(num_docs: int, seed: int = 0) -> list[dict[str, Any]]:
    """`num_docs` documents: each joins 2-6 pieces of one (domain, lang) group, shuffled."""
    rng = random.Random(seed)
    groups: dict[tuple[str, str], list[str]] = {}
    for piece in load_pieces():
        groups.setdefault((piece["domain"], piece["lang"]), []).append(piece["text"])
    keys = sorted(groups)
    records = []
    for index in range(num_docs):
        domain, lang = keys[index % len(keys)]
        chosen = rng.sample(
            groups[(domain, lang)], k=min(len(groups[(domain, lang)]), rng.randint(2, 6))
        )
        joiner = "" if lang == "zh" else "\n\n"
        records.append(
            {
                "text": joiner.join(chosen),
                "domain": domain,
                "lang": lang,
                "source": f"synthetic:{domain}/{lang}",
            }
        )
    return records + [dict(r, source="edge") for r in EDGE_CASES]


def train_config(shards: Path, out: Path, **changes: Any) -> TokenizerTrainConfig:
    data = {
        "data": str(shards),
        "out": str(out),
        "vocab_size": 768,
        "special_tokens": ["<|user|>"],
        **changes,
    }
    return TokenizerTrainConfig.model_validate(data)


@dataclass(frozen=True)
class MegatronTokenizer:
    """The minimal tokenizer view Megatron's GPTDatasetConfig reads (vocab_size, eod, pad), as a
    Megatron-LM user would hand our encoded prefixes to its dataset builders."""

    vocab_size: int
    eod: int
    pad: int
    tokenizer_id: str

    @property
    def unique_identifiers(self) -> dict[str, str]:
        """Part of Megatron's dataset cache key: a different tokenizer gets other indices."""
        return {"class": "pretrain-locked-bpe", "tokenizer": self.tokenizer_id}


def megatron_tokenizer(locked: LockedTokenizer) -> MegatronTokenizer:
    return MegatronTokenizer(locked.vocab_size, locked.eod_id, locked.pad_id, locked.id)
