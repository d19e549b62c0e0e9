"""`pretrain tokenizer eval` (it writes TOKENIZER/eval, a nested artifact) SIGKILLed (the real CLI,
clean environment) while it writes, then run again. Before, it deleted an earlier eval's manifest
first and wrote report.json in place: a kill left `eval/report.json` with no manifest, the re-run
refused the folder as not ours ("not empty (report.json) ..."), and `pretrain verify TOKENIZER`
refused the finished tokenizer for the unlisted files. Now the eval is built in
`TOKENIZER/.pretrain-staging/` (pretrain.publish), which the tokenizer's verify skips: the tokenizer
stays verifying, an earlier eval stays whole, the eval reader refuses the unfinished one in one
line, and the re-run is byte-identical to an uninterrupted eval."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pretrain.artifacts import tokenizer_eval as eval_kind
from pretrain.errors import ArtifactError
from pretrain.manifest import MANIFEST
from pretrain.publish import scratch_dir
from pretrain_app.cli import main
from tests.pretrain_app.killtools import contents, kill_when


def _argv(tokenizer: Path, shards: Path) -> list[str]:
    return ["tokenizer", "eval", str(tokenizer), "--data", str(shards), "--no-baseline"]


def _report_written(evals: Path, earlier_inode: int | None) -> Callable[[], bool]:
    """True once this eval wrote report.json: staged, or in place (the old code) as a new file."""

    def ready() -> bool:
        if (scratch_dir(evals) / "report.json").is_file():
            return True
        try:
            return (evals / "report.json").stat().st_ino != earlier_inode
        except FileNotFoundError:
            return False

    return ready


def _verifies(capsys: pytest.CaptureFixture[str], directory: Path) -> bool:
    capsys.readouterr()
    status = main(["verify", str(directory)])
    err = capsys.readouterr().err.strip()
    assert status in (0, 2) and len(err.splitlines()) <= 1, err
    return status == 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("earlier", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_killed_eval_leaves_the_tokenizer_verifying_and_the_rerun_finishes_it(
    tokenizer_dir: Path, shards_dir: Path, tmp_path: Path, capsys, earlier: bool
) -> None:
    tokenizer = tmp_path / "tokenizer"
    shutil.copytree(tokenizer_dir, tokenizer, ignore=shutil.ignore_patterns("eval"))
    evals = tokenizer / "eval"
    assert main(_argv(tokenizer, shards_dir)) == 0
    reference = contents(evals)  # report.json names its folder: the same path is killed below
    for _ in range(3):  # the window is the plot (matplotlib): wide, but a fast eval may win
        if not earlier:
            shutil.rmtree(evals)
        inode = (evals / "report.json").stat().st_ino if earlier else None
        status = kill_when(_argv(tokenizer, shards_dir), tmp_path, _report_written(evals, inode))
        if status == -9 and (not (evals / MANIFEST).exists() or scratch_dir(evals).exists()):
            break
    else:
        pytest.fail("the eval finished before the kill three times")

    assert _verifies(capsys, tokenizer)  # old code: "holds 1 file(s) its manifest does not list"
    if earlier:  # the earlier eval, whole (old code: its manifest was deleted first)
        eval_kind.open(evals, full=True)
        assert contents(evals) == reference
    else:
        with pytest.raises(ArtifactError) as refused:
            eval_kind.open(evals)
        assert len(str(refused.value).splitlines()) == 1
        assert not _verifies(capsys, evals)

    capsys.readouterr()
    assert main(_argv(tokenizer, shards_dir)) == 0, capsys.readouterr().err  # old: "not empty"
    assert contents(evals) == reference
    eval_kind.open(evals, full=True)
    assert _verifies(capsys, tokenizer)
    assert not scratch_dir(evals).exists()
