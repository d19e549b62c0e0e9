"""The per-batch pieces of dedup: signatures, band rows, verification, the keep rule.

A document's vertex is a 64-bit hash of its `id`; a cluster is named by its smallest vertex, so
cluster ids do not depend on batching, partitioning or worker count. The kept document of a
cluster is the one with the highest `quality_score` (null counts as lowest), then the smallest id.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from data_pipeline.dedup import budget
from data_pipeline.dedup.config import DedupConfig
from data_pipeline.dedup.minhash import (
    band_keys,
    batch_shingles,
    exact_hashes,
    fold32,
    has_shingles,
    hash_strings,
    jaccard_estimate,
)


@dataclass
class DedupStats:
    """Counts a run reports (and the stage's manifest entry records)."""

    documents: int = 0
    empty: int = 0
    tiny: int = 0
    cjk: int = 0
    exact_duplicates: int = 0
    candidate_pairs: int = 0
    verified_pairs: int = 0
    clusters: int = 0
    dropped: int = 0
    index_matches: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, other: DedupStats) -> None:
        for name in ("documents", "empty", "tiny", "cjk", "candidate_pairs", "verified_pairs"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def part_of(values: np.ndarray, partitions: int) -> np.ndarray:
    """The hash partition of each 64-bit key: key % partitions (as unsigned)."""
    return (np.asarray(values).view(np.uint64) % np.uint64(partitions)).astype(np.int64)


def scatter(table: pa.Table, key: np.ndarray, partitions: int) -> list[pa.Table]:
    """Split `table` into `partitions` pieces by the hash partition of `key`."""
    parts = part_of(key, partitions)
    order = np.argsort(parts, kind="stable")
    bounds = np.searchsorted(parts[order], np.arange(partitions + 1))
    ordered = table.take(pa.array(order))
    return [ordered.slice(bounds[p], bounds[p + 1] - bounds[p]) for p in range(partitions)]


def lookup(docs: pa.Table, vertices: np.ndarray) -> np.ndarray:
    """Row positions in `docs` of `vertices` (all must be present)."""
    doc_vertex = np.asarray(docs.column("vertex"))
    order = np.argsort(doc_vertex, kind="stable")
    return order[np.searchsorted(doc_vertex, vertices, sorter=order)]


def signature_table(table: pa.Table, config: DedupConfig) -> tuple[pa.Table, DedupStats]:
    """Per document: vertex, id, quality, exact_hash, exact_key, signature (fixed-size binary)
    and shingles (the 32-bit shingle values, for exact verification; ~0.7 x the
    text's bytes)."""
    texts = table.column("text")
    langs = table.column("lang") if "lang" in table.column_names else None
    shingles, offsets, counts = batch_shingles(texts, langs, config.word_ngram, config.char_ngram)
    signatures = config.hasher().signatures(shingles, offsets)
    hexes = exact_hashes(texts)
    quality = (
        table.column("quality_score").cast(pa.float32())
        if "quality_score" in table.column_names
        else pa.nulls(len(table), pa.float32())
    )
    width = signatures.shape[1] * 4
    sig_array = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(table), [None, pa.py_buffer(signatures.tobytes())]
    )
    result = pa.table(
        {
            "vertex": hash_strings(table.column("id")).view(np.int64),
            "id": table.column("id").cast(pa.string()),
            "quality": quality,
            "exact_hash": pa.array(hexes, pa.string()),
            "exact_key": exact_keys(hexes),
            "sig": sig_array,
            "shingles": pa.ListArray.from_arrays(
                pa.array(offsets, pa.int32()), pa.array(fold32(shingles))
            ),
        }
    )
    return result, DedupStats(documents=len(table), **counts)


def exact_keys(exact_hashes: list[str]) -> np.ndarray:
    """The 64-bit key of each exact hash (its first 16 hex digits): what exact copies share."""
    return np.array([int(h[:16], 16) for h in exact_hashes], dtype=np.uint64)


def hash_batches(
    texts: pa.ChunkedArray | pa.Array, max_docs: int, max_bytes: int | None = None
) -> list[int]:
    """Row bounds [0, ..., rows] of batches of at most `max_docs` documents and `max_bytes` of
    text (a longer document is a batch of its own): shingling and hashing a batch holds ~15
    times its text in temporaries (tokens, n-gram terms, 2,048 x 128 hash blocks, normalised
    copies), so bounding the batch by bytes bounds a map task whatever its part's size.
    `max_bytes` defaults to budget.HASH_BATCH_BYTES."""
    max_bytes = budget.HASH_BATCH_BYTES if max_bytes is None else max_bytes
    lengths = pc.fill_null(pc.binary_length(texts), 0)
    ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
    total = len(ends)
    bounds, lo = [0], 0
    while lo < total:
        before = int(ends[lo - 1]) if lo else 0
        fits = int(np.searchsorted(ends, before + max_bytes, side="right"))
        lo = max(lo + 1, min(lo + max_docs, fits))
        bounds.append(lo)
    return bounds if total else [0, 0]


def signatures_of(sig_column: pa.Array | pa.ChunkedArray, num_perm: int) -> np.ndarray:
    """(rows, num_perm) uint32 view of a fixed-size binary signature column."""
    if isinstance(sig_column, pa.ChunkedArray):
        sig_column = sig_column.combine_chunks()
    if len(sig_column) == 0:
        return np.zeros((0, num_perm), dtype=np.uint32)
    data = np.frombuffer(sig_column.buffers()[1], dtype=np.uint32)
    start = sig_column.offset * num_perm
    return data[start : start + len(sig_column) * num_perm].reshape(-1, num_perm)


def band_rows(sigs: pa.Table, config: DedupConfig) -> tuple[np.ndarray, np.ndarray]:
    """(band key, vertex) for every band of every document that has shingles."""
    bands, rows = config.band_rows
    signatures = signatures_of(sigs.column("sig"), config.num_perm)
    mask = has_shingles(signatures)
    signatures = signatures[mask]
    keys = band_keys(signatures, bands, rows)
    vertices = np.asarray(sigs.column("vertex"))[mask]
    return keys.ravel(), np.repeat(vertices, bands)


_SURE_ABOVE = 0.12
_SURE_BELOW = 0.15
"""Estimate margins outside which exact verification is skipped: with 128 permutations the
estimate's standard deviation is at most 0.044, so these are about 3-4 standard deviations."""


def _list_parts(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return np.asarray(column.values), np.asarray(column.offsets, dtype=np.int64)


def exact_jaccard(shingles_u: pa.Array, shingles_v: pa.Array) -> np.ndarray:
    """Jaccard of the shingle sets of each pair, vectorised: values are tagged with their pair
    (pair << 32 | value), made unique per side, and shared tags counted after one sort."""
    values_u, offsets_u = _list_parts(shingles_u)
    values_v, offsets_v = _list_parts(shingles_v)
    pairs = len(offsets_u) - 1
    out = np.zeros(pairs)
    step = 4096
    for lo in range(0, pairs, step):
        hi = min(pairs, lo + step)
        tagged_u = _tagged_unique(values_u, offsets_u[lo : hi + 1])
        tagged_v = _tagged_unique(values_v, offsets_v[lo : hi + 1])
        size_u = np.bincount((tagged_u >> np.uint64(32)).astype(np.int64), minlength=hi - lo)
        size_v = np.bincount((tagged_v >> np.uint64(32)).astype(np.int64), minlength=hi - lo)
        both = np.sort(np.concatenate([tagged_u, tagged_v]))
        shared = both[1:][both[1:] == both[:-1]]
        inter = np.bincount((shared >> np.uint64(32)).astype(np.int64), minlength=hi - lo)
        union = size_u + size_v - inter
        out[lo:hi] = np.divide(inter, union, out=np.zeros(hi - lo), where=union > 0)
    return out


def _tagged_unique(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Unique (pair << 32 | value) of the lists between consecutive `offsets`."""
    counts = np.diff(offsets)
    pair = np.repeat(np.arange(len(counts), dtype=np.uint64), counts)
    index = np.repeat(offsets[:-1] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    tagged = np.sort((pair << np.uint64(32)) | values[index].astype(np.uint64))
    first = np.ones(len(tagged), dtype=bool)
    first[1:] = tagged[1:] != tagged[:-1]
    return tagged[first]  # sort-based: numpy 2's hash-based np.unique is slower here


def verify_pairs(
    sig_u: np.ndarray,
    shingles_u: pa.Array | pa.ChunkedArray,
    docs: pa.Table,
    v: np.ndarray,
    config: DedupConfig,
) -> tuple[np.ndarray, ...]:
    """(kept mask, similarity, v's rows in `docs`) of candidate pairs (u, v), by `config.verify`
    (see DedupConfig): u's signatures and shingles given, v's signed rows in `docs`."""
    at = lookup(docs, v)
    sig_v = signatures_of(docs.column("sig"), config.num_perm)[at]
    shingles_v = docs.column("shingles").take(pa.array(at))
    similarity = jaccard_estimate(sig_u, sig_v) if len(sig_u) else np.zeros(0)
    if config.verify == "exact" and len(similarity):
        checked = np.flatnonzero(
            (similarity < config.threshold + _SURE_ABOVE)
            & (similarity > config.threshold - _SURE_BELOW)
        )
        if len(checked):
            index = pa.array(checked)
            similarity[checked] = exact_jaccard(shingles_u.take(index), shingles_v.take(index))
    return similarity >= config.threshold, similarity, at


def keep_and_size(cluster: np.ndarray, quality: pa.Array, ids: pa.Array) -> tuple[np.ndarray, ...]:
    """(dup_keep, dup_cluster_size) per row: one kept per cluster by (quality desc, id asc).
    Also the query's best match: the cluster is the queried row, the quality its Jaccard."""
    q = pc.fill_null(quality.cast(pa.float64()), float("-inf"))
    q = pc.if_else(pc.is_nan(q), float("-inf"), q)
    order = pc.sort_indices(
        pa.table({"c": cluster, "q": q, "id": ids}),
        sort_keys=[("c", "ascending"), ("q", "descending"), ("id", "ascending")],
    ).to_numpy()
    sorted_cluster = cluster[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = sorted_cluster[1:] != sorted_cluster[:-1]
    keep = np.empty(len(order), dtype=bool)
    keep[order] = first
    _, inverse, sizes = np.unique(cluster, return_inverse=True, return_counts=True)
    return keep, sizes[inverse].astype(np.int32)
