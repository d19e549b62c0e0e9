"""Replace a finished artifact folder with a new one so that, at every instant, the output is the
old finished artifact or the new finished one: never a part of either, never nothing.

`pretrain mixture build`, `pretrain eval build` and `pretrain mixture report` build the whole new
artifact (manifest last) in `building_dir(out)`, a folder beside `out`, then call
`replace_dir(building, out)`. Before, mixture build ran `rmtree(out)` then a rename, and eval
build deleted `out` and wrote in place: a kill in between left a part of the old artifact (its
manifest perhaps still there) or a part of the new one, which the re-run refused as someone
else's files, and the old finished output was gone with no new one.

`replace_dir` swaps the two folders in one `renameat2(RENAME_EXCHANGE)` (Linux), then deletes the
building folder, which now holds the old artifact. Where the exchange is not supported, `out`
is renamed to `retired_dir(out)` first, then the new folder into place; `recover(out)` (the next
build's first step, under the output lock) puts a retired artifact back if a kill left no `out`.
What a kill leaves beside `out` is the next build's to delete: the building folder (a part of
the new artifact, or the old one after the swap) and a retired folder beside a present `out`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import sys
from pathlib import Path

from pretrain.manifest import MANIFEST, STAGING_DIR
from pretrain.progress import LOGS_DIR

AT_FDCWD = -100
RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV}


def _real(out: Path) -> Path:
    """The folder itself (a link to it is kept, and keeps pointing at the new artifact)."""
    return Path(os.path.realpath(out))


def _beside(out: Path, suffix: str) -> Path:
    """`PARENT/.NAME.<suffix>`; inside an artifact (a mixture's report/), in the enclosing
    artifact's `.pretrain-staging/`, which its manifest never lists or reports as unlisted."""
    real = _real(out)
    if (real.parent / MANIFEST).is_file():
        return real.parent / STAGING_DIR / f"{real.name}.{suffix}"
    return real.parent / f".{real.name}.{suffix}"


def building_dir(out: Path) -> Path:
    """The folder the new artifact of `out` is built in (on the same file system as `out`)."""
    return _beside(out, "building")


def retired_dir(out: Path) -> Path:
    """Where the old artifact waits while the fallback (two renames) replaces it."""
    return _beside(out, "retired")


def recover(out: Path) -> None:
    """Undo what a killed build left beside `out`: a retired old artifact goes back into place
    when `out` is missing (the fallback was cut between its renames), or is deleted when `out`
    is there; a building folder is deleted. Call under the output lock."""
    retired, real = retired_dir(out), _real(out)
    if retired.is_dir() and not retired.is_symlink():
        if not real.exists() and (retired / MANIFEST).is_file():
            os.rename(retired, real)
        else:
            shutil.rmtree(retired)
    building = building_dir(out)
    if building.is_symlink() or building.is_file():
        building.unlink()
    elif building.exists():
        shutil.rmtree(building)
    _drop_empty_staging(building.parent)


def new_building_dir(out: Path) -> Path:
    """`recover(out)`, then an empty building folder for it."""
    recover(out)
    building = building_dir(out)
    building.mkdir(parents=True)
    return building


def replace_dir(building: Path, out: Path) -> None:
    """Put the finished artifact in `building` (manifest written) at `out`, replacing what is
    there; the old artifact's `.logs/` moves into the new one."""
    if not (building / MANIFEST).is_file():
        raise RuntimeError(f"{building} holds no {MANIFEST}: the command did not finish it")
    real = _real(out)
    if not real.exists():
        real.parent.mkdir(parents=True, exist_ok=True)
        os.rename(building, real)
        _sync(real.parent)
        _drop_empty_staging(building.parent)
        return
    logs = real / LOGS_DIR
    if logs.is_dir() and not (building / LOGS_DIR).exists():
        os.rename(logs, building / LOGS_DIR)
    if not _exchange(building, real):
        retired = retired_dir(out)
        os.rename(real, retired)
        os.rename(building, real)
        building = retired
    _sync(real.parent)
    shutil.rmtree(building)
    _drop_empty_staging(building.parent)


def _drop_empty_staging(parent: Path) -> None:
    """The enclosing artifact's `.pretrain-staging/` once it holds nothing (no trace left)."""
    if parent.name == STAGING_DIR:
        # not empty: another command's unfinished work, not ours to remove
        with contextlib.suppress(OSError):
            parent.rmdir()


def _exchange(first: Path, second: Path) -> bool:
    """Swap two folders atomically; False where the system cannot (not Linux, old kernel or C
    library, a file system without RENAME_EXCHANGE)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
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
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(descriptor)
    finally:
        os.close(descriptor)
