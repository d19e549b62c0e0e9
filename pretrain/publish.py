"""All or nothing (docs/artifacts.md#killed-writers-leave-nothing-half-written): `with publishing(out)
as scratch:` builds the artifact beside `out`, manifest last, then swaps it into place in one
`renameat2(RENAME_EXCHANGE)` (elsewhere two renames, a kill between them repaired by the next build)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from pretrain.manifest import MANIFEST, STAGING_DIR
from pretrain.progress import LOGS_DIR

AT_FDCWD = -100
RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV}


def _beside(out: Path, suffix: str) -> Path:
    real = Path(os.path.realpath(out))  # a link to the output keeps pointing at the new one
    if (real.parent / MANIFEST).is_file():
        return real.parent / STAGING_DIR / f"{real.name}.{suffix}"
    return real.parent / f".{real.name}.{suffix}"


def scratch_dir(out: Path) -> Path:
    """Where the new artifact of `out` is built (on the same file system as `out`)."""
    return _beside(out, "building")


def retired_dir(out: Path) -> Path:
    """Where the earlier artifact waits while the fallback (two renames) replaces it."""
    return _beside(out, "retired")


def clear_scratch(out: Path) -> None:
    """Remove what a killed build of `out` left: its scratch folder; a retired earlier artifact
    goes back into place when `out` is missing (the fallback was cut between its renames), else
    is deleted. Call under the output lock."""
    retired, real = retired_dir(out), Path(os.path.realpath(out))
    if retired.is_dir() and not retired.is_symlink():
        if not real.exists() and (retired / MANIFEST).is_file():
            os.rename(retired, real)
        else:
            shutil.rmtree(retired)
    scratch = scratch_dir(out)
    if scratch.is_symlink() or scratch.is_file():
        scratch.unlink()
    elif scratch.exists():
        shutil.rmtree(scratch)
    _drop_empty_staging(scratch.parent)


@contextlib.contextmanager
def publishing(out: Path) -> Iterator[Path]:
    """An empty scratch folder for the artifact of `out`; when the block ends (the manifest
    written), it replaces `out` in one rename. An error inside the block removes the scratch
    folder and leaves `out` as it was."""
    clear_scratch(out)
    scratch = scratch_dir(out)
    scratch.mkdir(parents=True)
    try:
        yield scratch
        _publish(scratch, Path(os.path.realpath(out)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        _drop_empty_staging(scratch.parent)


def _publish(scratch: Path, out: Path) -> None:
    if not (scratch / MANIFEST).is_file():
        raise RuntimeError(f"{scratch} holds no {MANIFEST}: the command did not finish it")
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        os.rename(scratch, out)
        _sync(out.parent)
        return
    logs = out / LOGS_DIR
    if logs.is_dir() and not (scratch / LOGS_DIR).exists():
        os.rename(logs, scratch / LOGS_DIR)
    if not _exchange(scratch, out):
        os.rename(out, retired_dir(out))
        os.rename(scratch, out)
        shutil.rmtree(retired_dir(out))
    _sync(out.parent)


def _drop_empty_staging(parent: Path) -> None:
    """The enclosing artifact's `.pretrain-staging/` once it holds nothing."""
    if parent.name == STAGING_DIR:
        with contextlib.suppress(OSError):  # not empty: another output's scratch
            parent.rmdir()


def _exchange(first: Path, second: Path) -> bool:
    """Swap two folders in one rename; False where the system cannot (not Linux, an old C
    library, a file system without RENAME_EXCHANGE)."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if not sys.platform.startswith("linux") or renameat2 is None:
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    renameat2.argtypes += [ctypes.c_uint]
    source, target = os.fsencode(first), os.fsencode(second)
    if renameat2(AT_FDCWD, source, AT_FDCWD, target, RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, f"cannot swap {first} and {second}: {os.strerror(code)}")


def _sync(directory: Path) -> None:
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
