"""The tokenizer's pipeline, built here for training and checked here before a `tokenizer.json`
reaches the `tokenizers` library: a crafted pre-tokenizer regex that backtracks makes Oniguruma
give up mid-encode, which the library turns into a Rust panic, not an error. So a `tokenizer.json`
loads only when its pipeline is `build_tokenizer`'s for its lock.json and its ids fit the vocab.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pretrain.errors import ArtifactError
from pretrain.manifest import typed_or_refused
from tokenizer.config import PreTokenizeConfig

CJK_CLASS = r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\u3000-\u303f\uff00-\uffef]"
"""Han, Kana, Hangul, CJK punctuation and full-width forms: the scripts written without spaces."""


def build_tokenizer(pretokenize: PreTokenizeConfig) -> Any:
    """An untrained byte-level BPE with this project's pre-tokenisation and decoder."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    steps: list[Any] = [
        pre_tokenizers.Split(
            Regex(CJK_CLASS + ("+" if pretokenize.cjk == "run" else "")), behavior="isolated"
        )
    ]
    if pretokenize.individual_digits:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _fixed(data: Any) -> dict[str, Any]:
    """tokenizer.json's keys but what training fills in (added tokens, vocab, merges)."""
    if not isinstance(data, dict):
        return {}
    model = data.get("model")
    if isinstance(model, dict):
        model = {k: v for k, v in model.items() if k not in ("vocab", "merges")}
    return {**{k: v for k, v in data.items() if k != "added_tokens"}, "model": model}


def _ids_fit(data: dict[str, Any], vocab_size: Any) -> bool:
    """Every vocabulary and added-token id is an int below `vocab_size` (the .bin dtype's)."""
    vocab, added = data["model"].get("vocab"), data.get("added_tokens")
    if type(vocab_size) is not int or not isinstance(vocab, dict) or not isinstance(added, list):
        return False
    ids = [*vocab.values(), *(t.get("id") if isinstance(t, dict) else None for t in added)]
    return all(type(i) is int and 0 <= i < vocab_size for i in ids)


def load_checked(path: Path, lock: dict[str, Any]) -> Any:
    """The `tokenizers.Tokenizer` in `path`, refused in one line unless its pipeline is the one
    `build_tokenizer` makes for `lock`'s settings and its ids fit `lock`'s vocab_size."""
    from tokenizers import Tokenizer

    remedy = "it was edited or crafted: retrain it with `pretrain tokenizer train`"
    try:
        raw = path.read_text(encoding="utf-8")
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ArtifactError(f"{path} is not JSON ({exc}); {remedy}") from None
    config = lock.get("config")
    settings = config.get("pretokenize", {}) if isinstance(config, dict) else {}
    pretokenize = typed_or_refused(PreTokenizeConfig, settings, path.parent / "lock.json", "a lock")
    ours, theirs = _fixed(json.loads(build_tokenizer(pretokenize).to_str())), _fixed(data)
    if ours != theirs:
        differs = sorted(k for k in {*ours, *theirs} if ours.get(k) != theirs.get(k))
        raise ArtifactError(
            f"{path}: its {', '.join(differs)} is not what `pretrain tokenizer train` builds for "
            f"its lock.json (pretokenize {pretokenize.model_dump()}); {remedy}"
        )
    if not _ids_fit(data, lock.get("vocab_size")):
        raise ArtifactError(
            f"{path} holds a token id outside its lock.json's vocab_size "
            f"{lock.get('vocab_size')!r}; {remedy}"
        )
    try:
        return Tokenizer.from_str(raw)
    except Exception as exc:  # the library raises a bare Exception for any file it cannot parse
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ArtifactError(f"{path} does not load ({first}); {remedy}") from None
