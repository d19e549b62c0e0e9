"""`pretrain verify RUN` on a finished run: every file the run wrote is one its manifest lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from pretrain_app.cli import main


@pytest.mark.timeout(300)
def test_a_finished_run_verifies(
    reference_run: tuple[Path, dict[int, float]], capsys: pytest.CaptureFixture
) -> None:
    """summary.json was written after the run's manifest: `pretrain verify` refused every
    finished run ('holds 1 file(s) its manifest does not list (summary.json)'), the demo's too."""
    run_dir, _ = reference_run
    assert (run_dir / "summary.json").is_file()
    assert main(["verify", str(run_dir)]) == 0, capsys.readouterr().err
