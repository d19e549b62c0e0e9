"""`pretrain tokenizer train` SIGKILLed (the real CLI, clean environment) at each phase, then run
again: the re-run finishes and its output is byte-identical to an uninterrupted run, and what the
kill left is never taken for a finished tokenizer: the tokenizer loader, encode's input check and
`pretrain verify` refuse it in one line. Before, train wrote tokenizer.json, the HF files and
lock.json into `out` and the manifest last: a first train killed after tokenizer.json left them
there with no manifest, and its re-run refused the folder as someone else's ("not empty ...
holds no tokenizer artifact"), so the user had to delete by hand files they could not tell were
partial. Now they are built in a scratch folder beside `out` and published in one rename
(pretrain.publish); a retrain killed midway leaves the earlier tokenizer whole."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from pretrain.artifacts import tokenizer as tokenizer_kind
from pretrain.errors import ArtifactError
from pretrain.locking import is_lock_file, read_holder
from pretrain.manifest import MANIFEST, load_manifest
from pretrain.publish import scratch_dir
from pretrain_app.cli import main
from tests.pretrain_app.killtools import contents, kill_when, listing, run
from tokenizer.lock import load_locked
from tokenizer.train import train


def _config(tmp: Path, shards: Path, out: Path, vocab_size: int = 768) -> Path:
    path = tmp / f"tok-{out.name}.yaml"
    data = {"data": str(shards), "out": str(out), "vocab_size": vocab_size}
    path.write_text(yaml.safe_dump({**data, "special_tokens": ["<|user|>"]}))
    return path


def _argv(config: Path) -> list[str]:
    return ["tokenizer", "train", str(config)]


def _written(name: str, earlier: dict[str, int] | None = None) -> Callable[[Path], bool]:
    """True once the train wrote `name`, in its scratch folder or in `out` (any file there
    other than the `earlier` one, by inode: the old code replaced it in place)."""

    def ready(out: Path) -> bool:
        if (scratch_dir(out) / name).is_file():
            return True
        try:
            inode = (out / name).stat().st_ino
        except FileNotFoundError:
            return False
        return inode != (earlier or {}).get(name)

    return ready


PHASES: dict[str, Callable[[Path], bool]] = {
    # it holds the output lock: sampling and training, nothing written yet (passes on the old
    # code too: slow)
    "training": lambda out: read_holder(out) is not None,
    # tokenizer.json saved; the HF files, lock.json and the manifest are being written
    "tokenizer.json": _written("tokenizer.json"),
}
PHASE_MARKS = {"training": [pytest.mark.slow]}


@pytest.fixture(scope="module")
def reference(shards_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("train-reference")
    out = tmp / "reference"
    done = run(_argv(_config(tmp, shards_dir, out)), tmp, "reference")
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _kill(
    argv: list[str],
    tmp: Path,
    out: Path,
    ready: Callable[[Path], bool],
    setup: Callable[[], None] = lambda: None,
) -> None:
    """Kill `pretrain ARGV` once `ready(out)`, on `out` as `setup()` leaves it; again (from
    `setup()`) when the train won the race: the windows are milliseconds."""
    for _ in range(3):
        shutil.rmtree(out, ignore_errors=True)
        setup()
        if kill_when(argv, tmp, lambda: ready(out)) == -9:
            return
        load_manifest(out)  # it finished
    pytest.fail("the train finished before the kill three times")


def _refused_in_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "phase", [pytest.param(name, marks=PHASE_MARKS.get(name, [])) for name in sorted(PHASES)]
)
def test_a_killed_first_train_is_refused_by_readers_and_finished_by_the_rerun(
    shards_dir: Path, reference: Path, tmp_path: Path, capsys, phase: str
) -> None:
    out = tmp_path / "tok"
    config = _config(tmp_path, shards_dir, out)
    _kill(_argv(config), tmp_path, out, PHASES[phase])
    assert not (out / MANIFEST).exists()
    in_sight = sorted(p.name for p in out.glob("*")) if out.is_dir() else []
    with pytest.raises(ArtifactError) as refused:
        load_locked(out)
    assert len(str(refused.value).splitlines()) == 1
    _refused_in_one_line(capsys, ["verify", str(out)])
    encoded = tmp_path / "encoded"
    encode = ["tokenizer", "encode", str(out), "--data", str(shards_dir), "--no-ray"]
    assert str(out) in _refused_in_one_line(capsys, [*encode, "--out", str(encoded)])

    again = run(_argv(config), tmp_path, "rerun")
    assert again.returncode == 0, again.stderr[-3000:]  # old code: "not empty (lock.json, ...)"
    assert in_sight == []  # nothing of the killed train was in sight
    assert contents(out) == contents(reference)  # no part of the kill left
    assert not scratch_dir(out).exists()
    assert listing(out) == listing(reference)
    tokenizer_kind.open(out, full=True)


@pytest.mark.timeout(300)
def test_a_killed_retrain_leaves_the_earlier_tokenizer_whole_and_the_rerun_replaces_it(
    shards_dir: Path, reference: Path, tmp_path: Path, capsys
) -> None:
    """The earlier tokenizer (another vocab_size) with its eval: killed while the new one is
    written, the folder still is the earlier tokenizer, verifying, under its own id (a reader that
    pinned the new one refuses it by hash); the re-run leaves exactly the new one, no old eval."""
    from tests.tokenizer.tok_helpers import train_config
    from tokenizer.evaluate import evaluate

    out = tmp_path / "tok"
    inodes: dict[str, int] = {}

    def earlier_tokenizer() -> None:
        train(train_config(shards_dir, out, vocab_size=600))
        evaluate(out, shards_dir, baseline=False)
        inodes["tokenizer.json"] = (out / "tokenizer.json").stat().st_ino

    config = _config(tmp_path, shards_dir, out)
    _kill(_argv(config), tmp_path, out, _written("tokenizer.json", inodes), earlier_tokenizer)
    earlier = load_locked(out)  # old code: "has no lock.json" (deleted before the new one)
    assert earlier.vocab_size == 600 and (out / "eval" / MANIFEST).is_file()
    assert tokenizer_kind.open(out, full=True).sha256 == earlier.sha256
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0, capsys.readouterr().err

    again = run(_argv(config), tmp_path, "rerun")
    assert again.returncode == 0, again.stderr[-3000:]
    left = {name: data for name, data in contents(out).items() if not is_lock_file(Path(name))}
    assert left == contents(reference)  # but the eval's writer lock beside it (as before)
    assert listing(out) == listing(reference)
    assert load_locked(out).sha256 == load_locked(reference).sha256 != earlier.sha256
