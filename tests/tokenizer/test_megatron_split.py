"""Megatron's own dataset builder over our encoded prefixes with a standard split: every split of
every prefix has documents, so BlendedMegatronDatasetBuilder builds train/valid/test on CPU; and
the training prefixes, handed to that builder as a Megatron-LM user would, hold no eval document.

The shards end in a 4-document tail, as a pipeline's last part of an input does. Encoded one
prefix per shard, that tail leaves its 1% splits empty and the builder fails (shown below);
packed (tokenizer.prefixes), it builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from pretrain.manifest import load_manifest
from tests.tokenizer.synthetic import write_shards
from tests.tokenizer.tok_helpers import make_records, megatron_tokenizer
from tokenizer.encode import encode
from tokenizer.lock import load_locked

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def tail_shards(tmp_path_factory) -> Path:
    # 500 documents + 4 edge cases in shards of 100: five of 100 and a 4-document tail
    return write_shards(
        tmp_path_factory.mktemp("tail") / "shards", make_records(500), docs_per_shard=100
    )


def _config(
    tokenizer_dir: Path, prefixes: list[str], weights: list[float] | None, split: str = "98,1,1"
):
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    return GPTDatasetConfig(
        random_seed=1234,
        sequence_length=64,
        tokenizer=megatron_tokenizer(load_locked(tokenizer_dir)),
        blend=(prefixes, weights),
        split=split,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        path_to_cache=None,
        mid_level_dataset_surplus=0.005,
    )


def _build(
    tokenizer_dir: Path,
    encoded: Path,
    sizes: list[int | None],
    weighted: bool,
    split: str = "98,1,1",
):
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset

    manifest = load_manifest(encoded)
    stems = [p for p in manifest["prefixes"] if manifest["shards"][p]["split"] == "train"]
    prefixes = [str(encoded / p) for p in stems]
    weights = [float(manifest["shards"][p]["tokens"]) for p in stems]
    config = _config(tokenizer_dir, prefixes, weights if weighted else None, split)
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()


def test_98_1_1_builds_every_split_from_our_prefixes(
    tail_shards: Path, tokenizer_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "enc"
    encode(tokenizer_dir, tail_shards, out, backend="inline", min_prefix_documents=180)
    manifest = load_manifest(out)
    assert manifest["prefixes"] == ["train-00000", "train-00001", "eval-00000"]
    assert list(manifest["shards"]["train-00001"]["sources"]) == [
        "synthetic-00002",
        "synthetic-00003",
        "synthetic-00004",
        "synthetic-00005",
    ]
    exhaustive = _build(tokenizer_dir, out, [None, None, None], weighted=False)
    assert all(d is not None and len(d) > 0 for d in exhaustive)
    sized = _build(tokenizer_dir, out, [400, 20, 20], weighted=True)  # as a training run asks
    assert all(len(d) >= n for d, n in zip(sized, [400, 20, 20], strict=True))
    assert all(len(d[0]["tokens"]) == 64 for d in sized)
    # per prefix, the test split's documents are its last ones and none of train's
    for train, test in zip(exhaustive[0].datasets, exhaustive[2].datasets, strict=True):
        assert train.dataset_path == test.dataset_path
        assert not set(train.document_index.tolist()) & set(test.document_index.tolist())


def test_one_prefix_per_shard_leaves_a_split_empty_and_megatron_refuses(
    tail_shards: Path, tokenizer_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "per-shard"
    encode(tokenizer_dir, tail_shards, out, backend="inline", min_prefix_documents=1)
    assert load_manifest(out)["shards"]["train-00005"]["documents"] <= 4
    with pytest.raises(AssertionError):  # a zero-weight (empty) split of the 4-document prefix
        _build(tokenizer_dir, out, [None, None, None], weighted=False)


def test_megatron_builder_over_the_training_prefixes_reads_no_eval_document(
    tail_shards: Path, tokenizer_dir: Path, tmp_path: Path
) -> None:
    """Issue 33.1: what `pretrain_gpt.py --data-path <train prefixes>` reads. Megatron's builder
    (split 100,0,0: every document of every training prefix) picks the documents; their ids (the
    sidecar's row for each Megatron document index) hold no `split == eval` id of the shards, and
    the eval prefix holds exactly those."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out = tmp_path / "enc"
    encode(tokenizer_dir, tail_shards, out, backend="inline", min_prefix_documents=180)
    shards = pq.read_table(tail_shards / "data", columns=["id", "split"])
    held_out = set(shards.filter(pc.equal(shards["split"], "eval"))["id"].to_pylist())
    assert held_out
    train = _build(tokenizer_dir, out, [None, None, None], weighted=False, split="100,0,0")[0]
    seen: set[str] = set()
    for dataset in train.datasets:
        ids = pq.read_table(f"{dataset.dataset_path}.docs.parquet")["id"].to_pylist()
        assert len(ids) == len(dataset.dataset)  # the sidecar describes that .bin's documents
        seen |= {ids[int(i)] for i in dataset.document_index}
    assert not seen & held_out
    assert seen | held_out == set(shards["id"].to_pylist())  # the rest is all there, once
    eval_ids = pq.read_table(out / "eval-00000.docs.parquet")["id"].to_pylist()
    assert set(eval_ids) == held_out and len(eval_ids) == len(held_out)
