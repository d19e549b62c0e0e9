"""Training (tag-weighted sample, special ids, determinism) and the lock (tamper, mismatch)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from pretrain.artifacts.tokenizer import identity_of
from pretrain.errors import ArtifactError, LockMismatch
from pretrain.manifest import load_manifest, manifest_sha256, seal_of
from pretrain_app.cli import main
from tests.tokenizer.tok_helpers import train_config
from tokenizer.lock import check_match, load_locked
from tokenizer.shards import shards_identity
from tokenizer.train import train

pytestmark = pytest.mark.timeout(120)


def _train_docs_by_group(shards: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in sorted((shards / "data").glob("*.parquet")):
        table = pq.read_table(path, columns=["split", "domain", "lang", "text"])
        for split, domain, lang, text in zip(*(c.to_pylist() for c in table.columns), strict=True):
            if split != "eval" and text:
                counts[f"{domain}/{lang}"] = counts.get(f"{domain}/{lang}", 0) + 1
    return counts


def test_artifact_lock_and_identity(tokenizer_dir: Path, shards_dir: Path) -> None:
    manifest = load_manifest(tokenizer_dir)
    lock = json.loads((tokenizer_dir / "lock.json").read_bytes())
    info = manifest["tokenizer"]
    assert re.fullmatch(r"bpe-768@[0-9a-f]{6}", info["id"]) and info["id"].endswith(
        info["sha256"][:6]
    )
    assert lock["special_tokens"] == {"<|endoftext|>": 0, "<|pad|>": 1, "<|user|>": 2}
    assert lock["vocab_size"] == 768 and lock["token_dtype"] == "uint16"
    assert lock["inputs"] == {"shards_content_sha256": shards_identity(shards_dir)}
    assert manifest["inputs"][0]["manifest_sha256"] == manifest_sha256(shards_dir)  # lineage
    # the sample drew every train-split document and no eval one
    realised = {k: g["documents"] for k, g in lock["sample"]["groups"].items()}
    assert realised == _train_docs_by_group(shards_dir)
    locked = load_locked(tokenizer_dir)
    assert (locked.eod_id, locked.pad_id, locked.id) == (0, 1, info["id"])
    assert locked.sha256 == info["sha256"]


def test_cli_train_with_tag_weights_and_budget(shards_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "tok.yaml"
    config.write_text(
        yaml.safe_dump({"data": str(shards_dir), "out": str(tmp_path / "tok"), "vocab_size": 512})
    )
    code = main(
        [
            "tokenizer",
            "train",
            str(config),
            "--set",
            "sample.lang_weights.zh=0",
            "--set",
            "sample.domain_weights.code=2",
            "--set",
            "sample.max_bytes=60000",
        ]
    )
    assert code == 0
    lock = json.loads((tmp_path / "tok" / "lock.json").read_bytes())
    groups = lock["sample"]["groups"]
    assert groups["web/zh"]["documents"] == 0  # weight 0 excludes Chinese
    assert 45_000 < lock["sample"]["bytes"] < 75_000  # about the 60 kB budget, streamed
    # code has twice the inclusion probability of English web text
    assert groups["code/python"]["inclusion_probability"] == pytest.approx(
        2 * groups["web/en"]["inclusion_probability"]
    )


def test_same_inputs_same_tokenizer_id(
    tokenizer_dir: Path, shards_dir: Path, tmp_path: Path
) -> None:
    again = train(train_config(shards_dir, tmp_path / "again"))
    assert again["tokenizer"]["sha256"] == load_manifest(tokenizer_dir)["tokenizer"]["sha256"]


def test_one_byte_edit_of_tokenizer_json_is_refused(tokenizer_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, copy)
    path = copy / "tokenizer.json"
    data = bytearray(path.read_bytes())
    index = data.index(b'"merges"') + 2
    data[index] = ord("N")
    path.write_bytes(bytes(data))
    assert len(bytes(data)) == (tokenizer_dir / "tokenizer.json").stat().st_size  # same size
    with pytest.raises(ArtifactError, match=r"tokenizer.json does not match its sha256"):
        load_locked(copy)
    assert (
        main(
            [
                "tokenizer",
                "encode",
                str(copy),
                "--data",
                str(tmp_path),
                "--out",
                str(tmp_path / "enc"),
            ]
        )
        == 2
    )


def test_mismatch_names_both_hashes_and_the_fix(tokenizer_dir: Path) -> None:
    locked = load_locked(tokenizer_dir)
    other = {"name": "bpe-64k", "sha256": "ab" * 32, "id": "bpe-64k@ababab"}
    check_match(locked.info, locked, "encoded data")  # same tokenizer passes
    with pytest.raises(LockMismatch) as caught:
        check_match(other, locked, "encoded data /x")
    message = str(caught.value)
    assert "bpe-64k@ababab" in message and locked.id in message
    assert "pretrain tokenizer encode" in message and "\n" not in message


def test_the_identity_is_the_content_hash_the_manifest_holds(tokenizer_dir: Path) -> None:
    """lock.json lists no file hash (the manifest holds them); the identity is the hash of the
    manifest's {file: sha256}, so no file is hashed twice and none can change unseen."""
    lock = json.loads((tokenizer_dir / "lock.json").read_bytes())
    assert "files" not in lock
    files = load_manifest(tokenizer_dir)["files"]
    assert {"tokenizer.json", "lock.json"} <= set(files)
    recorded = load_manifest(tokenizer_dir)["tokenizer"]["sha256"]
    assert identity_of({rel: entry["sha256"] for rel, entry in files.items()}) == recorded


@pytest.mark.parametrize("target", ["lock.json", "manifest.json"])
def test_an_edited_lock_or_identity_is_refused(
    tokenizer_dir: Path, tmp_path: Path, target: str
) -> None:
    """lock.json edited at the same size: its bytes no longer match the manifest. The manifest's
    identity edited and resealed (a forger's seal): the files' identity is not the one recorded."""
    copy = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, copy)
    if target == "lock.json":
        data = (copy / "lock.json").read_bytes()
        (copy / "lock.json").write_bytes(data.replace(b'"eod_id":0', b'"eod_id":9'))
        assert (copy / "lock.json").read_bytes() != data
        match = "lock.json does not match its sha256"
    else:
        manifest = load_manifest(copy)
        manifest["tokenizer"]["sha256"] = "ab" * 32
        manifest["seal"] = seal_of(manifest)
        (copy / "manifest.json").write_text(json.dumps(manifest))
        match = "its files have identity"
    with pytest.raises(ArtifactError, match=match) as info:
        load_locked(copy)
    assert "\n" not in str(info.value)


def test_unnamed_tokenizer_is_named_by_the_vocabulary_it_holds(
    shards_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a sample far too small for the vocab_size asked: the name must not promise 1024k tokens
    config = tmp_path / "tok.yaml"
    out = tmp_path / "tok"
    config.write_text(
        yaml.safe_dump({"data": str(shards_dir), "out": str(out), "vocab_size": 1048576})
    )
    assert main(["tokenizer", "train", str(config)]) == 0
    lock = json.loads((out / "lock.json").read_bytes())
    held = lock["vocab_size"]
    assert held < 65536 and lock["vocab_size_requested"] == 1048576
    expected = f"bpe-{round(held / 1024)}k" if held >= 16384 else f"bpe-{held}"
    assert lock["name"] == expected and lock["name"] != "bpe-1024k"
    assert load_manifest(out)["tokenizer"]["id"].startswith(f"{expected}@")
    printed = capsys.readouterr().out
    assert f"supports only {held} tokens" in printed and f"tokenizer {expected}@" in printed


def test_a_given_name_is_kept_whatever_the_vocabulary(shards_dir: Path, tmp_path: Path) -> None:
    manifest = train(train_config(shards_dir, tmp_path / "tok", vocab_size=1048576, name="mine"))
    assert manifest["tokenizer"]["id"].startswith("mine@")
