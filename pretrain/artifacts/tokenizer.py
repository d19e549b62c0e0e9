"""`tokenizer` (`pretrain tokenizer train`): `tokenizer.json` and `lock.json`.

A tokenizer is known by the sha256 of its `lock.json`, which lists the sha256 of every tokenizer
file (tokenizer.json; lock version 2 also the HF tokenizer_config.json and special_tokens_map.json).
`open(dir)` checks every file the lock lists against it, and the lock against the manifest, then
the manifest's own files. The HF `tokenizers` object is loaded by `tokenizer.lock.load_locked`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base
from pretrain.errors import ArtifactError, LockMismatch
from pretrain.manifest import check_seal, load_manifest, sha256_file
from pretrain.outstore import confined

KIND = "tokenizer"
LOCK_FILE = "lock.json"
TOKENIZER_FILE = "tokenizer.json"
_RETRAIN = "restore it or retrain with `pretrain tokenizer train`"
TokenizerRef = base.TokenizerRef
"""What other artifacts record about a tokenizer (its identity)."""


def tokenizer_id(name: str, sha256: str) -> str:
    """The display identity, e.g. `bpe-32k@1f2e9c`."""
    return f"{name}@{sha256[:6]}"


class TokenizerFields(base.Fields):
    KIND: ClassVar[str] = KIND
    tokenizer: base.TokenizerRef
    """Its identity: lock.json's sha256, name, display id, vocabulary size."""
    library: dict[str, str] = Field(default_factory=dict)
    """Versions of the libraries that trained it."""


class TokenizerManifest(TokenizerFields, base.Manifest):
    """A tokenizer artifact's manifest, as `open` reads it."""


write = base.Writer(TokenizerFields)
"""Write a tokenizer artifact's manifest once lock.json is written (`pretrain tokenizer train`)."""


class Tokenizer(base.Artifact[TokenizerManifest]):
    """A verified tokenizer artifact; `.lock` is its lock.json, `.sha256` its identity."""

    def __init__(
        self,
        directory: Path,
        manifest: TokenizerManifest,
        raw: dict[str, Any],
        lock: dict[str, Any],
        sha256: str,
    ) -> None:
        super().__init__(directory, manifest, raw)
        self.lock, self.sha256 = lock, sha256

    @property
    def info(self) -> dict[str, Any]:
        """What other artifacts record about it (manifest field `tokenizer`)."""
        return self.manifest.tokenizer.model_dump(exclude_none=True)


def verified_lock(root: Path) -> tuple[dict[str, Any], str]:
    """lock.json and its sha256, after checking every file it lists against it and it against
    the manifest (each refusal names the file, both hashes and the fix)."""
    lock_path, tok_path = root / LOCK_FILE, root / TOKENIZER_FILE
    for path in (lock_path, tok_path):
        if not path.is_file():
            raise ArtifactError(
                f"{root} has no {path.name}; it is not a tokenizer artifact: "
                "train one with `pretrain tokenizer train`"
            )
    lock = json.loads(lock_path.read_bytes())
    if TOKENIZER_FILE not in lock.get("files", {}):
        raise LockMismatch(f"{lock_path} does not lock {TOKENIZER_FILE}; retrain the tokenizer")
    for name, recorded_sha in lock["files"].items():
        confined(root, name, str(lock_path))  # a file of the tokenizer, not any path
        path = root / name
        if not path.is_file():
            raise LockMismatch(f"{path} is missing but lock.json lists it: {_RETRAIN}")
        file_sha = sha256_file(path)
        if file_sha != recorded_sha:
            raise LockMismatch(
                f"{path} has sha256 {file_sha[:12]}..., lock.json records "
                f"{recorded_sha[:12]}...: the file was edited after locking; {_RETRAIN}"
            )
    sha = sha256_file(lock_path)
    recorded = load_manifest(root).get("tokenizer", {})
    if recorded.get("sha256") != sha:
        raise LockMismatch(
            f"{lock_path} has sha256 {sha[:12]}..., the manifest records "
            f"{str(recorded.get('sha256'))[:12]}...: lock.json was edited; {_RETRAIN}"
        )
    return lock, sha


def pinned_info(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The identity a tokenizer directory's manifest records, when its lock.json still has that
    sha256 (an identity check only, for pinning: `open` verifies the tokenizer files too);
    None when lock.json is missing or differs."""
    root = Path(directory)
    manifest = load_manifest(root)
    check_seal(root, manifest)
    info = dict(manifest.get("tokenizer") or {})
    lock = root / LOCK_FILE
    if not lock.is_file() or sha256_file(lock) != info.get("sha256"):
        return None
    return info


def open(directory: str | os.PathLike, *, full: bool | None = None) -> Tokenizer:
    """Verify a tokenizer artifact: its lock, then every byte its manifest lists."""
    root = Path(directory)
    if not root.is_dir():
        raise ArtifactError(
            f"tokenizer directory {root} does not exist; train one with "
            "`pretrain tokenizer train` or fix the path"
        )
    lock, sha = verified_lock(root)  # the lock's refusals first: they name the edited file
    root, manifest, raw = base.verified(root, TokenizerManifest, full=full)
    return Tokenizer(root, manifest, raw, lock, sha)
