"""Writers started together on one output: each process imports everything, says `ready`, spins
until the barrier file appears, then takes the writer lock. The winner prints `acquired` and
holds the lock until the release file appears (or until it is killed); every other one prints
`refused MESSAGE` and exits 3. Shared by the local (flock) and s3 (lock object) race tests."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.data_pipeline.raytools import REPO

CONTENDER = """
import os, sys, time
from pretrain.errors import OutputLocked
from pretrain.provenance import recorded
from pretrain.locking import output_lock
out, barrier, release = sys.argv[1:4]
print("ready", flush=True)
while not os.path.exists(barrier):
    time.sleep(0.0002)
try:
    with recorded(["pretrain", "race", str(os.getpid())]), output_lock(out):
        print("acquired", flush=True)
        while not os.path.exists(release):
            time.sleep(0.01)
except OutputLocked as exc:
    print("refused", exc, flush=True)
    sys.exit(3)
"""


@dataclass
class Round:
    """One round: the winner (still holding the lock) and the refused writers' outcomes."""

    winner: subprocess.Popen
    refusals: dict[int, str]  # pid -> its stdout after `ready`
    stderr: dict[int, str]


def start(out: str, folder: Path, count: int, envs: list[dict[str, str]]) -> Round:
    """`count` contenders on `out`, released at once by a barrier file in `folder`."""
    barrier, release = folder / "go", folder / "release"
    barrier.unlink(missing_ok=True)
    release.unlink(missing_ok=True)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CONTENDER, out, str(barrier), str(release)],
            cwd=REPO,
            env=envs[i % len(envs)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        barrier.touch()
        winners, refusals, stderr = [], {}, {}
        for proc in procs:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            if first == "acquired\n":
                winners.append(proc)
                continue
            rest, err = proc.communicate(timeout=120)
            refusals[proc.pid], stderr[proc.pid] = first + rest, err
            assert proc.returncode == 3, (proc.returncode, first + rest, err[-2000:])
        assert len(winners) == 1, f"{len(winners)} writers hold the lock at once"
        return Round(winners[0], refusals, stderr)
    except BaseException:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        raise


def release(folder: Path, winner: subprocess.Popen) -> str:
    """Let the winner release the lock and exit: its stderr."""
    (folder / "release").touch()
    _, err = winner.communicate(timeout=120)
    assert winner.returncode == 0, err[-2000:]
    return err


def kill(winner: subprocess.Popen) -> None:
    """SIGKILL the winner: it leaves its holder record behind."""
    winner.kill()
    winner.communicate(timeout=60)
