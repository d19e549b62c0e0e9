"""The tokenizer id depends on what it was trained on, not on when the shards were built: a clean
rebuild of the same shards (another created_unix and command in their manifest, as every clean
`make demo` makes) gives the same id; one changed byte in a training document gives another.
The shards manifest's sha256 stays in the tokenizer manifest's `inputs` (lineage, outside the id).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pretrain.manifest import load_manifest, manifest_sha256, seal_of
from tests.tokenizer.synthetic import write_shards
from tests.tokenizer.tok_helpers import make_records, train_config
from tokenizer.shards import shards_identity
from tokenizer.train import train

pytestmark = pytest.mark.timeout(180)


def _clean_build(out: Path, records: list[dict], when: float, command: list[str]) -> Path:
    """The shards as a clean run writes them: same documents, its own time and command."""
    write_shards(out, records, docs_per_shard=150)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.update(created_unix=when, command=command)
    manifest["seal"] = seal_of(manifest)  # as that run's writer sealed it
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out


def _train_id(shards: Path, out: Path) -> dict:
    return train(train_config(shards, out))["tokenizer"]


def test_same_documents_rebuilt_give_the_same_tokenizer_id(tmp_path: Path) -> None:
    records = make_records(300)
    first = _clean_build(tmp_path / "a", records, 1796000000.0, ["pretrain", "demo"])
    second = _clean_build(tmp_path / "b", records, 1796000999.5, ["pretrain", "demo", "--out", "x"])
    assert manifest_sha256(first) != manifest_sha256(second)  # the manifests differ ...
    assert shards_identity(first) == shards_identity(second)  # ... their content does not

    one, two = _train_id(first, tmp_path / "tok-a"), _train_id(second, tmp_path / "tok-b")
    assert one["id"] == two["id"] and one["sha256"] == two["sha256"]
    lineage = [load_manifest(tmp_path / t)["inputs"][0] for t in ("tok-a", "tok-b")]
    assert [entry["manifest_sha256"] for entry in lineage] == [
        manifest_sha256(first),
        manifest_sha256(second),
    ]


def test_one_changed_byte_in_a_training_document_changes_the_id(tmp_path: Path) -> None:
    records = make_records(300)
    index = next(i for i, r in enumerate(records) if r["lang"] == "en" and "e" in r["text"])
    edited = [dict(r) for r in records]
    edited[index]["text"] = edited[index]["text"].replace("e", "a", 1)  # same length
    assert len(edited[index]["text"]) == len(records[index]["text"])
    base = _clean_build(tmp_path / "a", records, 1796000000.0, ["x"])
    changed = _clean_build(tmp_path / "b", edited, 1796000000.0, ["x"])
    assert shards_identity(base) != shards_identity(changed)
    one, two = _train_id(base, tmp_path / "tok-a"), _train_id(changed, tmp_path / "tok-b")
    assert one["sha256"] != two["sha256"] and one["id"] != two["id"]
    lock = json.loads((tmp_path / "tok-a" / "lock.json").read_text())
    assert set(lock["inputs"]) == {"shards_content_sha256"}
    assert lock["inputs"]["shards_content_sha256"] == shards_identity(base)
