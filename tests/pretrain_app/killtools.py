"""SIGKILL a real `pretrain` command in a subprocess (clean environment) once a condition on its
output holds, and compare outputs byte for byte."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from pretrain.manifest import MANIFEST, load_manifest
from pretrain.progress import LOGS_DIR
from tests.data_pipeline.raytools import REPO, clean_env

PRETRAIN = [sys.executable, "-m", "pretrain_app"]


def run(argv: list[str], tmp: Path, name: str) -> subprocess.CompletedProcess[str]:
    """`pretrain ARGV` to the end, in a clean environment."""
    env = clean_env(tmp / "home")
    return subprocess.run(
        [*PRETRAIN, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def kill_when(argv: list[str], tmp: Path, ready: Callable[[], bool]) -> int:
    """Start `pretrain ARGV`, SIGKILL it (it alone, as `kill -9 PID` does) as soon as `ready()`
    holds, wait until the processes it had started are gone too, and return its exit status
    (-9 when the kill came before it finished)."""
    log = (tmp / "killed.out").open("wb")
    command = subprocess.Popen(
        [*PRETRAIN, *argv], cwd=REPO, env=clean_env(tmp / "home"), stdout=log, stderr=log
    )
    deadline = time.monotonic() + 300
    while command.poll() is None and not ready() and time.monotonic() < deadline:
        time.sleep(0.002)
    try:
        children = psutil.Process(command.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    command.send_signal(signal.SIGKILL)
    command.wait(60)
    log.close()
    _, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, f"processes of the killed command still run: {alive}"
    return command.returncode


def contents(out: Path) -> dict[str, bytes]:
    """Every file under `out`, hidden ones too, but the manifest (it records when it was made)
    and the command's logs."""
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != MANIFEST and LOGS_DIR not in p.relative_to(out).parts
    }


def listing(out: Path) -> dict:
    """What the manifest says the artifact holds: kind, files (bytes, sha256), counts."""
    manifest = load_manifest(out)
    return {key: manifest[key] for key in ("kind", "files", "counts")}
