"""A cache of file sha256s keyed by (path, size, mtime_ns, ctime_ns, inode, device): any write changes
the ctime, which no user can set back. `full` (PRETRAIN_VERIFY=full) ignores it; it is trusted like
$PRETRAIN_CACHE (default ~/.cache/pretrain) itself: who can write there can fake a verified file."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from pretrain.errors import ConfigError

MODES = ("cached", "full")


def cache_root() -> Path:
    """The project cache: `$PRETRAIN_CACHE`, else `$XDG_CACHE_HOME/pretrain` or ~/.cache/pretrain."""
    explicit = os.environ.get("PRETRAIN_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "pretrain"


def cache_dir() -> Path:
    return cache_root() / "hashes"


def verify_mode() -> str:
    """`cached` (default) or `full` (PRETRAIN_VERIFY=full: every file re-hashed)."""
    mode = os.environ.get("PRETRAIN_VERIFY", "cached") or "cached"
    if mode not in MODES:
        raise ConfigError(
            f"PRETRAIN_VERIFY={mode!r} is not one of {', '.join(MODES)}; fix or unset it"
        )
    return mode


def _identity(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _entry_path(path: Path) -> Path:
    key = hashlib.sha256(str(path).encode()).hexdigest()
    return cache_dir() / key[:2] / f"{key}.json"


def sha256_file(path: str | os.PathLike) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _lookup(entry: Path, path: Path, identity: list[int]) -> str | None:
    try:
        data = json.loads(entry.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("path") != str(path):
        return None
    if data.get("identity") != identity or not isinstance(data.get("sha256"), str):
        return None
    return data["sha256"]


def _store(entry: Path, path: Path, identity: list[int], sha256: str) -> None:
    """One JSON file per path, written atomically: concurrent writers never tear an entry, the
    last wins, and an entry names the identity it is valid for."""
    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            json.dump({"path": str(path), "identity": identity, "sha256": sha256}, handle)
        os.replace(tmp, entry)
    except OSError:  # a read-only or full cache only costs speed, never correctness
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def remember(path: str | os.PathLike, sha256: str) -> None:
    """Record the sha256 of a file its writer has just written from bytes it hashed itself, so
    the next check of the file (a manifest, a resume, a consumer) reads none of it again. The
    entry holds the file's identity now: any later write to the file changes its ctime."""
    path = Path(os.path.abspath(path))
    try:
        identity = _identity(path)
    except OSError:
        return
    _store(_entry_path(path), path, identity, sha256)


def file_sha256(path: str | os.PathLike, *, full: bool | None = None) -> str:
    """sha256 of the file's bytes, from the cache when its identity is unchanged.

    `full=True` (or PRETRAIN_VERIFY=full when `full` is None) re-hashes regardless. An entry is
    stored only when the file's identity was the same before and after hashing it.
    """
    path = Path(os.path.abspath(path))
    if full is None:
        full = verify_mode() == "full"
    entry = _entry_path(path)
    before = _identity(path)
    if not full and (cached := _lookup(entry, path, before)) is not None:
        return cached
    sha256 = sha256_file(path)
    if _identity(path) == before:
        _store(entry, path, before, sha256)
    return sha256
