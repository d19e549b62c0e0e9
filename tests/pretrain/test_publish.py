"""pretrain.publish: a writer SIGKILLed at any step (a real process killing itself just before
its k-th rename, with and without RENAME_EXCHANGE) leaves the output as the earlier finished
artifact, or nothing, or the new finished one; never a part of either. The next write of the
same output clears what the kill left and publishes the whole artifact. The real commands'
kills are in tests/mixtures/test_build_kill.py, tests/evals/test_sets_kill.py,
tests/tokenizer/test_kill_*.py, tests/pretrain_app/test_killed_outputs.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pretrain.errors import ConfigError
from pretrain.manifest import MANIFEST, load_manifest, verify, write_manifest
from pretrain.output_check import require_new_output, require_own_output
from pretrain.publish import clear_scratch, publishing, retired_dir, scratch_dir
from tests.data_pipeline.raytools import REPO, clean_env

pytestmark = pytest.mark.timeout(120)

KIND = "kenlm-model"
OLD = {"en.arpa": b"old en", "zh.arpa": b"old zh"}
NEW = {"en.arpa": b"new en", "model.json": b"{}"}

WRITER = r"""
import os, signal, sys
from pathlib import Path
out, after, exchange = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
import pretrain.publish
from pretrain.manifest import write_manifest
if not exchange:
    pretrain.publish._exchange = lambda first, second: False
renames = [0]
def step(original):
    def call(*args, **kwargs):
        if renames[0] == after:
            os.kill(os.getpid(), signal.SIGKILL)
        renames[0] += 1
        return original(*args, **kwargs)
    return call
pretrain.publish._exchange = step(pretrain.publish._exchange)
os.rename = step(os.rename)
with pretrain.publish.publishing(out) as scratch:
    (scratch / "en.arpa").write_bytes(b"new en")
    (scratch / "model.json").write_bytes(b"{}")
    write_manifest(scratch, "kenlm-model")
"""


def _build(out: Path, files: dict[str, bytes]) -> None:
    with publishing(out) as scratch:
        for name, data in files.items():
            (scratch / name).write_bytes(data)
        write_manifest(scratch, KIND)


def _contents(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def _killed_writer(out: Path, after: int, exchange: bool) -> int:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(out), str(after), "1" if exchange else "0"],
        cwd=REPO,
        env=clean_env(out.parent / "home"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode in (0, -9), done.stderr[-2000:]
    return done.returncode


@pytest.mark.parametrize("exchange", [True, False])
@pytest.mark.parametrize("earlier", [True, False])
def test_a_writer_killed_at_any_step_leaves_old_or_new_and_the_next_write_finishes(
    tmp_path: Path, exchange: bool, earlier: bool
) -> None:
    for after in range(4):
        out = tmp_path / f"k{after}" / "out"
        out.parent.mkdir()
        if earlier:
            _build(out, OLD)
        status = _killed_writer(out, after, exchange)
        if out.exists():
            verify(out)
            assert _contents(out) in (OLD if earlier else None, NEW), after
        elif earlier:  # the fallback, between its renames: the old artifact waits beside
            assert not exchange and _contents(retired_dir(out)) == OLD
        clear_scratch(out)  # the next write's first step: the old artifact is back, whole
        if status == -9 and earlier and _contents(out) == OLD:
            verify(out)
        require_own_output(out, "--out", KIND)
        _build(out, NEW)
        assert _contents(out) == NEW and sorted(load_manifest(out)["files"]) == sorted(NEW)
        assert set(os.listdir(out.parent)) - {"home"} == {"out"}, after  # nothing left beside


def test_an_error_inside_the_block_keeps_the_earlier_artifact(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _build(out, OLD)
    with pytest.raises(RuntimeError, match="half"), publishing(out) as scratch:
        (scratch / "en.arpa").write_bytes(b"half")
        raise RuntimeError("half written")
    verify(out)
    assert _contents(out) == OLD and not scratch_dir(out).exists()
    with pytest.raises(ConfigError, match="finished kenlm-model artifact"):
        require_new_output(out, "out =", KIND)  # a model is never replaced


def test_a_nested_artifact_is_built_where_its_parent_lists_nothing(tmp_path: Path) -> None:
    """A report inside a mixture: its scratch folder is in the parent's unlisted
    `.pretrain-staging/`, so the parent verifies while it is built, and after a kill."""
    parent = tmp_path / "mixture"
    _build(parent, OLD)
    with publishing(parent / "report") as scratch:
        (scratch / "en.arpa").write_bytes(b"half")
        verify(parent)
        write_manifest(scratch, KIND)
    assert _contents(parent / "report") == {"en.arpa": b"half"}
    assert not scratch_dir(parent / "report").parent.exists()  # the empty staging folder goes
