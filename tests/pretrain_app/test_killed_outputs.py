"""`pretrain data train-lm` / `train-classifier` SIGKILLed mid-write, then run again: before, the
kill left a part of the model in `out` (train-lm: the first language's `en.arpa` while `zh` was
estimated; train-classifier: `model.bin` while it was evaluated and plotted), no manifest, and
the re-run refused the folder as not empty (the user had to delete it by hand, not knowing it
was partial). Now the files are built in a scratch folder beside `out` and published in one
rename (pretrain.publish): the killed output is refused by every reader in one line, and the re-run
takes it back and ends byte-identical to an uninterrupted run. `pretrain export`: in
tests/trainer/test_export.py (it needs a trained run)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pretrain.artifacts import model as model_kind
from pretrain.errors import ArtifactError
from pretrain.manifest import MANIFEST
from pretrain.publish import scratch_dir
from pretrain_app.cli import main
from tests.pretrain_app.killtools import contents, kill_when, listing, run

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _started(pattern: str) -> Callable[[Path], bool]:
    """True once a file named like `pattern` exists in the output's scratch folder."""
    return lambda out: any(scratch_dir(out).rglob(pattern))


COMMANDS = {
    # killed once the second language's model is being estimated: the first is finished
    "train-lm": (
        ["data", "train-lm", str(CONFIGS / "lm.yaml")],
        ["order=3", "max_tokens=60000"],
        _started("*zh.arpa*"),
    ),
    # killed once the model is saved (in the spawned trainer), while it is evaluated and plotted
    "train-classifier": (
        ["data", "train-classifier", str(CONFIGS / "classifier_quality.yaml")],
        ["fasttext.dim=16", "fasttext.bucket=20000", "fasttext.epoch=10"],
        _started("model.bin"),
    ),
}


def _argv(command: str, out: Path) -> list[str]:
    argv, small, _ = COMMANDS[command]
    return [*argv, *[arg for value in [f"out={out}", *small] for arg in ("--set", value)]]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_killed_model_is_refused_by_readers_and_replaced_by_the_rerun(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    reference = tmp_path / "reference"
    done = run(_argv(command, reference), tmp_path, "reference")
    assert done.returncode == 0, done.stderr[-3000:]

    out = tmp_path / "out"
    ready = COMMANDS[command][2]
    assert kill_when(_argv(command, out), tmp_path, lambda: ready(out)) == -9
    assert not (out / MANIFEST).exists()
    # a half-written model is never taken for a finished one: one line, from the loader the
    # stages use and from `pretrain verify`
    with pytest.raises(ArtifactError, match="not a finished artifact|does not exist") as refused:
        model_kind.open(out)
    assert len(str(refused.value).splitlines()) == 1
    capsys.readouterr()
    assert main(["verify", str(out)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1

    again = run(_argv(command, out), tmp_path, "rerun")
    assert again.returncode == 0, again.stderr[-3000:]
    assert contents(out) == contents(reference)  # nothing of the killed run is left
    assert listing(out) == listing(reference)
    model_kind.open(out, full=True)
    assert not scratch_dir(out).exists()
