"""The Hugging Face side files (`tokenizer_config.json`, `special_tokens_map.json`), so that
`AutoTokenizer.from_pretrained(DIR)` gives our encoder's ids (docs/tokenizer.md): eos = EOD, no
bos/unk, nothing added around a text, and `split_special_tokens: true` because `tokenizers` does
not save its `encode_special_tokens` flag. Key names that transformers 4.x and 5.x both read."""

from __future__ import annotations

from typing import Any

from pretrain.manifest import canonical_json

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"


def _special_names(special_tokens: dict[str, int], eod_id: int, pad_id: int) -> dict[str, Any]:
    by_id = {token_id: token for token, token_id in special_tokens.items()}
    extra = [
        t
        for t, i in sorted(special_tokens.items(), key=lambda kv: kv[1])
        if i not in (eod_id, pad_id)
    ]
    return {
        "eos_token": by_id[eod_id],
        "pad_token": by_id[pad_id],
        "additional_special_tokens": extra,
    }


def tokenizer_config(
    special_tokens: dict[str, int], eod_id: int, pad_id: int, model_max_length: int
) -> dict[str, Any]:
    """The `tokenizer_config.json` content for a tokenizer with these special ids."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "unk_token": None,
        **_special_names(special_tokens, eod_id, pad_id),
        "model_max_length": int(model_max_length),
        "padding_side": "right",
        "truncation_side": "right",
        "add_bos_token": False,
        "add_eos_token": False,
        "split_special_tokens": True,
        "clean_up_tokenization_spaces": False,
    }


def hf_file_bytes(lock: dict[str, Any], model_max_length: int) -> dict[str, bytes]:
    """{file name: bytes} of the HF side files for `lock` (canonical JSON: a stable hash)."""
    specials = (lock["special_tokens"], lock["eod_id"], lock["pad_id"])
    config = tokenizer_config(*specials, model_max_length)
    return {
        TOKENIZER_CONFIG_FILE: canonical_json(config) + b"\n",
        SPECIAL_TOKENS_MAP_FILE: canonical_json(_special_names(*specials)) + b"\n",
    }
