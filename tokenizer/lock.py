"""A tokenizer is known by the content hash of its files as its manifest lists them
(`pretrain.artifacts.tokenizer.identity_of`). Every artifact made with one records `{"name",
"sha256", "id"}`; consumers compare it with the tokenizer they are given (`check_match`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pretrain.artifacts import tokenizer as tokenizer_artifact
from pretrain.artifacts.tokenizer import TOKENIZER_FILE, tokenizer_id
from pretrain.errors import LockMismatch
from tokenizer.pipeline import load_checked


@dataclass(frozen=True)
class LockedTokenizer:
    """A tokenizer whose files matched its lock. `.tokenizer` is the HF `tokenizers` object."""

    tokenizer: Any
    sha256: str
    name: str
    eod_id: int
    pad_id: int
    vocab_size: int
    directory: Path
    lock: dict[str, Any]

    @property
    def id(self) -> str:
        return tokenizer_id(self.name, self.sha256)

    @property
    def info(self) -> dict[str, Any]:
        """What other artifacts record about the tokenizer (their manifest's `tokenizer`)."""
        return {
            "name": self.name,
            "sha256": self.sha256,
            "id": self.id,
            "vocab_size": self.vocab_size,
        }

    @property
    def token_dtype(self) -> str:
        """The .bin token dtype: uint16 when every id fits, else int32."""
        return "uint16" if self.vocab_size < 65536 else "int32"


def _as_sha(value: Any) -> tuple[str, str]:
    """(sha256, display) from a sha string, a `tokenizer` info dict or a LockedTokenizer."""
    if isinstance(value, LockedTokenizer):
        return value.sha256, value.id
    if isinstance(value, dict):
        sha = str(value.get("sha256", ""))
        return sha, str(value.get("id") or sha[:12])
    sha = str(value or "")
    return sha, sha[:12] + ("..." if len(sha) > 12 else "")


def check_match(recorded: Any, given: Any, what: str) -> None:
    """Refuse when the tokenizer recorded in `what` differs from the one given (each a sha256,
    a `{"name", "sha256", "id"}` dict or a LockedTokenizer)."""
    recorded_sha, recorded_show = _as_sha(recorded)
    given_sha, given_show = _as_sha(given)
    if not recorded_sha:
        raise LockMismatch(
            f"{what} records no tokenizer hash; re-encode it with `pretrain "
            "tokenizer encode` so it names the tokenizer it was built with"
        )
    if recorded_sha != given_sha:
        raise LockMismatch(
            f"tokenizer mismatch: {what} was built with tokenizer {recorded_show} "
            f"(sha256 {recorded_sha[:12]}...), the given tokenizer is {given_show} (sha256 "
            f"{given_sha[:12]}...); re-encode with `pretrain tokenizer encode` or pin the "
            "tokenizer the data was built with"
        )


def load_locked(directory: str | Path) -> LockedTokenizer:
    """A verified tokenizer artifact. The HF tokenizer has `encode_special_tokens = True`: a
    literal "<|endoftext|>" in a document is text, as `encode` wrote the data."""
    root = Path(directory)
    art = tokenizer_artifact.open(root)  # refuses a missing directory in one line too
    lock, sha = art.lock, art.sha256
    hf = load_checked(root / TOKENIZER_FILE, lock)  # a crafted pipeline is refused before use
    hf.encode_special_tokens = True
    return LockedTokenizer(
        tokenizer=hf,
        sha256=sha,
        name=lock["name"],
        eod_id=lock["eod_id"],
        pad_id=lock["pad_id"],
        vocab_size=lock["vocab_size"],
        directory=root,
        lock=lock,
    )
