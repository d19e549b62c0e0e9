"""Encoding: Megatron .bin/.idx + sidecars, resume, refusal, and a tag subset via GPTDataset."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pretrain.manifest import load_manifest, sha256_file
from pretrain_app.cli import main
from tests.tokenizer.synthetic import write_shards
from tests.tokenizer.tok_helpers import make_records, megatron_tokenizer
from tokenizer.lock import load_locked

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def encoded_dir(tokenizer_dir: Path, shards_dir: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("enc") / "encoded"
    code = main(
        [
            "tokenizer",
            "encode",
            str(tokenizer_dir),
            "--data",
            str(shards_dir),
            "--out",
            str(out),
            "--no-ray",
            "--min-prefix-documents",
            "200",  # shards of 250, 250 and 104 documents: the 104 join the prefix before
        ]
    )
    assert code == 0
    return out


def test_bin_idx_and_sidecar_match_the_shards(
    encoded_dir: Path, tokenizer_dir: Path, shards_dir: Path
) -> None:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    locked = load_locked(tokenizer_dir)
    hf = locked.tokenizer
    hf.encode_special_tokens = True
    manifest = load_manifest(encoded_dir)
    assert manifest["kind"] == "encoded" and manifest["tokenizer"] == locked.info
    assert manifest["prefixes"] == ["train-00000", "train-00001", "eval-00000"]
    shards_files = load_manifest(shards_dir)["files"]
    sources = {stem: list(entry["sources"]) for stem, entry in manifest["shards"].items()}
    every = ["synthetic-00000", "synthetic-00001", "synthetic-00002"]
    assert sources == {"train-00000": every[:1], "train-00001": every[1:], "eval-00000": every}
    for entry in manifest["shards"].values():  # each output names its source shards' hashes
        for stem, sha in entry["sources"].items():
            assert sha == shards_files[f"data/{stem}.parquet"]["sha256"]
    total_docs = total_tokens = 0
    for stem in manifest["prefixes"]:
        split = manifest["shards"][stem]["split"]
        assert stem.startswith(f"{split}-")
        shard = pq.read_table([shards_dir / "data" / f"{s}.parquet" for s in sources[stem]])
        held_out = pc.equal(shard.column("split"), "eval")
        shard = shard.filter(held_out if split == "eval" else pc.invert(held_out))
        sidecar = pq.read_table(encoded_dir / f"{stem}.docs.parquet")
        dataset = IndexedDataset(str(encoded_dir / stem))
        assert len(dataset) == shard.num_rows == sidecar.num_rows
        assert dataset.index.dtype == np.uint16
        assert sidecar.column("doc_index").to_pylist() == list(range(shard.num_rows))
        for tag in ("id", "domain", "lang", "split", "ppl_bucket", "dup_keep"):
            assert sidecar.column(tag).to_pylist() == shard.column(tag).to_pylist()
        texts = shard.column("text").to_pylist()
        for i in range(0, shard.num_rows, 37):
            expected = hf.encode(texts[i], add_special_tokens=False).ids + [locked.eod_id]
            assert dataset[i].tolist() == expected
        assert sidecar.column("num_tokens").to_pylist() == dataset.sequence_lengths.tolist()
        total_docs += shard.num_rows
        total_tokens += int(dataset.sequence_lengths.sum())
    assert manifest["counts"]["documents"] == total_docs
    assert manifest["counts"]["tokens"] == total_tokens
    assert total_docs == pq.read_table(shards_dir / "data").num_rows  # every document, once


def test_resume_skips_finished_shards(
    encoded_dir: Path, tokenizer_dir: Path, shards_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "enc"
    shutil.copytree(encoded_dir, out)
    before = {p.name: sha256_file(p) for p in out.glob("*.bin")}
    (out / "train-00001.bin").unlink()  # as if killed while writing this prefix
    for name in ("retired-00000.bin", "retired-00000.docs.parquet", ".retired-00000.done"):
        (out / name).write_bytes(b"output of a shard the input no longer has")
    args = [
        "tokenizer",
        "encode",
        str(tokenizer_dir),
        "--data",
        str(shards_dir),
        "--out",
        str(out),
        "--no-ray",
        "--min-prefix-documents",
        "200",
    ]
    assert main(args) == 0
    assert load_manifest(out)["counts"]["shards_skipped"] == 2
    assert {p.name: sha256_file(p) for p in out.glob("*.bin")} == before
    assert not list(out.glob("*retired*")) and not list(out.glob(".retired*"))
    assert not any("retired" in name for name in load_manifest(out)["files"])


def test_resume_keeps_finished_prefixes_whose_name_has_a_dot(
    tokenizer_dir: Path, tmp_path: Path
) -> None:
    """Shards of an input named like `c4-train.00000-of-01024.json.gz` are
    `c4-train.00000-of-01024-00000.parquet`: a re-run deleted their finished outputs as those
    of shards no longer in the input (the name was cut at its first dot) and encoded them all
    again."""
    data = write_shards(tmp_path / "shards", make_records(300), docs_per_shard=150, stem="c4.train")
    out = tmp_path / "enc"
    args = ["tokenizer", "encode", str(tokenizer_dir), "--data", str(data), "--out", str(out)]
    args += ["--no-ray", "--min-prefix-documents", "100"]
    assert main(args) == 0
    before = {p.name: sha256_file(p) for p in out.iterdir() if p.is_file()}
    assert load_manifest(out)["prefixes"] == ["train-00000", "train-00001", "eval-00000"]
    assert main(args) == 0
    assert load_manifest(out)["counts"]["shards_skipped"] == 3
    after = {p.name: sha256_file(p) for p in out.iterdir() if p.is_file()}
    assert {k: v for k, v in after.items() if k != "manifest.json"} == {
        k: v for k, v in before.items() if k != "manifest.json"
    }


def test_tampered_shards_are_refused(
    tokenizer_dir: Path, shards_dir: Path, tmp_path: Path, capsys
) -> None:
    copy = tmp_path / "shards"
    shutil.copytree(shards_dir, copy)
    shard = copy / "data" / "synthetic-00000.parquet"
    data = bytearray(shard.read_bytes())
    data[100] ^= 1
    shard.write_bytes(bytes(data))
    code = main(
        [
            "tokenizer",
            "encode",
            str(tokenizer_dir),
            "--data",
            str(copy),
            "--out",
            str(tmp_path / "enc"),
            "--no-ray",
        ]
    )
    assert code == 2
    assert "synthetic-00000.parquet does not match its sha256" in capsys.readouterr().err


def test_missing_stage_columns_become_null_tags(tokenizer_dir: Path, tmp_path: Path) -> None:
    shards = write_shards(tmp_path / "shards", make_records(40), stages=("extract", "langid"))
    out = tmp_path / "enc"
    assert (
        main(
            [
                "tokenizer",
                "encode",
                str(tokenizer_dir),
                "--data",
                str(shards),
                "--out",
                str(out),
                "--no-ray",
            ]
        )
        == 0
    )
    sidecar = pq.read_table(out / "train-00000.docs.parquet")
    assert sidecar.column("domain").null_count == sidecar.num_rows
    assert sidecar.column("lang").null_count == 0


@pytest.mark.timeout(120)
def test_tag_subset_reads_exactly_those_documents_through_gptdataset(
    encoded_dir: Path, tokenizer_dir: Path
) -> None:
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    locked = load_locked(tokenizer_dir)
    stem = "train-00000"
    sidecar = pq.read_table(encoded_dir / f"{stem}.docs.parquet").to_pylist()
    assert {r["split"] for r in sidecar} == {"train"}
    chosen = [r["doc_index"] for r in sidecar if r["domain"] == "code"]
    others = [r["doc_index"] for r in sidecar if r["doc_index"] not in chosen]
    assert chosen and others
    indexed = IndexedDataset(str(encoded_dir / stem))
    config = GPTDatasetConfig(
        random_seed=1,
        sequence_length=128,
        tokenizer=megatron_tokenizer(locked),
        split="1,0,0",
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        path_to_cache=None,
    )
    dataset = GPTDataset(
        indexed,
        str(encoded_dir / stem),
        np.array(chosen, dtype=np.int32),
        None,
        Split.train,
        config,
    )
    assert sorted(set(dataset.document_index.tolist())) == chosen  # one epoch of exactly these
    # Put the shuffled samples back in stream order: consecutive samples are contiguous windows
    # over the chosen documents, concatenated in the dataset's (shuffled) document order.
    order = np.argsort(dataset.shuffle_index)
    stream = np.concatenate([dataset[int(i)]["tokens"].numpy() for i in order])
    expected = np.concatenate([indexed[int(d)] for d in dataset.document_index])
    assert len(stream) > 0.9 * len(expected)
    assert np.array_equal(stream, expected[: len(stream)].astype(np.int64))
    wanted = {tuple(indexed[i].tolist()) for i in chosen}
    unwanted = {tuple(indexed[i].tolist()) for i in others} - wanted
    documents = np.split(stream, np.flatnonzero(stream == locked.eod_id) + 1)[:-1]
    assert len(documents) >= len(chosen) - 1
    assert all(tuple(d.tolist()) in wanted for d in documents)
    assert all(tuple(d.tolist()) not in unwanted for d in documents)


def test_resume_re_encodes_a_bin_with_a_byte_flipped_at_the_same_size(
    encoded_dir: Path, tokenizer_dir: Path, shards_dir: Path, tmp_path: Path
) -> None:
    """Between a kill and the resume a token file changed at the same size (a disk error, a
    stray write): its size still matched the `.done` record, so the resume skipped it and the
    artifact's manifest hashed the wrong tokens in as good. It must be encoded again."""
    out = tmp_path / "enc"
    shutil.copytree(encoded_dir, out)
    before = {p.name: sha256_file(p) for p in out.glob("*.bin")}
    target = out / "train-00001.bin"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    args = ["tokenizer", "encode", str(tokenizer_dir), "--data", str(shards_dir)]
    args += ["--out", str(out), "--no-ray", "--min-prefix-documents", "200"]
    assert main(args) == 0
    assert load_manifest(out)["counts"]["shards_skipped"] == 2
    assert {p.name: sha256_file(p) for p in out.glob("*.bin")} == before
