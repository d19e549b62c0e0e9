"""Shared trainer fixtures: one uninterrupted reference run reused by several tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.trainer_testlib import losses, run_ranks, tiny_config


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, float]]:
    """The tiny config trained 6 steps on one rank (a world of one, as `--in-process` runs it,
    in a process of its own): (run dir, loss per step)."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    run_ranks(tiny_config(run_dir), 1)
    return run_dir, losses(run_dir)
