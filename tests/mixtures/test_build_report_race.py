"""`pretrain mixture build` and `pretrain mixture report` on one mixture at once (the real CLI,
clean environment): the one that comes second is refused in one line naming the other, and the
first finishes as if alone. The race is made exact, not timed: the first command is stopped
(SIGSTOP, tests/pretrain_app/killpoints.py) at a step while it holds its locks, the second runs
to its end, then the first goes on.

Before, a report took only the lock of its report folder and a build only the mixture's, so
neither kept the other out: a build replaced the mixture under a report that had read it (the
report then failed saying the mixture's `index/0-main.npy` "does not match its sha256 in the
manifest (modified after it was written)": it had read the old manifest and found the new
files, and the user was told a good mixture was damaged); a report ran while a build was about
to swap the mixture it read out."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml

from pretrain.locking import is_lock_file, lock_path
from pretrain.manifest import load_manifest
from pretrain.publish import scratch_dir
from tests.mixtures.conftest import make_encoded, mixture_config
from tests.pretrain_app.killpoints import start_paused
from tests.pretrain_app.killtools import contents, run

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def encoded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_encoded(tmp_path_factory.mktemp("race") / "enc")


def _build_argv(encoded: Path, mixture: Path, seed: int) -> list[str]:
    config = mixture.parent / f"build-{seed}.yaml"
    config.write_text(yaml.safe_dump(mixture_config(encoded, mixture, seed=seed)))
    return ["mixture", "build", str(config)]


def _refused_naming(result, pid: int, command: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert len(lines) == 1 and f"pid {pid} " in lines[0] and command in lines[0], lines


def _go_on(paused) -> None:
    paused.send_signal(signal.SIGCONT)
    _, err = paused.communicate(timeout=300)
    assert paused.returncode == 0, err[-3000:]


def test_a_build_while_a_report_is_being_written_is_refused(encoded: Path, tmp_path: Path) -> None:
    mixture = tmp_path / "mix"
    assert run(_build_argv(encoded, mixture, 8), tmp_path, "old").returncode == 0
    before = contents(mixture)
    report = mixture / "report"
    # stopped once it holds the report's lock and has read the mixture: at its building folder
    paused = start_paused(["mixture", "report", str(mixture)], tmp_path, lock_path(report), 0)
    rival = run(_build_argv(encoded, mixture, 7), tmp_path, "new")
    _refused_naming(rival, paused.pid, "mixture report")  # old code: rc 0, swapped under it
    _go_on(paused)
    written = json.loads((report / "report.json").read_text())
    assert written["build_sha256"] == load_manifest(mixture)["build_sha256"]
    left = {k: v for k, v in contents(mixture).items() if not k.startswith("report/")}
    assert {k: v for k, v in left.items() if not is_lock_file(Path(k))} == before  # unchanged
    assert run(["verify", str(mixture)], tmp_path, "verify").returncode == 0


def test_a_report_while_a_build_replaces_the_mixture_is_refused(
    encoded: Path, tmp_path: Path
) -> None:
    mixture = tmp_path / "mix"
    assert run(_build_argv(encoded, mixture, 8), tmp_path, "old").returncode == 0
    reference = tmp_path / "reference"
    assert run(_build_argv(encoded, reference, 7), tmp_path, "reference").returncode == 0
    # stopped once its new mixture is being built beside the old one (the lock is held)
    paused = start_paused(_build_argv(encoded, mixture, 7), tmp_path, scratch_dir(mixture), 0)
    rival = run(["mixture", "report", str(mixture)], tmp_path, "report")
    _refused_naming(rival, paused.pid, "mixture build")  # old code: rc 0
    _go_on(paused)
    assert contents(mixture) == contents(reference) and not (mixture / "report").exists()
