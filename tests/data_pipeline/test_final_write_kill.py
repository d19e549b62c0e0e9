"""`pretrain data run` SIGKILLed at every step of its final write (ledger.json, README.md,
manifest.json, in the output), then run again: at each step the output is either the finished
artifact (it verifies, its shards, rejects and ledger are the reference's bytes) or one that
every reader refuses in one line (no manifest), and the re-run ends byte-identical to an
uninterrupted run. The steps are exact (tests/pretrain_app/killpoints.py counts the folder
changes the driver makes in the output), not timed.

Two starting points: the run's work done (every part merged, as a run killed just before its
final write leaves it: the reference run with ledger.json, README.md and manifest.json taken
away) and a finished output run again (its manifest is withdrawn first). Neither needs Ray: the
finishing run reuses every part, so each step costs a few seconds."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pretrain.errors import ArtifactError
from pretrain.manifest import MANIFEST, verify
from pretrain_app.cli import main
from tests.data_pipeline.killsweep import outputs
from tests.data_pipeline.raytools import DATA, EMBEDDED_CONFIG, data_run
from tests.pretrain_app.killpoints import run_killed

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]
FINAL = ("ledger.json", "README.md", MANIFEST)


def _argv(out: Path, tmp: Path) -> list[str]:
    config = {**EMBEDDED_CONFIG, "inputs": [str(DATA)], "output": str(out)}
    return data_run(config, tmp / "run.yaml")[3:]  # after `python -m pretrain_app`


def _start(embedded_out: Path, out: Path, finished: bool) -> None:
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(embedded_out, out, symlinks=True)
    for name in () if finished else FINAL:
        (out / name).unlink()


def _refused_or_finished(out: Path, expected: dict[str, bytes]) -> str:
    if (out / MANIFEST).is_file():
        verify(out, full=True)
        assert outputs(out) == expected
        return "finished"
    with pytest.raises(ArtifactError) as refused:
        verify(out, full=True)
    assert len(str(refused.value).splitlines()) == 1
    return "refused"


@pytest.mark.parametrize("finished", [False, True], ids=["work-done", "finished-rerun"])
def test_a_kill_at_each_step_of_the_final_write_then_a_rerun_gives_the_same_bytes(
    embedded_out: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], finished: bool
) -> None:
    expected = outputs(embedded_out)
    out = tmp_path / "out"
    argv = _argv(out, tmp_path)
    seen = []
    for after in range(40):
        _start(embedded_out, out, finished)
        killed = run_killed(argv, tmp_path, tmp_path / "run.yaml", after, under=out)
        if killed.returncode == 0:
            break
        assert killed.returncode == -9, killed.stderr[-3000:]
        seen.append(_refused_or_finished(out, expected))
        capsys.readouterr()
        assert main(argv) == 0, capsys.readouterr().err[-3000:]
        verify(out, full=True)
        assert outputs(out) == expected, f"kill point {after}"
    else:
        pytest.fail("the run never finished within 40 kill points")
    # the last kill point is the manifest's move into place; a finished output run again is
    # still the finished artifact until its manifest is withdrawn
    assert seen[-1] == "refused" and seen[0] == ("finished" if finished else "refused"), seen
    assert {name for name in FINAL if (out / name).is_file()} == set(FINAL)
