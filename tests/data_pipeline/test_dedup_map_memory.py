"""A dedup map task's memory is set by its hash batch (budget.HASH_BATCH_BYTES), not its part;
the map output does not depend on the batches."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow as pa

from data_pipeline.dedup import budget, core, tasks
from data_pipeline.dedup.config import DedupConfig


def _table(text_bytes: int, seed: int = 3) -> tuple[pa.Table, int]:
    """Documents of 200-900 random words (~6 bytes each) until `text_bytes` of text; every
    fifth a near copy of the one before it (so the map has band collisions to emit)."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(20_000)])
    docs: list[str] = []
    total = 0
    while total < text_bytes:
        if docs and len(docs) % 5 == 0:
            words = docs[-1].split()
            words[int(rng.integers(len(words)))] = "edited"
            text = " ".join(words)
        else:
            text = " ".join(rng.choice(vocab, int(rng.integers(200, 900))))
        docs.append(text)
        total += len(text)
    ids = [f"doc-{i:06d}" for i in range(len(docs))]
    return pa.table({"id": ids, "text": docs}), total


def test_hash_batches_bound_documents_and_bytes() -> None:
    texts = pa.array(["a" * 10, "b" * 10, None, "c" * 50, "d" * 5, "e" * 5, "f" * 5])
    assert core.hash_batches(texts, max_docs=100, max_bytes=20) == [0, 3, 4, 7]
    assert core.hash_batches(texts, max_docs=2, max_bytes=1000) == [0, 2, 4, 6, 7]
    assert core.hash_batches(texts, max_docs=100, max_bytes=1) == list(range(8))  # one each
    assert core.hash_batches(pa.array([], pa.string()), 100, 20) == [0, 0]
    assert core.hash_batches(pa.chunked_array([], pa.string()), 10) == [0, 0]


def test_map_output_does_not_depend_on_the_hash_batches(monkeypatch) -> None:
    table, _ = _table(200_000)
    config = DedupConfig()
    whole = tasks.map_tables(table, config)
    monkeypatch.setattr(budget, "HASH_BATCH_BYTES", 3_000)  # ~1 document a batch
    cut = tasks.map_tables(table, config)
    for got, expected in zip(cut[:3], whole[:3]):
        assert got.equals(expected)
    assert cut[3] == whole[3]
    assert whole[0].num_rows > 0 and "shingles" in whole[2].column_names


def test_scatter_map_splits_doc_rows_from_their_signatures() -> None:
    table, _ = _table(60_000)
    bands, exact, docs, info = tasks.map_tables(table, DedupConfig())
    out = tasks.scatter_map(bands, exact, docs, info, 4, 3)
    doc_rows = pa.concat_tables(out[6:9])
    signed = pa.concat_tables(out[9:12])
    assert doc_rows.num_rows == signed.num_rows == table.num_rows
    assert "shingles" not in doc_rows.column_names and "shingles" in signed.column_names
    assert set(doc_rows.column("block").to_pylist()) == {4}


def _traced_peak(table: pa.Table, config: DedupConfig) -> int:
    tracemalloc.start()
    try:
        out = tasks.map_tables(table, config)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out[-1]["documents"] == table.num_rows
    return peak


def test_a_map_task_holds_one_hash_batch_not_its_part() -> None:
    """numpy's and Python's peak allocations during the runner's map of one part
    (`map_tables`, DedupStage.map_part; tracemalloc) for a 6 MB part stay within 1.5 x those
    for a 1 MB part (one batch each at budget.HASH_BATCH_BYTES = 1 MB; the outputs live in
    Arrow's memory). Before bd009bc, a part's documents were hashed as one batch of up to
    2,048 (config.batch_size): the peak grew with the part (~11 x its text: 47 MB for 4 MB)."""
    big, _ = _table(6 << 20)
    small = big.slice(0, big.num_rows // 6)
    config = DedupConfig()
    tasks.map_tables(big.slice(0, 50), config)  # imports and caches outside the measurement
    small_peak, big_peak = _traced_peak(small, config), _traced_peak(big, config)
    assert big_peak < 1.5 * small_peak, (big_peak, small_peak)
