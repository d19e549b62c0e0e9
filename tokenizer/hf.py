"""The Hugging Face side files of a tokenizer: `tokenizer_config.json` and `special_tokens_map.json`.

With them `transformers.AutoTokenizer.from_pretrained(DIR)` (and what builds on it: lm-evaluation-
harness, vLLM, TGI) sees the scheme's special tokens: eos = `<|endoftext|>` (our EOD, appended after
every document), pad = `<|pad|>`, the user-defined ones as additional special tokens, no bos and no
unk (byte-level BPE encodes every string). Nothing is added around a text (`add_bos_token` and
`add_eos_token` false), as `pretrain tokenizer encode` adds the EOD itself.

Special-token text inside a document is encoded as text, never as the special id, exactly as our
encoder does: `split_special_tokens: true`. `tokenizers` 0.23 does not serialise its own
`encode_special_tokens` flag into `tokenizer.json` (saved and re-read, it is False again), so this
is the saved form of that setting that transformers applies on load; a user of the bare
`tokenizers.Tokenizer.from_file` must still set `encode_special_tokens = True` (README).

The key names are those transformers 4.x and 5.x both read (`PreTrainedTokenizerFast`,
`additional_special_tokens`), so tools pinned to older transformers load it too.
"""

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
    """{file name: exact bytes} of the HF side files of the tokenizer `lock` (lock.json)
    describes (canonical JSON, so the hash is stable)."""
    specials = (lock["special_tokens"], lock["eod_id"], lock["pad_id"])
    config = tokenizer_config(*specials, model_max_length)
    return {
        TOKENIZER_CONFIG_FILE: canonical_json(config) + b"\n",
        SPECIAL_TOKENS_MAP_FILE: canonical_json(_special_names(*specials)) + b"\n",
    }
