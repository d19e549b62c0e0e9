"""`pretrain tokenizer encode` SIGKILLed (the real CLI, clean environment, `--no-ray`) at each
phase, then run again: the re-run finishes and its files are byte-identical to an uninterrupted
encode's, and what the kill left is never taken for a finished encoded artifact: its reader (what
`pretrain mixture build` opens the .bin/.idx through) and `pretrain verify` refuse it in one line.

Before, a finished prefix's .bin/.idx/sidecar were moved under their names and hashed, and only
then its `.done` record written: a first encode killed between left a `.bin`/`.idx` with no
record, and the re-run refused the folder as someone else's ("not empty ... holds no encoded
artifact"). Now the record is written first (from the files' hashes before the move)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pretrain.artifacts import encoded as encoded_kind
from pretrain.errors import ArtifactError
from pretrain.manifest import MANIFEST, load_manifest
from pretrain_app.cli import main
from tests.pretrain_app.killtools import contents, kill_when
from tests.tokenizer.synthetic import write_shards
from tests.tokenizer.tok_helpers import make_records

pytestmark = pytest.mark.serial

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
STEMS = [*(f"train-{i:05d}" for i in range(3)), "eval-00000"]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


PHASES: dict[str, Callable[[Path], bool]] = {
    # the first prefix's tokens are being written (under a `.partial` name)
    "mid-prefix": lambda out: _size(out / f".{STEMS[0]}.partial.bin") > 0,
    # the second prefix is finished, the third being encoded
    "between-prefixes": lambda out: (out / f".{STEMS[1]}.done").is_file(),
    # every prefix is finished: the manifest is being written (every file hashed)
    "manifest": lambda out: (out / f".{STEMS[-1]}.done").is_file(),
}
SLOW = {"between-prefixes", "manifest"}
"""The old code passes these too. The window between a prefix's moves and its record is
milliseconds (a real kill aimed there mostly lands after it): the stand-in sweep below covers
every write there, in the default suite."""


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three shards of 1,000 documents: three prefixes, each a few tenths of a second long."""
    out = tmp_path_factory.mktemp("encode-kill") / "shards"
    return write_shards(out, make_records(2996), docs_per_shard=1000)


def _argv(tokenizer_dir: Path, shards: Path, out: Path) -> list[str]:
    return [
        *("tokenizer", "encode", str(tokenizer_dir), "--data", str(shards), "--out", str(out)),
        *("--no-ray", "--min-prefix-documents", "500"),
    ]


@pytest.fixture(scope="module")
def reference(tokenizer_dir: Path, shards: Path) -> Path:
    out = shards.parent / "reference"
    assert main(_argv(tokenizer_dir, shards, out)) == 0
    assert load_manifest(out)["prefixes"] == STEMS
    return out


def _listing(out: Path) -> dict:
    """Kind, files and counts but `shards_skipped` (a resumed encode skips what it finished)."""
    manifest = load_manifest(out)
    counts = {k: v for k, v in manifest["counts"].items() if k != "shards_skipped"}
    return {"kind": manifest["kind"], "files": manifest["files"], "counts": counts}


def _kill(argv: list[str], tmp: Path, out: Path, ready: Callable[[Path], bool]) -> None:
    for _ in range(3):  # a window may be milliseconds: the encode can win the race
        shutil.rmtree(out, ignore_errors=True)
        if kill_when(argv, tmp, lambda: ready(out)) == -9 and not (out / MANIFEST).exists():
            return
    pytest.fail("the encode finished before the kill three times")


def _refused_in_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err


@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "phase",
    [pytest.param(p, marks=[pytest.mark.slow] if p in SLOW else []) for p in sorted(PHASES)],
)
def test_a_killed_encode_is_refused_by_readers_and_finished_by_the_rerun(
    tokenizer_dir: Path, shards: Path, reference: Path, tmp_path: Path, capsys, phase: str
) -> None:
    out = tmp_path / "encoded"
    argv = _argv(tokenizer_dir, shards, out)
    _kill(argv, tmp_path, out, PHASES[phase])
    with pytest.raises(ArtifactError) as refused:
        encoded_kind.open(out)
    assert len(str(refused.value).splitlines()) == 1
    _refused_in_one_line(capsys, ["verify", str(out)])
    mixture = ["mixture", "build", str(CONFIGS / "mixture.yaml")]
    settings = [
        f"build.encoded={out}",
        f"build.tokenizer={tokenizer_dir}",
        f"out={tmp_path / 'mixture'}",
    ]
    _refused_in_one_line(capsys, [*mixture, *[a for s in settings for a in ("--set", s)]])

    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err  # old code, first-files: "not empty"
    assert contents(out) == contents(reference)  # no .partial file, no stale record left
    assert _listing(out) == _listing(reference)
    encoded_kind.open(out, full=True)


class Killed(BaseException):
    """Stands for the SIGKILL: nothing after it runs, no handler cleans up."""


WRITES_PER_PREFIX = 5
"""A prefix's steps that change the output: its `.done` record written (a temporary file) and
renamed into place (`os.replace`, patched for the whole process), its three files' moves."""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kill_at", range(2 * WRITES_PER_PREFIX))
def test_an_encode_killed_at_any_write_of_a_prefix_is_resumed_byte_identical(
    tokenizer_dir: Path,
    shards: Path,
    reference: Path,
    tmp_path: Path,
    capsys,
    monkeypatch: pytest.MonkeyPatch,
    kill_at: int,
) -> None:
    """Every write of the first two prefixes (`.done` record and its rename, .bin/.idx/sidecar
    moves) fails in turn: the disk holds what a SIGKILL just before it leaves (the windows the real kill above
    cannot aim at). Each time, readers refuse the output and the re-run ends byte-identical.
    The old code, killed between its moves and the record: the re-run refused the folder."""
    import tokenizer.encode as encode_module

    out, writes = tmp_path / "encoded", [0]
    real_replace, real_record = encode_module.os.replace, encode_module.write_json

    def counted(real: Callable, *args: object) -> None:
        if writes[0] == kill_at:
            if real is real_record:  # killed inside write_atomic: its temporary file is left
                path = Path(str(args[0]))
                (path.parent / f".{path.name}.k1ll3d.tmp").write_bytes(b'{\n  "bin_')
            raise Killed
        writes[0] += 1
        real(*args)

    with monkeypatch.context() as patch:
        patch.setattr(encode_module.os, "replace", lambda *a: counted(real_replace, *a))
        patch.setattr(encode_module, "write_json", lambda *a: counted(real_record, *a))
        with pytest.raises(Killed):
            main(_argv(tokenizer_dir, shards, out))
    with pytest.raises(ArtifactError):
        encoded_kind.open(out)
    capsys.readouterr()
    assert main(_argv(tokenizer_dir, shards, out)) == 0, capsys.readouterr().err
    assert contents(out) == contents(reference)
    assert _listing(out) == _listing(reference)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_encode_on_ray_killed_mid_prefix_is_refused_then_resumed_byte_identical(
    tokenizer_dir: Path, shards: Path, reference: Path, tmp_path: Path, capsys
) -> None:
    """The Ray backend (three prefixes, one task each): the driver SIGKILLed while a task writes
    a prefix. Its local Ray goes with it (`kill_when` fails if any process it started outlives
    it by a minute), readers refuse what is left in one line, and the re-run (inline: the
    resume does not depend on the backend) is byte-identical to an uninterrupted encode."""
    out = tmp_path / "encoded"
    argv = [*_argv(tokenizer_dir, shards, out), "--num-cpus", "0.5"]
    argv.remove("--no-ray")
    _kill(argv, tmp_path, out, lambda o: any(_size(p) > 0 for p in o.glob(".*.partial.bin")))
    with pytest.raises(ArtifactError) as refused:
        encoded_kind.open(out)
    assert len(str(refused.value).splitlines()) == 1
    _refused_in_one_line(capsys, ["verify", str(out)])
    capsys.readouterr()
    assert main(_argv(tokenizer_dir, shards, out)) == 0, capsys.readouterr().err
    assert contents(out) == contents(reference)
    assert _listing(out) == _listing(reference)
    encoded_kind.open(out, full=True)
