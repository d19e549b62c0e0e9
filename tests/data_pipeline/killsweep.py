"""A harness for kill-and-resume tests of `pretrain data run`: start the driver in a subprocess
with a clean environment and its own embedded Ray, SIGKILL it once it enters a phase (the
driver's marker `.parts/progress/phase.json`) and a condition on the output holds, wait until
every Ray process it started is gone (so no late write of theirs can move what a test compares),
then run it again."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from data_pipeline.parts import GLOBAL, PARTS, ROWS, phase_path
from tests.data_pipeline.raytools import REPO, clean_env, data_run, ray_processes, wait_gone

Ready = Callable[[Path], bool]


def start(config: dict, tmp: Path, name: str) -> subprocess.Popen[bytes]:
    """`pretrain data run` on `config`, its output in `tmp/<name>.out` (a file: a pipe nobody
    reads while the test waits would block the driver)."""
    return subprocess.Popen(
        data_run(config, tmp / f"{name}.yaml"),
        cwd=REPO,
        env=clean_env(tmp / "home", PRETRAIN_PROGRESS_S="0.5"),
        stdout=(tmp / f"{name}.out").open("wb"),
        stderr=subprocess.STDOUT,
    )


def finish(config: dict, tmp: Path, name: str) -> str:
    """Run to the end; returns what it printed."""
    run = start(config, tmp, name)
    said = _wait(run, tmp / f"{name}.out")
    assert run.returncode == 0, said[-3000:]
    return said


def _wait(run: subprocess.Popen[bytes], log: Path) -> str:
    run.wait(600)
    return log.read_text(errors="replace")


def phase(out: Path, since: float) -> str:
    """The phase a run started at `since` (Unix seconds) is in; "" before it writes one (the
    marker an earlier, killed run left names that run's last phase)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        marker = json.loads(phase_path(out).read_text())
        if marker["started"] >= since:
            return marker["phase"]
    return ""


def kill_in(
    config: dict, tmp: Path, name: str, target: str, ready: Ready | None = None, *, worker=None
) -> str:
    """Start a driver and SIGKILL it once it is in phase `target` and `ready(out)` holds; wait
    until its Ray processes are gone. Returns what it printed. Fails, naming the phases seen,
    when the job ended first. `worker(out, procs)`, when given, is called with the driver's Ray
    processes until it returns True (it kills one of them) before the driver may be killed."""
    out = Path(config["output"])
    since = time.time()
    run = start(config, tmp, name)
    driver = psutil.Process(run.pid)
    procs: dict[int, psutil.Process] = {}
    seen: list[str] = []
    while run.poll() is None:
        procs.update({p.pid: p for p in ray_processes(driver)})
        now = phase(out, since)
        if now and (not seen or seen[-1] != now):
            seen.append(now)
        if worker is not None and worker(out, list(procs.values())):
            worker = None
        if worker is None and now == target and (ready is None or ready(out)):
            break
        time.sleep(0.01)
    assert worker is None, f"no worker was killed (phases seen: {seen})"
    assert run.poll() is None, f"the job ended before phase {target} (phases seen: {seen})"
    procs.update({p.pid: p for p in ray_processes(driver)})
    run.send_signal(signal.SIGKILL)
    run.wait(30)
    # The driver's watchdog (pretrain.rayreaper) ends what it recorded within its 3-s grace; a
    # worker Ray started after its last look (a restarted actor's, still importing) is not among
    # those and lived on for a minute, retrying its dead raylet: it is killed here after 5 s
    # (it was after 30, every run with a worker killed). Nothing writes after this.
    wait_gone(list(procs.values()), 5.0)
    assert not (out / "manifest.json").exists()
    return (tmp / f"{name}.out").read_text(errors="replace")


def outputs(out: Path) -> dict[str, bytes]:
    """What a user keeps: shards, rejects, ledger, byte for byte."""
    files = sorted([*out.glob("data/*.parquet"), *out.glob("_rejects/*.pq")])
    found = {p.relative_to(out).as_posix(): p.read_bytes() for p in files}
    found["ledger.json"] = (out / "ledger.json").read_bytes()
    assert any(name.startswith("data/") for name in found)
    return found


def records(out: Path, stage: str) -> dict[str, tuple[int, int, int]]:
    """The parts whose map output of `stage` is persisted (a record `<part>.json` beside its
    tables): part -> (inode, mtime_ns, rows) of the record, to tell a reused one from a
    rewritten one."""
    folder = out / PARTS / GLOBAL / stage
    found = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        stat = path.stat()
        rows = json.loads(path.read_text())["files"]["rows"]["rows"]
        found[path.stem] = (stat.st_ino, stat.st_mtime_ns, rows)
    return found


def busy_stage_actor(out: Path, procs: list[psutil.Process]) -> bool:
    """Kill a stage actor while it tags rows (its process title names the call) once a piece
    has been written: a worker dying mid-write. True once one was killed."""
    pieces = out / PARTS / ROWS
    try:  # the merge clears the pieces: the folder can go between a look and a walk
        if not any(pieces.rglob("*.parquet")):
            return False
    except FileNotFoundError:
        return False
    for proc in procs:
        with contextlib.suppress(psutil.Error, IndexError):
            if "MapStagesWorker))." in proc.cmdline()[0]:
                proc.send_signal(signal.SIGKILL)
                return True
    return False


def reused(said: str, stage: str) -> tuple[int, int]:
    """(reused, parts) of the summary's `<stage> map output reused for N of M parts`."""
    found = re.search(rf"{stage} map output reused for (\d+) of (\d+) parts", said)
    assert found, said[-2000:]
    return int(found[1]), int(found[2])


def tagged(said: str) -> int:
    """Documents the stream tagged in this run: the last `[data run: tag] done/total` line
    (0 when the run read nothing)."""
    found = re.findall(r"^\[data run: tag\] (\d+)/(\d+) docs", said, re.MULTILINE)
    return int(found[-1][0]) if found else 0
