"""A holder record damaged or edited at the same size (a byte flipped, a field retyped by hand)
must not crash the next writer: it is refused in one line while the holder lives, and takes the
lock over once the holder is dead. Real processes and real `flock`, as test_locking."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from pretrain.locking import OutputLocked, lock_path, output_lock, read_holder
from tests.pretrain.test_locking import _hold

pytestmark = pytest.mark.timeout(120)


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
    with output_lock(out, command=["pretrain", "second"]):
        assert read_holder(out)["command"] == ["pretrain", "second"]
    assert "taking over the lock" in capsys.readouterr().err
    assert json.loads(lock_path(out).read_text() or "{}") == {}
