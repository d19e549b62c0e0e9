"""Build an artifact out of sight, so that a killed command leaves nothing a reader takes for it.

`with staged(out, kind) as files:` is where a command writes every file of its artifact and, last,
its manifest (`files` is `OUT/.pretrain-staging/files/`); on leaving the block the files are moved
into `out` (the manifest last) and the staging folder is removed. Before, `pretrain export`,
`train-lm` and `train-classifier` wrote straight into `out`: a kill left a part of a model there
(a cut `model.safetensors`, one language's `.arpa`), which the re-run then refused as someone
else's files and the user had to delete by hand, not knowing they were partial.

What a kill can leave, and what the re-run (`unfinished_entries` accepts it in the output check,
`clear_unfinished` removes it) does:
- before the staged manifest: only the staging folder (hidden); nothing of the artifact in `out`;
- while moving: some files in `out`, no manifest there (so every reader refuses it in one line:
  `pretrain.manifest.load_manifest`), the rest and the manifest still staged; the staged
  manifest names the moved files, so they are known to be this command's own;
- after the manifest moved: a finished artifact and what is left of the staging folder, which
  readers skip (`pretrain.manifest.UNLISTED_DIRS`).
The staging folder is this command's only when it holds `owner.json` naming the kind (written
before any file) or nothing: a user's folder of that name is still a stranger, and refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from pretrain.command import current_command
from pretrain.errors import ConfigError
from pretrain.manifest import MANIFEST, STAGING_DIR, atomic_write_json

OWNER = "owner.json"
FILES = "files"


def _owner_kind(staging: Path) -> str | None:
    """The kind `owner.json` names; "" for an empty folder (killed before writing it), None when
    the folder is not one of ours (a file, or entries but no readable owner record)."""
    if not staging.is_dir() or staging.is_symlink():
        return None
    if not any(staging.iterdir()):
        return ""
    try:
        record = json.loads((staging / OWNER).read_bytes())
    except (OSError, ValueError):
        return None
    kind = record.get("kind") if isinstance(record, dict) else None
    return kind if isinstance(kind, str) else None


def _staged_listing(staging: Path) -> list[str]:
    """The files the staged manifest lists ([] before it is written, or if it is not JSON)."""
    return _listing(staging / FILES)


def _listing(directory: Path) -> list[str]:
    """The plain relative names the manifest in `directory` lists ([] without a readable one)."""
    try:
        files = json.loads((directory / MANIFEST).read_bytes())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [rel for rel in files if isinstance(rel, str) and _plain_relative(rel)]


def _plain_relative(rel: str) -> bool:
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts


def unfinished_entries(out: Path, kind: str) -> set[str]:
    """The entries of `out` that an unfinished, killed `kind` write left: the staging folder and
    the files its staged manifest lists (moved out before the kill). Empty when `out` holds no
    staging folder of `kind`."""
    staging = out / STAGING_DIR
    owner = _owner_kind(staging)
    if owner is None or owner not in ("", kind):
        return set()
    return {STAGING_DIR} | {Path(rel).parts[0] for rel in _staged_listing(staging)}


def clear_unfinished(out: Path, kind: str) -> None:
    """Remove what a killed `kind` write left in `out` (`unfinished_entries`), so the re-run
    starts from the state before it. A finished artifact there (its manifest moved) is kept: only
    the staging folder goes. Call under the output lock, after the output check."""
    staging = out / STAGING_DIR
    if not unfinished_entries(out, kind):
        return
    if not (out / MANIFEST).is_file():  # the move had begun: the moved files are ours
        for rel in _staged_listing(staging):
            _unlink_inside(out, rel)
    _remove_staging(staging)


def _unlink_inside(out: Path, rel: str) -> None:
    """Delete `out/rel` unless a link on the way leads out of `out` (a crafted manifest)."""
    path = out / rel
    if out.resolve() in path.parent.resolve().parents or path.parent.resolve() == out.resolve():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _remove_staging(staging: Path) -> None:
    """The owner record goes last: a kill midway leaves a folder still known as ours."""
    shutil.rmtree(staging / FILES, ignore_errors=True)
    for entry in staging.iterdir() if staging.is_dir() else ():
        if entry.name != OWNER:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    (staging / OWNER).unlink(missing_ok=True)
    staging.rmdir()


def _publish(out: Path, staging: Path) -> None:
    """Move the staged files into `out`, the manifest last. An earlier artifact there (one the
    command replaces) first loses the files the new one does not have, then its manifest, so
    it is never taken for the new one midway, and what is left is always the re-run's to take
    back: the earlier artifact (its manifest still there), or files the staged manifest lists."""
    files = staging / FILES
    listed = _staged_listing(staging)
    if not (files / MANIFEST).is_file():
        raise RuntimeError(f"{files} holds no {MANIFEST}: the command did not write one")
    for rel in sorted(set(_listing(out)) - set(listed)):
        _unlink_inside(out, rel)
    (out / MANIFEST).unlink(missing_ok=True)
    for rel in sorted(listed):
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        _move(files / rel, target)
    _move(files / MANIFEST, out / MANIFEST)
    _sync_directory(out)
    _remove_staging(staging)


def _move(source: Path, target: Path) -> None:
    os.replace(source, target)


def _sync_directory(path: Path) -> None:
    with contextlib.suppress(OSError):
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


@contextlib.contextmanager
def staged(out: Path, kind: str) -> Iterator[Path]:
    """The folder to write a `kind` artifact in (its manifest last), published into `out` when
    the block ends; a failure inside the block removes the staging folder (a kill leaves it for
    the re-run: `clear_unfinished`). `out` passed the command's output check."""
    clear_unfinished(out, kind)
    staging = out / STAGING_DIR
    if staging.exists() or staging.is_symlink():  # beside an earlier artifact, which passed
        raise ConfigError(
            f"{out} holds {STAGING_DIR}, which is not this command's unfinished work; move it "
            "away or choose another output"
        )
    staging.mkdir(parents=True)
    atomic_write_json(staging / OWNER, {"kind": kind, "command": current_command()})
    (staging / FILES).mkdir()
    try:
        yield staging / FILES
    except BaseException:
        _remove_staging(staging)
        raise
    _publish(out, staging)
