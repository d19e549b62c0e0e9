"""pretrain.staging: every state a kill can leave while an artifact is moved into place is either
nothing of the artifact, or the command's own unfinished work that its re-run takes back (never a
stranger's folder, never a finished artifact). The kill is stood in for by a move that fails
after k files (the disk holds what a SIGKILL at that point leaves); the real kills of the real
commands are in tests/pretrain_app/test_killed_outputs.py and tests/trainer/test_export.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pretrain import staging
from pretrain.errors import ArtifactError, ConfigError
from pretrain.manifest import MANIFEST, STAGING_DIR, load_manifest, require, verify, write_manifest
from pretrain.outtarget import require_new_output, require_own_output

KIND = "kenlm-model"
FILES = {
    "en.arpa": b"\\data\\\nngram 1=2\n",
    "zh.arpa": b"\\data\\\nngram 1=3\n",
    "model.json": b"{}",
}


class Killed(BaseException):
    """Stands for the SIGKILL: nothing after it runs, no handler cleans up."""


def _build(out: Path, files: dict[str, bytes] = FILES) -> None:
    with staging.staged(out, KIND) as staged_files:
        for name, data in files.items():
            (staged_files / name).write_bytes(data)
        write_manifest(staged_files, KIND)


def _killed_after_moves(out: Path, moves: int, monkeypatch: pytest.MonkeyPatch) -> None:
    real = staging._move
    done = [0]

    def move(source: Path, target: Path) -> None:
        if done[0] == moves:
            raise Killed
        done[0] += 1
        real(source, target)

    monkeypatch.setattr(staging, "_move", move)
    with pytest.raises(Killed):
        _build(out)
    monkeypatch.setattr(staging, "_move", real)


def _contents(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


@pytest.mark.parametrize("moves", range(len(FILES) + 1))
def test_a_kill_while_moving_leaves_work_the_rerun_takes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moves: int
) -> None:
    """After 0..3 files moved (the manifest moves last, the 4th): no manifest in `out`, so the
    reader refuses it in one line naming the staging folder; the output check accepts it (before
    there was no staging: `en.arpa` alone in `out` was refused as not empty); the re-run gives
    the files of an uninterrupted build, nothing left over."""
    reference = tmp_path / "reference"
    _build(reference)
    out = tmp_path / "out"
    _killed_after_moves(out, moves, monkeypatch)
    assert (out / STAGING_DIR).is_dir() and not (out / MANIFEST).exists()
    with pytest.raises(ArtifactError) as refused:
        require(out, kind=KIND)
    assert len(str(refused.value).splitlines()) == 1 and STAGING_DIR in str(refused.value)
    require_new_output(out, "out =", KIND)
    require_own_output(out, "--out", KIND)
    _build(out)
    assert _contents(out) == _contents(reference) == FILES
    assert sorted(load_manifest(out)["files"]) == sorted(FILES)
    verify(out)


def test_a_kill_after_the_manifest_moved_is_a_finished_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The staging folder left beside a moved manifest is not part of the artifact (verify, the
    unlisted-file check), and a model, which is never replaced, is refused as finished."""
    out = tmp_path / "out"
    real = staging._remove_staging
    monkeypatch.setattr(staging, "_remove_staging", lambda path: (_ for _ in ()).throw(Killed))
    with pytest.raises(Killed):
        _build(out)
    monkeypatch.setattr(staging, "_remove_staging", real)
    assert (out / STAGING_DIR / staging.OWNER).is_file()
    (out / STAGING_DIR / "files" / "stray").write_bytes(b"x")  # as a kill mid-removal may leave
    verify(out)
    with pytest.raises(ConfigError, match="finished kenlm-model artifact"):
        require_new_output(out, "out =", KIND)
    require_own_output(out, "--out", KIND)  # a kind that replaces itself takes it back
    _build(out)
    assert _contents(out) == FILES


def test_a_kill_before_the_first_file_leaves_nothing_visible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    with pytest.raises(Killed), staging.staged(out, KIND) as files:
        (files / "en.arpa").write_bytes(b"half")
        monkeypatch.setattr(staging, "_remove_staging", lambda path: None)  # no cleanup: a kill
        raise Killed
    assert [p.name for p in out.iterdir()] == [STAGING_DIR]
    monkeypatch.undo()
    require_new_output(out, "out =", KIND)
    _build(out)
    assert _contents(out) == FILES


@pytest.mark.parametrize("case", ["no_owner", "other_kind", "a_file"])
def test_a_staging_folder_that_is_not_ours_is_still_refused(tmp_path: Path, case: str) -> None:
    """A user's `.pretrain-staging` (no owner record), another command's unfinished work, or a
    file of that name: refused in one line and left alone, never taken back."""
    out = tmp_path / "user"
    folder = out / STAGING_DIR
    if case == "a_file":
        out.mkdir()
        folder.write_bytes(b"mine")
    else:
        (folder / "files").mkdir(parents=True)
        (folder / "files" / "notes.md").write_bytes(b"mine")
        if case == "other_kind":
            (folder / staging.OWNER).write_text('{"kind": "hf_export"}')
    before = _contents(out)
    for check in (require_new_output, require_own_output):
        with pytest.raises(ConfigError, match="not empty") as refused:
            check(out, "out =", KIND)
        assert len(str(refused.value).splitlines()) == 1
    staging.clear_unfinished(out, KIND)
    assert _contents(out) == before


def test_a_strangers_staging_folder_beside_an_earlier_artifact_is_one_line(tmp_path: Path) -> None:
    """A kind that replaces itself passes the check on the earlier artifact's manifest; a
    `.pretrain-staging` there that is not its own is still refused in one line, kept."""
    out = tmp_path / "out"
    _build(out)
    (out / STAGING_DIR).mkdir()
    (out / STAGING_DIR / "notes.md").write_bytes(b"mine")
    require_own_output(out, "--out", KIND)
    with pytest.raises(ConfigError, match="not this command's") as refused:
        _build(out)
    assert len(str(refused.value).splitlines()) == 1
    assert (out / STAGING_DIR / "notes.md").read_bytes() == b"mine"
    verify(out)


def test_an_earlier_artifact_stays_whole_until_the_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kind that replaces itself (`pretrain export`), killed while building the new one: the
    earlier artifact still verifies and reads as before (before, export first deleted the old
    manifest and then wrote over the files in place: a kill left neither)."""
    out = tmp_path / "out"
    _build(out)
    with pytest.raises(Killed), staging.staged(out, KIND) as files:
        (files / "en.arpa").write_bytes(b"the new model, half written")
        monkeypatch.setattr(staging, "_remove_staging", lambda path: None)  # no cleanup: a kill
        raise Killed
    monkeypatch.undo()
    verify(out)
    require(out, kind=KIND)
    visible = {k: v for k, v in _contents(out).items() if not k.startswith(STAGING_DIR)}
    assert visible == FILES
    assert (out / STAGING_DIR / "files" / "en.arpa").is_file()
    require_own_output(out, "--out", KIND)
    _build(out, {"en.arpa": b"new"})  # the earlier artifact's other files go with it
    assert _contents(out) == {"en.arpa": b"new"}
    verify(out)
