"""What a command shows on the terminal (a step line, one progress display, the summary), and the
log file where everything else goes: `session()` points fd 2 at it (Ray's C++ output included) and
moves it into `<artifact>/.logs/` (`attach`); `-v` keeps stderr, `-q` shows only the summary."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from pretrain.rayinit import environ

QUIET, NORMAL, VERBOSE = 0, 1, 2
VERBOSITY_ENV = "PRETRAIN_VERBOSITY"
CAPTURED_ENV = "PRETRAIN_STDERR_CAPTURED"
"""Set for child processes of a session: their stderr is the log, so progress goes to stdout."""
INTERVAL_ENV = "PRETRAIN_PROGRESS_S"
LOGS_DIR = ".logs"
"""Where a command's log goes inside its artifact; never listed in a manifest."""


@dataclass
class _Session:
    terminal: TextIO | None = None
    log_path: Path | None = None
    artifact: Path | None = None


_SESSION = _Session()


def verbosity() -> int:
    try:
        return int(os.environ.get(VERBOSITY_ENV, NORMAL))
    except ValueError:
        return NORMAL


def terminal() -> TextIO:
    """Where progress, step lines and the user's messages go."""
    if _SESSION.terminal is not None:
        return _SESSION.terminal
    if os.environ.get(CAPTURED_ENV):
        return sys.stdout
    return sys.stderr


def step(message: str) -> None:
    """One line saying what the command does next (hidden by -q)."""
    if verbosity() >= NORMAL:
        print(message, file=terminal(), flush=True)


def warn(message: str) -> None:
    """A warning the user must see (shown even with -q; library warnings go to the log)."""
    print(message, file=terminal(), flush=True)


def attach(directory: str | os.PathLike | None) -> None:
    """Name the artifact this command writes: its log ends up in `<directory>/.logs/`."""
    if directory is not None:
        _SESSION.artifact = Path(directory)


def detach() -> None:
    """Forget the artifact `attach` named: a command that refused its output (not ours to
    write in) leaves its log in the temp directory, not a `.logs/` folder there."""
    _SESSION.artifact = None


def log_path() -> Path | None:
    """The current (or, after the session, final) log file of this command."""
    return _SESSION.log_path


def _fd2_stream(stream: TextIO) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


@contextmanager
def session(level: int, name: str) -> Iterator[None]:
    """Run a command with stderr (fd 2, inherited by child processes) in a log file, unless
    `level` is VERBOSE; the terminal keeps progress, step lines and what the command prints."""
    with environ(**{VERBOSITY_ENV: str(level)}):
        if level >= VERBOSE or _SESSION.terminal is not None:  # -v, or nested in a session
            outer = _SESSION.artifact
            yield
            _SESSION.artifact = outer
        else:
            with _captured(name):
                yield


@contextmanager
def _captured(name: str) -> Iterator[None]:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    path, log_fd = _new_log(f"{name.replace(' ', '-')}-{stamp}-{os.getpid()}")
    original = sys.stderr
    on_fd2 = _fd2_stream(original)
    original.flush()
    saved = os.dup(2)
    term = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
    os.dup2(log_fd, 2)
    os.close(log_fd)
    _SESSION.terminal = term if on_fd2 else original
    _SESSION.log_path, _SESSION.artifact = path, None
    if not on_fd2:  # stderr was replaced (e.g. by a test's capture): Python output to the log too
        sys.stderr = open(2, "w", buffering=1, closefd=False, encoding="utf-8", errors="replace")  # noqa: SIM115
    os.environ[CAPTURED_ENV] = "1"
    try:
        yield
    finally:
        try:
            sys.stderr.flush()
        except OSError:  # a full disk (or a file-size limit) under the log refused it: what the
            _drop_pending()  # log could not take is dropped, not sent to the terminal after it
        if not on_fd2:
            with contextlib.suppress(OSError):
                sys.stderr.close()
            sys.stderr = original
        os.dup2(saved, 2)
        os.close(saved)
        term.close()
        os.environ.pop(CAPTURED_ENV, None)
        _SESSION.terminal = None
        _SESSION.log_path = _keep_log(path, _SESSION.artifact)


def _private_dir() -> Path:
    """`$TMPDIR/pretrain-logs-<uid>`: made 0700 by this user; a path another user made (or a
    symlink, or a folder others can write) is never used: a fresh private folder is made instead."""
    logs = Path(tempfile.gettempdir()) / f"pretrain-logs-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        logs.mkdir(mode=0o700)
    info = os.lstat(logs)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
        return logs
    return Path(tempfile.mkdtemp(prefix="pretrain-logs-"))


def _new_log(stem: str) -> tuple[Path, int]:
    """A new log file, opened for writing: never through a symlink, never an existing file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND
    logs = _private_dir()
    try:
        path = logs / f"{stem}.log"
        return path, os.open(path, flags, 0o600)
    except FileExistsError:  # a name taken before us (a planted file or link): a random one
        fd, name = tempfile.mkstemp(prefix=f"{stem}-", suffix=".log", dir=logs)
        return Path(name), fd


def _drop_pending() -> None:
    """Flush stderr's buffer into /dev/null (fd 2 is the log, which refuses it; the terminal
    comes back next), so the one-line error that follows is the last thing the terminal shows."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()


def _keep_log(path: Path, artifact: Path | None) -> Path:
    """Move the log into the artifact it belongs to (when that exists); drop an empty one."""
    if path.stat().st_size == 0:
        path.unlink()
        return path
    if artifact is None or not artifact.is_dir():
        return path
    target = artifact / LOGS_DIR / path.name
    target.parent.mkdir(exist_ok=True)
    shutil.move(str(path), target)
    return target


def _interval() -> float:
    try:
        return float(os.environ.get(INTERVAL_ENV, 10.0))
    except ValueError:
        return 10.0


class Progress(tqdm):
    """tqdm on a terminal; elsewhere a plain `line()` at most every `PRETRAIN_PROGRESS_S` while
    work moves, never `\\r` frames; nothing with -q or `disable`."""

    monitor_interval = 0  # no tqdm monitor thread

    def __init__(self, iterable: Iterable[Any] | None = None, **kwargs: Any) -> None:
        stream = terminal()
        self.plain = not stream.isatty()
        if self.plain:
            kwargs.update(mininterval=_interval(), delay=_interval() or 1e-9)  # no 0 line
        kwargs["disable"] = kwargs.get("disable", False) or verbosity() <= QUIET
        self._printed = False
        super().__init__(iterable, file=stream, **kwargs)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if not self.plain:
            return bool(super().display(msg, pos))
        if msg != "":  # tqdm clears a bar with msg=""; a plain line stays
            print(self.line(), file=self.fp, flush=True)
            self._printed = True
        return False

    def close(self) -> None:
        if self.plain and not self.disable:
            if self._printed and self.n != self.last_print_n:
                self.display()  # close off a step that reported progress
            self.leave = False
        super().close()

    def line(self) -> str:
        """The plain-text form: `[desc] done/total unit, rate unit/s, ETA m:ss, k=v`."""
        elapsed = max(self._time() - self.start_t, 1e-9)
        rate = (self.n - self.initial) / elapsed
        done = f"{self.n:g}/{self.total:g}" if self.total else f"{self.n:g}"
        parts = [f"[{self.desc}] {done} {self.unit}", f"{rate:.3g} {self.unit}/s"]
        if self.total and rate > 0 and self.n < self.total:
            parts.append(f"ETA {self.format_interval((self.total - self.n) / rate)}")
        elif self.total and self.n >= self.total:
            parts.append(f"done in {self.format_interval(elapsed)}")
        return ", ".join(parts + ([self.postfix] if self.postfix else []))


@contextmanager
def watch(
    bar: Progress, poll: Callable[[], tuple[float, float | None]], every: float = 1.0
) -> Iterator[Progress]:
    """Drive `bar` from `poll() -> (done, total or None)` in a background thread until the block
    ends or done reaches total (work measured elsewhere, e.g. by Ray workers' counters)."""
    stop = threading.Event()

    def look() -> bool:
        done, total = poll()
        bar.total = total
        bar.update(done - bar.n)
        return total is not None and done >= total

    def run() -> None:
        while not stop.wait(every):
            if look():
                break
        else:
            look()  # the block ended: its last count, not the one a second before
        bar.close()

    thread = threading.Thread(target=run, name="progress-watch", daemon=True)
    thread.start()
    try:
        yield bar
    finally:
        stop.set()
        thread.join()
