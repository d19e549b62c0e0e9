"""Shared trainer fixtures: one uninterrupted reference run reused by several tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.trainer_testlib import losses, tiny_config


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, float]]:
    """The tiny config trained 6 steps on one rank (its own process): (run dir, loss per step)."""
    from trainer.worker import spawn_ranks

    run_dir = tmp_path_factory.mktemp("reference") / "run"
    spawn_ranks(tiny_config(run_dir), 1)
    return run_dir, losses(run_dir)
