"""SIGKILL a real `pretrain` command at an exact step instead of a moment in time: the command
runs in a subprocess (clean environment) whose file-system calls that change a folder
(`os.unlink`, `rmdir`, `rename`, `replace`, `mkdir`, and pretrain.publish's folder swap) are counted from the first one made after a marker file exists; the
process kills itself (SIGKILL, as `kill -9` does) just before call number `after`. Sweeping
`after` = 0, 1, 2, ... until the command finishes visits every step it takes after the marker,
so a test sees each state a kill there can leave (timing-based kills find only some).
`start_paused` stops the command there instead (SIGSTOP) and lets it go on later: a rival command
run meanwhile races it at that exact step."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from pretrain.manifest import MANIFEST, verify
from pretrain.publish import retired_dir
from tests.data_pipeline.raytools import REPO, clean_env
from tests.pretrain_app.killtools import contents, listing

BOOT = r"""
import os, signal, sys
markers = os.environ["KILLPOINT_MARKER"].split(os.pathsep)
after = int(os.environ["KILLPOINT_AFTER"])
stop = signal.Signals[os.environ.get("KILLPOINT_SIGNAL", "SIGKILL")]
under = os.environ.get("KILLPOINT_UNDER")
counted, armed = [0], [False]
def inside(args):
    if not under:
        return True
    path = os.path.abspath(os.fsdecode(args[0])) if args and isinstance(args[0], (str, bytes, os.PathLike)) else ""
    return path == under or path.startswith(under + os.sep)
def counting(original):
    def call(*args, **kwargs):
        armed[0] = armed[0] or any(os.path.exists(marker) for marker in markers)
        if armed[0] and inside(args):
            if counted[0] == after:
                os.kill(os.getpid(), stop)  # SIGSTOP: goes on from here once continued
            counted[0] += 1
        return original(*args, **kwargs)
    return call
for name in ("unlink", "remove", "rmdir", "rename", "replace", "mkdir"):
    setattr(os, name, counting(getattr(os, name)))
import pretrain.publish
if os.environ.get("KILLPOINT_NO_EXCHANGE"):
    pretrain.publish._exchange = lambda first, second: False
else:  # the swap is one step too
    pretrain.publish._exchange = counting(pretrain.publish._exchange)
from pretrain_app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_killed(
    argv: list[str],
    tmp: Path,
    marker: Path | list[Path],
    after: int,
    *,
    no_exchange: bool = False,
    under: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`pretrain ARGV`, killed before its `after`-th folder change once `marker` (or one of a
    list) exists (rc -9), or run to its end (the command took fewer steps). `no_exchange`: the
    two-rename fallback of pretrain.publish, as on a system without RENAME_EXCHANGE. `under`:
    count only the changes of paths in that folder (not a cache in HOME, which a warm cache
    skips)."""
    extra = {"KILLPOINT_NO_EXCHANGE": "1"} if no_exchange else {}
    if under is not None:
        extra["KILLPOINT_UNDER"] = os.path.abspath(under)
    return _run(argv, tmp, marker, after, **extra)


def _run(
    argv: list[str], tmp: Path, marker: Path | list[Path], after: int, **extra: str
) -> subprocess.CompletedProcess[str]:
    markers = os.pathsep.join(str(m) for m in (marker if isinstance(marker, list) else [marker]))
    env = clean_env(tmp / "home", KILLPOINT_MARKER=markers, KILLPOINT_AFTER=str(after), **extra)
    return subprocess.run(
        [sys.executable, "-c", BOOT, *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def start_paused(
    argv: list[str], tmp: Path, marker: Path | list[Path], after: int
) -> subprocess.Popen[str]:
    """`pretrain ARGV`, stopped (SIGSTOP) just before its `after`-th folder change once `marker`
    exists, as `run_killed` would kill it; returns once it is stopped (it fails if the command
    ended first). Send SIGCONT to let it go on, then `communicate()`."""
    markers = os.pathsep.join(str(m) for m in (marker if isinstance(marker, list) else [marker]))
    env = clean_env(
        tmp / "home",
        KILLPOINT_MARKER=markers,
        KILLPOINT_AFTER=str(after),
        KILLPOINT_SIGNAL="SIGSTOP",
    )
    command = subprocess.Popen(
        [sys.executable, "-c", BOOT, *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    process, deadline = psutil.Process(command.pid), time.monotonic() + 300
    while process.status() != psutil.STATUS_STOPPED:
        assert command.poll() is None, f"it ended before the step: {command.communicate()}"
        assert time.monotonic() < deadline, "it never reached the step"
        time.sleep(0.01)
    return command


def finished_state(out: Path, old: Path, new: Path) -> str:
    """Which finished artifact `out` is: "old" or "new" (it verifies, its bytes are theirs);
    "retired" when `out` is missing and the old one waits beside it (pretrain.publish's
    fallback, between its two renames: the next build puts it back); anything else fails."""
    if not out.exists() and retired_dir(out).is_dir():
        assert finished_state(retired_dir(out), old, new) == "old"
        return "retired"
    assert (out / MANIFEST).is_file(), f"a kill left {out} without a manifest"
    verify(out, full=True)
    found = contents(out)
    if found == contents(old) and same_listing(out, old):
        return "old"
    assert found == contents(new) and same_listing(out, new), "neither artifact"
    return "new"


def same_listing(first: Path, second: Path) -> bool:
    """The manifests list the same files with the same bytes, kind and counts; a nested
    artifact's own manifest (the eval set's decontamination index) is left out: it records
    when it was made."""
    found = [listing(first), listing(second)]
    for entry in found:
        entry["files"] = {k: v for k, v in entry["files"].items() if Path(k).name != MANIFEST}
    return found[0] == found[1]
