"""Work for tests/data_pipeline/test_timelimit.py's document workers (importable by the child)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable


def spin(seconds: float) -> float:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return seconds


def work(kind: str) -> Callable[..., object]:
    """`kind` names what each document does with its argument."""
    if kind == "sleep":
        return lambda s: time.sleep(s) or s
    if kind == "spin":
        return spin
    if kind == "regex":  # one C call that never returns to Python: catastrophic backtracking
        return lambda n: re.match(r"(a+)+$", "a" * n + "b") is not None
    if kind == "crash":
        return lambda n: os.abort() if n < 0 else n
    if kind == "raise":
        return lambda n: 1 // n
    raise ValueError(kind)
