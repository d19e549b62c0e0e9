"""SIGKILL a real `pretrain` command at an exact step instead of a moment in time: the command
runs in a subprocess (clean environment) whose file-system calls that change a folder
(`os.unlink`, `rmdir`, `rename`, `replace`, `mkdir`, and pretrain.replace's folder swap) are counted from the first one made after a marker file exists; the
process kills itself (SIGKILL, as `kill -9` does) just before call number `after`. Sweeping
`after` = 0, 1, 2, ... until the command finishes visits every step it takes after the marker,
so a test sees each state a kill there can leave (timing-based kills find only some)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.data_pipeline.raytools import REPO, clean_env

BOOT = r"""
import os, signal, sys
marker, after = os.environ["KILLPOINT_MARKER"], int(os.environ["KILLPOINT_AFTER"])
counted, armed = [0], [False]
def counting(original):
    def call(*args, **kwargs):
        armed[0] = armed[0] or os.path.exists(marker)
        if armed[0]:
            if counted[0] >= after:
                os.kill(os.getpid(), signal.SIGKILL)
            counted[0] += 1
        return original(*args, **kwargs)
    return call
for name in ("unlink", "remove", "rmdir", "rename", "replace", "mkdir"):
    setattr(os, name, counting(getattr(os, name)))
import pretrain.replace
if os.environ.get("KILLPOINT_NO_EXCHANGE"):
    pretrain.replace._exchange = lambda first, second: False
else:  # the swap is one step too
    pretrain.replace._exchange = counting(pretrain.replace._exchange)
from pretrain_app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_killed(
    argv: list[str], tmp: Path, marker: Path, after: int, *, no_exchange: bool = False
) -> subprocess.CompletedProcess[str]:
    """`pretrain ARGV`, killed before its `after`-th folder change once `marker` exists (rc -9),
    or run to its end (the command took fewer steps). `no_exchange`: the two-rename fallback
    of pretrain.replace, as on a system without RENAME_EXCHANGE."""
    env = clean_env(tmp / "home", KILLPOINT_MARKER=str(marker), KILLPOINT_AFTER=str(after))
    if no_exchange:
        env["KILLPOINT_NO_EXCHANGE"] = "1"
    return subprocess.run(
        [sys.executable, "-c", BOOT, *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
