"""The per-document limit counts CPU time of the document's work, and nothing outruns it."""

from __future__ import annotations

import threading
import time

import pytest

from data_pipeline.timelimit import DocumentFailed, DocumentWorker, TimeLimitExceeded
from tests.data_pipeline.timelimit_work import spin, work


def test_waiting_does_not_use_the_budget() -> None:
    worker = DocumentWorker(work, "sleep", seconds=0.05)
    started = time.monotonic()
    assert worker(0.4) == 0.4  # 8x the budget in wall time, ~0 in CPU time
    assert time.monotonic() - started >= 0.4
    worker.close()


def test_one_c_call_is_stopped_at_the_limit_and_the_next_document_runs() -> None:
    """A backtracking regex is one C call (minutes here; an in-process limit waits it out)."""
    worker = DocumentWorker(work, "regex", seconds=0.2)
    started = time.monotonic()
    with pytest.raises(TimeLimitExceeded):
        worker(40)
    assert time.monotonic() - started < 20
    assert worker(5) is False  # a fresh child took the killed one's place
    worker.close()


def test_spending_the_budget_raises_on_any_thread() -> None:
    worker = DocumentWorker(work, "spin", seconds=0.05)
    with pytest.raises(TimeLimitExceeded):
        worker(5.0)
    outcome: list[str] = []

    def call() -> None:
        try:
            worker(5.0)
            outcome.append("finished")
        except TimeLimitExceeded:
            outcome.append("stopped")

    thread = threading.Thread(target=call)
    thread.start()
    thread.join(30)
    assert outcome == ["stopped"]
    worker.close()


def test_the_parents_cpu_does_not_count() -> None:
    """A busy parent (other stages, other threads) uses none of the document's budget."""
    worker = DocumentWorker(work, "sleep", seconds=0.05)
    burnt = threading.Event()

    def burn() -> None:
        spin(0.3)
        burnt.set()

    threading.Thread(target=burn).start()
    assert worker(0.5) == 0.5
    assert burnt.wait(60)
    worker.close()


def test_a_crash_or_an_error_fails_that_document_only() -> None:
    worker = DocumentWorker(work, "crash", seconds=5)
    with pytest.raises(DocumentFailed, match="died"):
        worker(-1)
    assert worker(3) == 3
    raising = DocumentWorker(work, "raise", seconds=5)
    with pytest.raises(DocumentFailed, match="ZeroDivisionError"):
        raising(0)
    assert raising(1) == 1
    worker.close()
    raising.close()
