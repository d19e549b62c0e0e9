"""`pretrain mixture report` SIGKILLed once its plot is written (tests/pretrain_app/killpoints.py),
then run again. Before, the report was written in place (MIXTURE/report/): a first report killed
there left report.png without report.json or a manifest, which the re-run refused as someone
else's file ('the report folder ... is not empty (report.png)') and `pretrain verify MIXTURE`
refused as a file its manifest does not list. Now it is built in the mixture's unlisted
.pretrain-staging/ and swapped in (pretrain.publish): the mixture still verifies, the killed
report is refused in one line, the re-run is byte-identical to an uninterrupted report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pretrain.manifest import MANIFEST
from pretrain.publish import scratch_dir
from tests.mixtures.conftest import make_encoded, mixture_config
from tests.pretrain_app.killpoints import finished_state, run_killed
from tests.pretrain_app.killtools import contents, run

pytestmark = pytest.mark.timeout(600)


def test_a_killed_report_leaves_the_mixture_verifying_and_the_rerun_matches(
    tmp_path: Path,
) -> None:
    encoded = make_encoded(tmp_path / "enc")
    mixture = tmp_path / "mix"
    config = tmp_path / "mix.yaml"
    config.write_text(yaml.safe_dump(mixture_config(encoded, mixture)))
    assert run(["mixture", "build", str(config)], tmp_path, "build").returncode == 0
    done = run(["mixture", "report", str(mixture)], tmp_path, "report")
    assert done.returncode == 0, done.stderr[-3000:]
    expected = mixture / "report"
    shutil.move(expected, tmp_path / "expected-report")
    expected = tmp_path / "expected-report"

    report = mixture / "report"
    markers = [scratch_dir(report) / "report.png", report / "report.png"]
    killed = run_killed(["mixture", "report", str(mixture)], tmp_path, markers, 0)
    assert killed.returncode == -9, killed.stderr[-3000:]
    verified = run(["verify", str(mixture)], tmp_path, "verify")
    assert verified.returncode == 0, verified.stderr  # the finished mixture is untouched
    refused = run(["verify", str(report)], tmp_path, "verify-report")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1

    again = run(["mixture", "report", str(mixture)], tmp_path, "rerun")
    assert again.returncode == 0, again.stderr[-3000:]
    assert finished_state(report, expected, expected) == "old"  # the same bytes
    assert contents(report) == contents(expected)
    assert not scratch_dir(report).exists() and not (mixture / ".pretrain-staging").exists()
    assert run(["verify", str(mixture)], tmp_path, "verify-again").returncode == 0
    assert (report / MANIFEST).is_file()
