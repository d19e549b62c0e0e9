"""The saved dedup index (artifact kind `dedup-index`) and queries against it.

Layout: `bands/part-NNNNN.parquet` (band key uint64, vertex int64; a key lives in part key % P),
`exact/part-NNNNN.parquet` (exact key, vertex), `docs/part-NNNNN.parquet` (vertex, id,
dup_cluster, exact_hash, signature, shingle values; a vertex lives in part vertex % P). The
manifest records the settings; a query recomputes signatures with exactly those.

A query reads one partition at a time, so its memory is bounded by the new batch plus one part of
the index, never the whole old corpus. `query` serves both incremental dedup (new crawl vs corpus)
and decontamination (training data vs the eval split's index).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from data_pipeline.dedup.components import distinct_pairs
from data_pipeline.dedup.config import DedupConfig
from data_pipeline.dedup.core import (
    band_rows,
    exact_keys,
    keep_and_size,
    lookup,
    part_of,
    scatter,
    signature_table,
    signatures_of,
    verify_pairs,
)
from pretrain.artifacts import dedup_index as index_kind
from pretrain.artifacts.base import write_artifact
from pretrain.errors import ArtifactError

KIND = index_kind.KIND
_SETTINGS = ("num_perm", "seed", "word_ngram", "char_ngram", "verify", "threshold")
_BUCKET_CAP = 32
"""Old documents considered per shared key: members of one bucket are near-copies of each other."""


class _PartWriters:
    """One Parquet writer per partition of one table kind, opened lazily."""

    def __init__(self, root: Path, name: str, partitions: int) -> None:
        self.directory = root / name
        self.directory.mkdir(parents=True, exist_ok=True)
        self.partitions = partitions
        self.writers: dict[int, pq.ParquetWriter] = {}

    def write(self, table: pa.Table, key: np.ndarray) -> None:
        for part, piece in enumerate(scatter(table, key, self.partitions)):
            if piece.num_rows == 0:
                continue
            if part not in self.writers:
                path = self.directory / f"part-{part:05d}.parquet"
                self.writers[part] = pq.ParquetWriter(path, piece.schema, compression="zstd")
            self.writers[part].write_table(piece)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


def save_index(
    out_dir: str | os.PathLike,
    tables: Iterable[pa.Table],
    config: DedupConfig,
    partitions: int = 8,
) -> dict[str, Any]:
    """Write a `dedup-index` artifact for the documents (id, text, optional lang) of `tables`,
    streamed one at a time, each document its own cluster (its vertex): decontamination
    (evals.sets) reads only the matched id and Jaccard."""
    signed = (signature_table(table, config)[0] for table in tables)
    docs = (sigs.append_column("dup_cluster", sigs.column("vertex")) for sigs in signed)
    return write_index(out_dir, docs, config, partitions)


def write_index(
    out_dir: str | os.PathLike, docs: Iterable[pa.Table], config: DedupConfig, partitions: int = 8
) -> dict[str, Any]:
    """Write a `dedup-index` artifact from signed documents (vertex, id, exact_hash, sig,
    shingles, dup_cluster: the dedup stage's persisted map side and its tags, `index.save_to`,
    or save_index's), streamed one table at a time."""
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    writers = {name: _PartWriters(root, name, partitions) for name in ("bands", "exact", "docs")}
    documents = 0
    try:
        for table in docs:
            keys, vertices = band_rows(table, config)
            writers["bands"].write(pa.table({"key": keys, "vertex": vertices}), keys)
            exact = exact_keys(table.column("exact_hash").to_pylist())
            vertex = np.asarray(table.column("vertex"))
            writers["exact"].write(pa.table({"key": exact, "vertex": vertex}), exact)
            columns = ["vertex", "id", "exact_hash", "sig", "shingles", "dup_cluster"]
            writers["docs"].write(table.select(columns), vertex)
            documents += len(table)
    finally:
        for writer in writers.values():
            writer.close()
    bands, rows = config.band_rows
    settings = {name: getattr(config, name) for name in _SETTINGS}
    fields = index_kind.DedupIndexFields(
        dedup={**settings, "bands": bands, "rows": rows, "partitions": partitions}
    )
    return write_artifact(
        root, fields, config=config.model_dump(mode="json"), counts={"documents": documents}
    )


def index_config(
    index_dir: str | os.PathLike, like: DedupConfig | None = None
) -> tuple[DedupConfig, int]:
    """The settings an index was built with (verified against its manifest) and its partitions;
    refused when `like` is given and has other shingle or permutation settings."""
    info = index_kind.open(index_dir).fields.dedup
    config = DedupConfig(
        **{name: info[name] for name in _SETTINGS if name in info},
        bands=info["bands"],
        rows=info["rows"],
    )
    mismatched = [n for n in _SETTINGS[:4] if like and getattr(config, n) != getattr(like, n)]
    if mismatched:
        raise ArtifactError(
            f"index {index_dir} was built with different {', '.join(mismatched)}; "
            "use the same dedup settings or rebuild the index"
        )
    return config, int(info["partitions"])


def _read_part(index_dir: Path, name: str, part: int) -> pa.Table | None:
    path = index_dir / name / f"part-{part:05d}.parquet"
    return pq.read_table(path) if path.is_file() else None


def _match_keys(new_keys: np.ndarray, new_vertices: np.ndarray, old: pa.Table | None):
    """(new vertex, old vertex) for every key present on both sides (capped per key)."""
    if old is None or len(new_keys) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    old_keys = np.asarray(old.column("key"))
    order = np.argsort(old_keys, kind="stable")
    old_keys, old_vertices = old_keys[order], np.asarray(old.column("vertex"))[order]
    lo = np.searchsorted(old_keys, new_keys, side="left")
    hi = np.minimum(np.searchsorted(old_keys, new_keys, side="right"), lo + _BUCKET_CAP)
    counts = hi - lo
    new_side = np.repeat(new_vertices, counts)
    starts = np.repeat(lo - np.cumsum(counts) + counts, counts)
    old_side = old_vertices[np.arange(counts.sum()) + starts]
    return new_side, old_side


def _candidates(index_dir: Path, sigs: pa.Table, config: DedupConfig, partitions: int):
    """((new, old) near candidates, (new, old) exact ones): the keys of `sigs` found in the
    index's band and exact parts, read one partition at a time."""
    exact = (np.asarray(sigs.column("exact_key")), np.asarray(sigs.column("vertex")))
    found = []
    for name, (keys, vertices) in (("bands", band_rows(sigs, config)), ("exact", exact)):
        parts = part_of(keys, partitions)
        pairs = [
            _match_keys(keys[parts == p], vertices[parts == p], _read_part(index_dir, name, p))
            for p in range(partitions)
        ]
        found.append(tuple(np.concatenate(side) for side in zip(*pairs, strict=True)))
    return found


def query(
    index_dir: str | os.PathLike, table: pa.Table, like: DedupConfig | None = None
) -> pa.Table:
    """Best index match of each document of `table` (id, text, optional lang) at or above the
    index's threshold: table of (id, matched_id, matched_cluster, jaccard), one row per matched
    document, sorted by id. Exact matches (same normalised text) have jaccard 1.0. `like`: the
    settings the index must share (index_config)."""
    index_dir = Path(index_dir)
    config, partitions = index_config(index_dir, like)
    sigs, _ = signature_table(table, config)
    (near_new, near_old), (exact_new, exact_old) = _candidates(index_dir, sigs, config, partitions)
    near_new, near_old = distinct_pairs(near_new, near_old)
    new_v = np.concatenate([near_new, exact_new])
    old_v = np.concatenate([near_old, exact_old])
    pairs = _verified(index_dir, sigs, config, partitions, new_v, old_v, len(exact_new))
    return _best_matches(pairs, sigs)


_MATCH_SCHEMA = pa.schema(
    [
        ("row", pa.int64()),
        ("matched_id", pa.string()),
        ("matched_cluster", pa.int64()),
        ("jaccard", pa.float64()),
    ]
)


def _verified(
    index_dir: Path,
    sigs: pa.Table,
    config: DedupConfig,
    partitions: int,
    new_v: np.ndarray,
    old_v: np.ndarray,
    num_exact: int,
) -> pa.Table:
    """Verify (new, old) candidates against the old documents, read part by part; the last
    `num_exact` are exact copies (same normalised text), kept without verification."""
    all_rows = lookup(sigs, new_v)
    all_exact = np.arange(len(new_v)) >= len(new_v) - num_exact
    signatures = signatures_of(sigs.column("sig"), config.num_perm)
    pieces = [_MATCH_SCHEMA.empty_table()]
    for part in range(partitions):
        mask = part_of(old_v, partitions) == part
        if not mask.any():
            continue
        new_rows, is_exact = all_rows[mask], all_exact[mask]
        docs = pq.read_table(index_dir / "docs" / f"part-{part:05d}.parquet")  # holds old_v
        docs = docs.filter(pc.is_in(docs.column("vertex"), pa.array(np.unique(old_v[mask]))))
        shingles = sigs.column("shingles").take(pa.array(new_rows))
        ok, similarity, at = verify_pairs(signatures[new_rows], shingles, docs, old_v[mask], config)
        similarity = np.where(is_exact, 1.0, similarity)
        ok |= is_exact
        matched = {
            "row": pa.array(new_rows[ok], pa.int64()),
            "matched_id": docs.column("id").take(pa.array(at[ok])).cast(pa.string()),
            "matched_cluster": docs.column("dup_cluster").take(pa.array(at[ok])),
            "jaccard": pa.array(similarity[ok], pa.float64()),
        }
        pieces.append(pa.table(matched, schema=_MATCH_SCHEMA))
    return pa.concat_tables(pieces)


def _best_matches(pairs: pa.Table, sigs: pa.Table) -> pa.Table:
    """Each queried row's best match, by the keep rule: highest Jaccard, then smallest id."""
    rows = np.asarray(pairs.column("row"))
    best, _ = keep_and_size(rows, pairs.column("jaccard"), pairs.column("matched_id"))
    best_pairs = pairs.filter(pa.array(best)).sort_by("row")
    result = pa.table(
        {
            "id": sigs.column("id").take(best_pairs.column("row")),
            "matched_id": best_pairs.column("matched_id"),
            "matched_cluster": best_pairs.column("matched_cluster"),
            "jaccard": best_pairs.column("jaccard"),
        }
    )
    return result.sort_by("id")
