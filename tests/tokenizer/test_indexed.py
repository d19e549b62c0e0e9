"""tokenizer.indexed writes what megatron.core's IndexedDatasetBuilder writes, byte for byte, and
Megatron's IndexedDataset reads it back to the same tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tokenizer.indexed import IndexedWriter

pytestmark = pytest.mark.timeout(120)  # megatron.core's first import: ~5 CPU-s, more under load


def _documents(dtype: type[np.integer], count: int) -> list[list[int]]:
    """`count` documents of 0..40 tokens (an empty one among them) ending in EOD 0, with ids
    near the top of the dtype's range so a narrowed or widened id would show."""
    top = np.iinfo(dtype).max
    rng = np.random.default_rng(count)
    documents = [
        [*rng.integers(top - 70000 if top > 70000 else 1, top, n).tolist(), 0]
        for n in rng.integers(0, 40, count)
    ]
    return documents[:1] + [[]] + documents[1:] if count else []


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
@pytest.mark.parametrize("count", [0, 1, 300])
def test_bytes_equal_megatron_builder(tmp_path: Path, dtype: type[np.integer], count: int) -> None:
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    documents = _documents(dtype, count)
    builder = IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=dtype)
    for document in documents:
        builder.add_document(np.asarray(document, dtype=dtype), [len(document)])
    builder.finalize(str(tmp_path / "theirs.idx"))
    writer = IndexedWriter(tmp_path / "ours", dtype)
    # in uneven batches, as the encode hands them over
    assert writer.add_documents(documents[:2]) == [len(d) for d in documents[:2]]
    writer.add_documents([])
    writer.add_documents(documents[2:])
    writer.finalize()
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (
            tmp_path / f"theirs{suffix}"
        ).read_bytes()


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_megatron_reads_ours(tmp_path: Path, dtype: type[np.integer]) -> None:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    documents = _documents(dtype, 50)
    writer = IndexedWriter(tmp_path / "ours", dtype)
    writer.add_documents(documents)
    writer.finalize()
    dataset = IndexedDataset(str(tmp_path / "ours"))
    assert len(dataset) == len(documents)
    assert dataset.index.dtype == dtype
    assert [dataset[i].tolist() for i in range(len(dataset))] == documents
