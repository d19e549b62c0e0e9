"""Where `pretrain tokenizer train` and `... encode` may write. An `out` that is a file, lies
below a file, or is a non-empty folder none of our commands wrote (a user's Megatron data folder
with its own .bin/.idx, an HF tokenizer folder with lock.json and tokenizer.json) is refused in one
line (exit 2), by `--dry-run` and by the real command, and nothing there changes: the old code
deleted the user's .bin/.idx (their stems were "no longer in the input") and replaced lock.json
and tokenizer.json. Our own earlier output, finished or killed before its manifest, is still
resumed or replaced."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pretrain.manifest import load_manifest
from pretrain_app.cli import main

FOREIGN = {
    "megatron": {"synthetic-00000.bin": b"user tokens", "synthetic-00000.idx": b"user index"},
    "stale_stem": {"corpus_text_document.bin": b"tokens", "corpus_text_document.idx": b"idx"},
    "hf_folder": {"lock.json": b'{"mine": 1}', "tokenizer.json": b"{}", "notes.txt": b"n"},
}


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file's bytes (dot-files and folders such as a `.logs/` included), but the writer
    lock every command holds beside its output."""
    files = (p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock"))
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def _target(tmp_path: Path, case: str) -> tuple[Path, Path]:
    """(the user's folder, the out given) for a case: `file`, `below_file` or a FOREIGN key."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "afile").write_bytes(b"not a directory\n")
    if case in FOREIGN:
        for name, data in FOREIGN[case].items():
            (user / name).write_bytes(data)
        return user, user
    return user, user / "afile" if case == "file" else user / "afile" / "out"


def _encode_args(tokenizer_dir: Path, shards_dir: Path, out: Path) -> list[str]:
    return [
        *("tokenizer", "encode", str(tokenizer_dir), "--data", str(shards_dir)),
        *("--out", str(out), "--no-ray", "--min-prefix-documents", "200"),
    ]


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "choose" in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("case", ["file", "below_file", *FOREIGN])
def test_encode_refuses_an_out_it_did_not_write_and_leaves_it_alone(
    tokenizer_dir: Path, shards_dir: Path, tmp_path: Path, capsys, case: str, dry_run: bool
) -> None:
    user, out = _target(tmp_path, case)
    before = _snapshot(user)
    argv = _encode_args(tokenizer_dir, shards_dir, out) + (["--dry-run"] if dry_run else [])
    err = _refused(capsys, argv)
    assert str(out) in err  # below a file the writer lock refuses first, in its own words
    assert _snapshot(user) == before  # no file replaced or deleted, no .logs/ left there


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("case", ["file", "below_file", "hf_folder"])
def test_train_refuses_an_out_it_did_not_write_and_leaves_it_alone(
    shards_dir: Path, tmp_path: Path, capsys, case: str, dry_run: bool
) -> None:
    user, out = _target(tmp_path, case)
    before = _snapshot(user)
    config = tmp_path / "tok.yaml"
    config.write_text(yaml.safe_dump({"data": str(shards_dir), "out": str(out), "vocab_size": 300}))
    err = _refused(capsys, ["tokenizer", "train", str(config), *(["--dry-run"] * dry_run)])
    assert str(out) in err
    assert _snapshot(user) == before


def test_train_writes_again_over_its_own_output_even_one_killed_midway(
    shards_dir: Path, tokenizer_dir: Path, tmp_path: Path
) -> None:
    """A re-train keeps the old manifest until the new one replaces it, so a train killed after
    it dropped the old lock.json still leaves a folder the next train recognises."""
    out = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, out)
    (out / "lock.json").unlink()  # as a re-train killed between its deletes and its writes
    config = tmp_path / "tok.yaml"
    config.write_text(yaml.safe_dump({"data": str(shards_dir), "out": str(out), "vocab_size": 300}))
    assert main(["tokenizer", "train", str(config)]) == 0
    assert load_manifest(out)["kind"] == "tokenizer" and (out / "lock.json").is_file()


@pytest.mark.parametrize("killed", [False, True])
def test_encode_resumes_its_own_output_finished_or_killed_before_the_manifest(
    tokenizer_dir: Path, shards_dir: Path, tmp_path: Path, killed: bool
) -> None:
    out = tmp_path / "enc"
    assert main(_encode_args(tokenizer_dir, shards_dir, out)) == 0
    prefixes = load_manifest(out)["prefixes"]
    if killed:  # what a run killed after its prefixes, before its manifest, leaves
        (out / "manifest.json").unlink()
    assert main(_encode_args(tokenizer_dir, shards_dir, out)) == 0
    manifest = load_manifest(out)
    assert manifest["prefixes"] == prefixes
    assert manifest["counts"]["shards_skipped"] == len(prefixes)


def test_encode_starts_again_in_a_folder_holding_only_its_partial_files(
    tokenizer_dir: Path, shards_dir: Path, tmp_path: Path
) -> None:
    """An encode killed inside its first prefix leaves only `.<stem>.partial.*`: not foreign."""
    out = tmp_path / "enc"
    out.mkdir()
    (out / ".synthetic-00000.partial.bin").write_bytes(b"cut short")
    assert main(_encode_args(tokenizer_dir, shards_dir, out)) == 0
    assert load_manifest(out)["counts"]["shards_skipped"] == 0


def test_eval_refuses_an_out_it_did_not_write(
    tokenizer_dir: Path, shards_dir: Path, tmp_path: Path, capsys
) -> None:
    """`tokenizer eval --out DIR` unlinked DIR's manifest.json and replaced its report.json."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "manifest.json").write_bytes(b'{"not": "ours"}')
    (user / "report.json").write_bytes(b'{"mine": 1}')
    before = _snapshot(user)
    base = ["tokenizer", "eval", str(tokenizer_dir), "--data", str(shards_dir), "--no-baseline"]
    assert "manifest.json, report.json" in _refused(capsys, [*base, "--out", str(user)])
    assert _snapshot(user) == before
