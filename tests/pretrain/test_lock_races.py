"""Writers racing for one output's lock, and lock records that are not what a writer wrote.

- Writers started together (a barrier file), local (`flock`) and `s3://` (a lock object on moto):
  exactly one holds the lock, every other is refused in one line naming that holder (never an
  empty, torn or earlier holder's record), round after round (locally over a killed holder's
  record too).
- A holder record damaged or edited at the same size (a byte flipped, a field retyped by hand)
  must not crash the next writer: it is refused in one line while the holder lives, and takes
  the lock over once the holder is dead. Real processes and real `flock`, as test_locking."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pretrain.locking import OutputLocked, lock_path, output_lock, read_holder
from pretrain.provenance import recorded
from tests.data_pipeline import s3tools
from tests.data_pipeline.raytools import clean_env, free_port
from tests.data_pipeline.s3tools import moto_server, s3_env, s3_filesystem
from tests.pretrain import lockrace
from tests.pretrain.test_locking import _clean_env, _hold

pytestmark = [pytest.mark.timeout(120), pytest.mark.serial]


def _same_size(text: str, old: str, new: str) -> str:
    assert len(old) == len(new) and old in text
    return text.replace(old, new, 1)


def _key(text: str) -> str:  # "pid" -> "pix": the field is gone
    return _same_size(text, '"pid"', '"pix"')


def _started_as_text(text: str) -> str:  # a number retyped as a string of its width
    value = re.search(r'"started_unix": ([0-9.]+)', text).group(1)
    return _same_size(text, value, '"' + "x" * (len(value) - 2) + '"')


def _started_infinite(text: str) -> str:  # 1e999 parses as inf: gmtime overflows
    value = re.search(r'"started_unix": ([0-9.]+)', text).group(1)
    return _same_size(text, value, "1e999".ljust(len(value)))


def _command_number(text: str) -> str:  # a command word that is not a string
    return _same_size(text, '"pretrain"', "1234567890")


def _pid_text(text: str) -> str:  # a pid that is not a number (os.kill would raise)
    value = re.search(r'"pid": ([0-9]+)', text).group(1)
    return _same_size(text, f'"pid": {value}', f'"pid": "{"9" * (len(value) - 2)}"')


DAMAGE: dict[str, Callable[[str], str]] = {
    "pid field renamed": _key,
    "start time a string": _started_as_text,
    "start time infinite": _started_infinite,
    "command word a number": _command_number,
    "pid a string": _pid_text,
}


def _damage(out: Path, how: Callable[[str], str]) -> None:
    path = lock_path(out)
    before = path.read_text()
    path.write_text(how(before))
    assert path.stat().st_size == len(before.encode())


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_holder_record_is_a_one_line_refusal_while_the_holder_lives(
    tmp_path: Path, kind: str
) -> None:
    out = tmp_path / "out"
    holder = _hold(out)
    try:
        _damage(out, DAMAGE[kind])
        with pytest.raises(OutputLocked) as refused, output_lock(out):
            pass
        message = str(refused.value)
        assert "\n" not in message and message.startswith(f"output {out} is being written by")
    finally:
        holder.communicate("")
    assert holder.returncode == 0


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_record_of_a_dead_holder_is_taken_over(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    holder = _hold(out)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    _damage(out, DAMAGE[kind])
    with recorded(["pretrain", "second"]), output_lock(out):
        assert read_holder(out)["command"] == ["pretrain", "second"]
    assert "taking over the lock" in capsys.readouterr().err
    assert json.loads(lock_path(out).read_text() or "{}") == {}


RACERS = 6


def _assert_refusals_name(round_: lockrace.Round, out: Path | str) -> None:
    """Every refused writer says, on one line, that the winner holds `out`: never an empty,
    torn or earlier holder's record."""
    pid = round_.winner.pid
    for loser, text in round_.refusals.items():
        line = text.removeprefix("refused ").rstrip("\n")
        assert "\n" not in line, text
        assert line.startswith(f"output {out} is being written by pid {pid} on "), (loser, line)
        assert f"(pretrain race {pid})" in line, line


def test_writers_started_together_one_holds_the_lock_the_rest_name_it(tmp_path: Path) -> None:
    """Rounds of RACERS processes released by one barrier file on one output: exactly one holds
    the lock, each other is refused in one line naming that holder, and the lock file holds the
    holder's whole record. Every other round the winner is SIGKILLed, so the next round races
    over a dead holder's record (the winner takes it over while the others are refused)."""
    out = tmp_path / "out"
    env = _clean_env()
    for number in range(4):
        round_ = lockrace.start(str(out), tmp_path, RACERS, [env])
        record = read_holder(out)
        assert record is not None and record["pid"] == round_.winner.pid
        assert record["command"] == ["pretrain", "race", str(round_.winner.pid)]
        _assert_refusals_name(round_, out)
        if number % 2:
            lockrace.release(tmp_path, round_.winner)
            assert lock_path(out).read_text() == ""  # a clean release leaves no record
        else:
            lockrace.kill(round_.winner)
            assert read_holder(out)["pid"] == round_.winner.pid


BUCKET = "corpus"
OUTPUT = f"s3://{BUCKET}/runs/race"
LOCK_KEY = f"{BUCKET}/runs/.race.lock"
S3_RACERS = 4  # each imports botocore: ~1 s of CPU


@pytest.fixture(scope="module")
def store() -> Iterator[str]:
    with moto_server(serial=True) as endpoint:
        s3_filesystem(endpoint).create_dir(BUCKET)
        yield endpoint


def _lock_object(endpoint: str) -> dict[str, Any] | None:
    s3 = s3_filesystem(endpoint)
    with contextlib.suppress(FileNotFoundError), s3.open_input_stream(LOCK_KEY) as handle:
        return json.loads(handle.read())
    return None


@pytest.mark.slow  # ~8 s quiet, ~20 s at load 12: 8 processes importing botocore
def test_writers_on_many_machines_started_together_one_holds_the_s3_lock(
    tmp_path: Path, store: str
) -> None:
    """The same rounds on an `s3://` output, each writer "on its own machine" (its own HOME and
    project cache): exactly one holds the lock object (one conditional write wins), each other
    is refused in one line naming it and the `pretrain unlock` id. The first winner releases
    the lock (the object is gone); the second is SIGKILLed (its lock object stays, naming it)."""
    envs = [clean_env(tmp_path / f"m{i}", **s3_env(store)) for i in range(S3_RACERS)]
    for end in ("release", "kill"):
        round_ = lockrace.start(OUTPUT, tmp_path, S3_RACERS, envs)
        record = _lock_object(store)
        assert record is not None and record["pid"] == round_.winner.pid
        assert record["command"] == ["pretrain", "race", str(round_.winner.pid)]
        _assert_refusals_name(round_, OUTPUT)
        for line in round_.refusals.values():
            assert f"--id {record['id']}`" in line
        if end == "release":
            err = lockrace.release(tmp_path, round_.winner)
            assert _lock_object(store) is None, err[-2000:]
        else:
            lockrace.kill(round_.winner)
            assert _lock_object(store) == record
    s3_filesystem(store).delete_file(LOCK_KEY)


def test_a_lock_write_whose_reply_was_lost_is_still_the_writers_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store applied the lock's conditional write but its reply was lost (a 500 after the
    write); the client's retry is refused (412) because the object already exists. The object
    holds the writer's own record: it holds the lock (before, the writer was refused naming
    itself)."""
    port, marker = free_port(), tmp_path / "injected"
    argv = ["-m", "tests.pretrain.moto_lost_reply", "127.0.0.1", str(port), str(marker)]
    with s3tools.serve(argv, port) as endpoint:
        s3_filesystem(endpoint).create_dir(BUCKET)
        for name, value in s3_env(endpoint).items():
            monkeypatch.setenv(name, value)
        with output_lock(OUTPUT):
            assert marker.exists()  # the 500 came, after the write
            assert _lock_object(endpoint)["pid"] == os.getpid()
        assert _lock_object(endpoint) is None  # released on exit
