"""Watchdog for a local Ray, `python -m pretrain.rayreaper DRIVER_PID SINCE` with stdin a pipe: at EOF
(the driver shut Ray down or died) it kills the Ray processes it saw among the driver's descendants,
which otherwise outlive a SIGKILLed driver for a minute or more."""

from __future__ import annotations

import contextlib
import sys
import threading

import psutil

POLL_S = 0.5
MAX_POLL_S = 4.0
"""The poll doubles from POLL_S up to this while nothing new appears, and drops back to POLL_S
when something does. Each poll lists every process of the machine (psutil finds children by
parent pid): every 0.5 s for a whole run it took ~1 CPU-s per 100 s, as much as an idle Ray
worker, on a shared 2-core machine. Ray's servers and agents, the processes that outlive a dead
driver, appear in the first polls; a worker started later exits with its raylet."""
GRACE_S = 3.0


def _is_ray(proc: psutil.Process) -> bool:
    try:
        name = proc.name()
        if name in ("gcs_server", "raylet") or name.startswith("ray::"):
            return True
        return "/ray/" in " ".join(proc.cmdline()[:3])
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def record(driver: psutil.Process, since: float, seen: dict[int, psutil.Process]) -> None:
    try:
        children = driver.children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for proc in children:
        try:
            if proc.pid not in seen and proc.create_time() >= since and _is_ray(proc):
                seen[proc.pid] = proc
        except psutil.NoSuchProcess:
            continue


def sweep(seen: dict[int, psutil.Process]) -> None:
    alive = []
    for proc in seen.values():
        try:
            if proc.is_running():  # psutil compares create times: a reused pid is not ours
                alive += [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, remaining = psutil.wait_procs(alive, timeout=GRACE_S)
    for proc in remaining:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()


def next_wait(wait: float, grew: bool) -> float:
    """Seconds to the next poll: POLL_S after a poll that found a new process, else twice the
    last wait, at most MAX_POLL_S."""
    return POLL_S if grew else min(2 * wait, MAX_POLL_S)


def main(argv: list[str]) -> int:
    driver, since = psutil.Process(int(argv[0])), float(argv[1])
    eof = threading.Event()

    def wait_for_eof() -> None:
        while sys.stdin.buffer.read(1024):
            pass
        eof.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    seen: dict[int, psutil.Process] = {}
    wait = POLL_S
    while not eof.is_set():
        known = len(seen)
        record(driver, since, seen)
        wait = next_wait(wait, grew=len(seen) > known)
        eof.wait(wait)
    sweep(seen)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
