"""Shared trainer fixtures: one uninterrupted reference run reused by several tests, and a copy
of it a test may damage or resume."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import built_once
from tests.trainer.trainer_testlib import losses, run_ranks, tiny_config


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, float]]:
    """The tiny config trained 6 steps on one rank (a world of one, as `--in-process` runs it,
    in a process of its own): (run dir, loss per step)."""

    def build(base: Path) -> None:
        run_ranks(tiny_config(base / "run"), 1)

    run_dir = built_once(tmp_path_factory, "reference-run", build) / "run"
    return run_dir, losses(run_dir)


@pytest.fixture
def reference_copy(tmp_path: Path, reference_run: tuple[Path, dict[int, float]]) -> Path:
    """A copy of the reference run (checkpoints at steps 2, 4, 6) in TMP/run."""
    from trainer.checkpoint import list_checkpoints

    run_dir = tmp_path / "run"
    shutil.copytree(reference_run[0], run_dir)
    assert [step for step, _ in list_checkpoints(run_dir)] == [2, 4, 6]
    return run_dir
