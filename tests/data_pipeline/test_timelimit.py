"""The extraction limit counts CPU time of the working thread: waiting costs nothing."""

from __future__ import annotations

import threading
import time

import pytest

from data_pipeline.timelimit import TimeLimitExceeded, time_limit


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_waiting_does_not_use_the_budget() -> None:
    started = time.monotonic()
    with time_limit(0.05):
        time.sleep(0.4)  # 8x the budget in wall time, ~0 in CPU time
    assert time.monotonic() - started >= 0.4


def test_spending_the_budget_raises_on_any_thread() -> None:
    with pytest.raises(TimeLimitExceeded), time_limit(0.05):
        _spin(5.0)
    outcome: list[str] = []

    def work() -> None:
        try:
            with time_limit(0.05):
                _spin(5.0)
            outcome.append("finished")
        except TimeLimitExceeded:
            outcome.append("stopped")

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(30)
    assert outcome == ["stopped"]


def test_another_threads_cpu_does_not_count() -> None:
    """A busy neighbour thread (another document, another library) uses none of our budget: the
    block finishes after the neighbour burnt 6x the budget while it ran."""
    burnt = threading.Event()

    def burn() -> None:
        _spin(0.3)
        burnt.set()

    neighbour = threading.Thread(target=burn)
    with time_limit(0.05):
        neighbour.start()
        assert burnt.wait(60)
        _spin(0.01)
        finished = True
    neighbour.join()
    assert finished
