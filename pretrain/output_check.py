"""Refuse, in one line before the first write, an output folder holding someone else's files: a
misspelt `--out` naming a Megatron data folder lost its `.bin`/`.idx` (docs/artifacts.md#where-outputs-may-go)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from pretrain.errors import ArtifactError, ConfigError
from pretrain.manifest import MANIFEST
from pretrain.progress import LOGS_DIR, detach
from pretrain.storage import ObjectPath, OutPath


def refuse(message: str, error: type[ConfigError | ArtifactError] = ConfigError) -> NoReturn:
    """Raise the one-line refusal of an output, its log kept out of that output (`detach`)."""
    detach()
    raise error(message)


def refuse_not_a_directory(out: OutPath, flag: str) -> None:
    """Refuse an output that is a file or lies below one (a traceback from mkdir otherwise); in
    an object store, an output that is an object rather than a prefix."""
    if isinstance(out, ObjectPath):
        if out.is_file():
            refuse(f"{flag} {str(out)!r} is an object, not a prefix; choose a prefix")
        return
    for path in (out, *out.parents):
        if path.exists() and not path.is_dir():
            what = "is a file" if path == out else f"is below the file {str(path)!r}"
            refuse(f"{flag} {str(out)!r} {what}; choose a directory")


def refuse_foreign(
    out: OutPath, flag: str, holds: str, scratch: Callable[[str], bool] = lambda name: False
) -> None:
    """Refuse a non-empty `out` that the caller found not to be its own output: every entry
    but the command's logs and what `scratch(name)` accepts (its own temporary files) counts.
    `holds` names what an own output would be ("a tokenizer artifact (no manifest.json)")."""
    refuse_not_a_directory(out, flag)
    if not out.is_dir():
        return
    strangers = sorted(p.name for p in out.iterdir() if p.name != LOGS_DIR and not scratch(p.name))
    if strangers:
        shown = ", ".join(strangers[:3]) + (", ..." if len(strangers) > 3 else "")
        refuse(
            f"{flag} {str(out)!r} is not empty ({shown}) and holds no {holds}: the command "
            "would replace or delete files there; choose a new or empty directory"
        )


def manifest_kind(out: Path) -> str | None:
    """The kind of artifact `out` claims to hold, or None: no manifest.json, or one that is not
    ours (not JSON, no kind: another tool's file of that name, which the refusal then names)."""
    if not (out / MANIFEST).is_file():
        return None
    try:  # what the folder claims to be: its bytes are verified by whoever then reads it
        claimed = json.loads((out / MANIFEST).read_bytes())
    except (OSError, ValueError):
        return None
    kind = claimed.get("kind") if isinstance(claimed, dict) else None
    return kind if isinstance(kind, str) else None


def temporary_file(name: str) -> bool:
    """`write_atomic`' temporary files (`.NAME.XXXX.tmp`), which a killed command leaves."""
    return name.startswith(".") and name.endswith(".tmp")


def require_own_output(
    out: Path,
    flag: str,
    kind: str,
    scratch: Callable[[str], bool] = temporary_file,
    resumable: Callable[[Path], bool] | None = None,
) -> None:
    """`out` may be new, empty (but for logs and `scratch` files), or a `kind` artifact, which
    the command replaces; for a command that resumes, also a folder `resumable` accepts (its run
    killed before the manifest). Anything else is refused in one line before the first write."""
    found = manifest_kind(out)  # None for a file or a path below one: refuse_foreign refuses it
    if found is not None:
        if found != kind:
            refuse(
                f"{flag} {str(out)!r} holds a {found!r} artifact, not {kind!r}; choose another "
                "directory",
                ArtifactError,
            )
        return
    if resumable is not None and out.is_dir() and resumable(out):
        return
    missing = f"no {MANIFEST}" + (", no resume record" if resumable is not None else "")
    refuse_foreign(out, flag, f"{kind} artifact ({missing})", scratch)


def require_new_output(
    out: Path, flag: str, kind: str, scratch: Callable[[str], bool] = temporary_file
) -> None:
    """`out` may be new, or empty but for the command's logs and `scratch` files: what an earlier
    run of it that was refused, failed or was killed before its first output file left there.
    Anything else is refused in one line, a finished `kind` artifact too (a model is never
    replaced in place: the stages that use it pin its manifest's hash)."""
    if manifest_kind(out) == kind:  # None for a file: refuse_foreign refuses it
        refuse(
            f"{flag} {str(out)!r} is not empty: it holds a finished {kind} artifact; choose a "
            "new directory or delete it"
        )
    refuse_foreign(out, flag, f"{kind} artifact (no {MANIFEST})", scratch)
