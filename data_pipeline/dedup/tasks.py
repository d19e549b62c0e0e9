"""The per-partition steps of distributed dedup, as plain functions over Arrow tables / numpy.

Each runs inside one Ray task (data_pipeline.dedup.aggregate) and sees one input part or one
hash partition, never the whole corpus. Partition of a 64-bit key: key % partitions (as unsigned).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from data_pipeline.dedup import budget, components, exchange
from data_pipeline.dedup.config import DEDUP_COLUMNS, DUPLICATE, EARLIER_CORPUS, DedupConfig
from data_pipeline.dedup.core import (
    DedupStats,
    band_rows,
    hash_batches,
    keep_and_size,
    lookup,
    scatter,
    signature_table,
    signatures_of,
    verify_pairs,
)
from data_pipeline.stage_types import append_columns

EDGE_SCHEMA = pa.schema([("u", pa.int64()), ("v", pa.int64())])
TAGS_SCHEMA = pa.schema([("block", pa.int64()), ("row", pa.int64()), *DEDUP_COLUMNS])
"""keep_clusters' output: a document's part and row, then its dedup columns."""


def edges_table(u: np.ndarray, v: np.ndarray) -> pa.Table:
    return pa.table({"u": pa.array(u, pa.int64()), "v": pa.array(v, pa.int64())})


def concat(pieces: Any, schema: pa.Schema | None = None) -> pa.Table:
    """The rows of `pieces` (an exchange.Gather, a table, or a sequence of them); when none has
    rows, an empty table that keeps their columns (a partition that received no document still
    has the columns the next step reads)."""
    items = pieces if isinstance(pieces, list | tuple) else [pieces]
    tables = [t for p in items for t in (p.read() if isinstance(p, exchange.Gather) else [p])]
    filled = [t for t in tables if t.num_rows]
    if filled:
        return pa.concat_tables(filled)
    typed = next((t for t in tables if t.num_columns), None)
    if typed is not None:
        return typed.slice(0, 0)
    return schema.empty_table() if schema is not None else pa.table({})


def map_tables(
    block: pa.Table, config: DedupConfig
) -> tuple[pa.Table, pa.Table, pa.Table, dict[str, Any]]:
    """Signatures of one input part -> (band rows, exact rows, doc rows, stats): the map side of
    dedup, which depends on the rows alone (the runner persists it per input part). Hashed in
    batches (core.hash_batches), so a map task's temporaries are set by the batch, not its part."""
    sigs, stats = _signatures_in_batches(block, config)
    keys, key_vertices = band_rows(sigs, config) if config.near else (np.zeros(0, np.uint64),) * 2
    bands = pa.table(
        {"key": pa.array(keys, pa.uint64()), "vertex": pa.array(key_vertices, pa.int64())}
    )
    vertex = np.asarray(sigs.column("vertex"))
    exact_key = np.asarray(sigs.column("exact_key"))
    if not config.exact:
        exact_key = np.zeros(0, np.uint64)
    exact = pa.table({"key": pa.array(exact_key, pa.uint64()), "vertex": vertex[: len(exact_key)]})
    matched, matched_id = pa.nulls(len(block), pa.int64()), pa.nulls(len(block), pa.string())
    if config.index.against:
        matched, matched_id = _index_matches(block, sigs, config)
    docs = pa.table(
        {
            "vertex": vertex,
            "id": sigs.column("id"),
            "exact_hash": sigs.column("exact_hash"),
            "quality": sigs.column("quality"),
            "row": pa.array(np.arange(len(block)), pa.int64()),
            "sig": sigs.column("sig"),
            "shingles": sigs.column("shingles"),
            "matched_cluster": matched,
            "matched_id": matched_id,
        }
    )
    info = {**stats.as_dict(), "index_matches": int(pc.sum(pc.is_valid(matched)).as_py() or 0)}
    return bands, exact, docs, info


def scatter_map(
    bands: pa.Table,
    exact: pa.Table,
    docs: pa.Table,
    info: dict[str, Any],
    block_index: int,
    partitions: int,
) -> list:
    """The map output of part `block_index`, each table split into `partitions` (band and exact
    rows by key, doc rows by vertex; doc rows gain `block`), plus stats. Signatures and shingles
    travel apart, in signed rows: they are deleted once the candidates are verified."""
    block = pa.array(np.full(docs.num_rows, block_index), pa.int64())
    docs = docs.add_column(docs.schema.get_field_index("row"), "block", block)
    vertex = docs.column("vertex").to_numpy()
    signed = docs.select(["vertex", "sig", "shingles"])
    return [
        *scatter(bands, bands.column("key").to_numpy(), partitions),
        *scatter(exact, exact.column("key").to_numpy(), partitions),
        *scatter(docs.drop_columns(["sig", "shingles"]), vertex, partitions),
        *scatter(signed, vertex, partitions),
        info,
    ]


def load_map_part(
    files: dict[str, str], info: dict[str, Any], block_index: int, partitions: int
) -> list:
    """scatter_map of one input part's persisted map output (DedupStage.map_part)."""
    import pyarrow.parquet as pq

    tables = {name: pq.read_table(path) for name, path in files.items()}
    return scatter_map(
        tables["bands"], tables["exact"], tables["docs"], dict(info), block_index, partitions
    )


def _signatures_in_batches(block: pa.Table, config: DedupConfig) -> tuple[pa.Table, DedupStats]:
    tables, stats = [], DedupStats()
    bounds = hash_batches(block.column("text"), config.batch_size, budget.HASH_BATCH_BYTES)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        sigs, batch_stats = signature_table(block.slice(lo, hi - lo), config)
        tables.append(sigs)
        stats.add(batch_stats)
    return pa.concat_tables(tables), stats


def _index_matches(
    block: pa.Table, sigs: pa.Table, config: DedupConfig
) -> tuple[pa.Array, pa.Array]:
    """Per row: the cluster and the id of the indexed (earlier corpus's) document it copies."""
    from data_pipeline.dedup.index import query

    matches = query(config.index.against, block, like=config)
    if not len(matches):
        return pa.nulls(len(block), pa.int64()), pa.nulls(len(block), pa.string())
    rows = pc.index_in(sigs.column("id"), value_set=matches.column("id"))
    return (
        matches.column("matched_cluster").take(rows).combine_chunks(),
        matches.column("matched_id").take(rows).combine_chunks(),
    )


def bucket_edges(config: DedupConfig, partitions: int, bands: Any, exact: Any) -> list:
    """One key partition: candidate pairs of the band buckets (split by u for verification) and
    the exact-duplicate edges (no verification needed: into the first star step)."""
    bands, exact = concat(bands), concat(exact)
    near_u = near_v = exact_u = exact_v = np.zeros(0, np.int64)
    if bands.num_rows:
        near_u, near_v = components.candidate_edges(
            np.asarray(bands.column("key")), np.asarray(bands.column("vertex"))
        )
    if exact.num_rows:
        exact_u, exact_v = components.candidate_edges(
            np.asarray(exact.column("key")), np.asarray(exact.column("vertex")), small_bucket=1
        )
    keys = np.asarray(exact.column("key")) if exact.num_rows else np.zeros(0, np.uint64)
    return [
        *scatter(edges_table(near_u, near_v), near_u, partitions),
        *star_pieces("large", exact_u, exact_v, partitions),
        {"exact_duplicates": len(keys) - len(np.unique(keys))},
    ]


# Verification: a candidate pair (u, v) first joins u's signed row (signature and shingles) in
# u's vertex partition (`attach_u`), then v's in v's (`verify_v`), which keeps the pairs
# core.verify_pairs keeps.


def attach_u(config: DedupConfig, partitions: int, cands: Any, docs: Any) -> list:
    """Vertex partition q: give each candidate (u, v) with u in q the signed row of u (every
    column but the vertex, suffixed `_u`), split by v."""
    cands, docs = concat(cands, EDGE_SCHEMA), concat(docs)
    if cands.num_rows:  # a pair can collide in several bands that live in different partitions
        u, v = components.unique_edges(np.asarray(cands.column("u")), np.asarray(cands.column("v")))
        cands = edges_table(u, v)
    u = np.asarray(cands.column("u"))
    at = pa.array(lookup(docs, u), pa.int64())
    table = cands
    for name in docs.column_names:
        if name != "vertex":
            table = table.append_column(f"{name}_u", docs.column(name).take(at))
    return [
        *scatter(table, np.asarray(cands.column("v")), partitions),
        {"candidate_pairs": len(u)},
    ]


def verify_v(config: DedupConfig, partitions: int, cands: Any, docs: Any) -> list:
    """Vertex partition q: verify candidates (u, v) with v in q from the shingles in the signed
    rows (or by the signature alone, `verify: signature`); the kept edges, into the first star
    step."""
    cands, docs = concat(cands), concat(docs)
    u = v = np.zeros(0, np.int64)
    ok = np.zeros(0, bool)
    if cands.num_rows:
        u, v = np.asarray(cands.column("u")), np.asarray(cands.column("v"))
        sig_u = signatures_of(cands.column("sig_u"), config.num_perm)
        ok, _, _ = verify_pairs(sig_u, cands.column("shingles_u"), docs, v, config)
    return [*star_pieces("large", u[ok], v[ok], partitions), {"verified_pairs": int(ok.sum())}]


def star_pieces(kind: str, a: np.ndarray, b: np.ndarray, partitions: int) -> list[pa.Table]:
    """Edges (a, b) oriented for a `large` or `small` star step and split by key; `roots`: the
    (vertex, root) edges as they are, split by vertex for the labels."""
    key, nbr = a, b
    if kind != "roots":
        orient = components.orient_large if kind == "large" else components.orient_small
        key, nbr = orient(a, b)
    return scatter(edges_table(key, nbr), key, partitions)


def star(kind: str, then: str, partitions: int, *pieces: Any) -> list:
    """One key partition of a `kind` star step: its new edges, oriented for the step `then`
    (star_pieces), and the fingerprint of its input edge set."""
    table = concat(pieces, EDGE_SCHEMA)
    key, nbr = np.asarray(table.column("u")), np.asarray(table.column("v"))
    fingerprint = components.edge_fingerprint(key, nbr) if kind == "small" else (0, 0)
    step = components.large_star if kind == "large" else components.small_star
    return [*star_pieces(then, *step(key, nbr), partitions), {"fingerprint": fingerprint}]


def label_docs(partitions: int, roots: Any, docs: Any) -> list:
    """Vertex partition q: each document's cluster root (itself when in no edge), split by root."""
    roots, docs = concat(roots, EDGE_SCHEMA), concat(docs)
    vertex = np.asarray(docs.column("vertex"))
    root = vertex.copy()
    if roots.num_rows:
        at = lookup(docs, np.asarray(roots.column("u")))
        np.minimum.at(root, at, np.asarray(roots.column("v")))
    docs = docs.append_column("cluster", pa.array(root, pa.int64()))
    return [*scatter(docs, root, partitions), {}]


def keep_clusters(partitions: int, labelled: Any) -> list:
    """Root partition: dup_keep and dup_cluster_size per document; clusters that match the index
    are dropped whole and take the matched cluster's id. Split by block for the join back."""
    docs = concat(labelled)
    if not docs.num_rows:
        empty = TAGS_SCHEMA.empty_table()
        return [*(empty for _ in range(partitions)), {}]
    cluster = np.asarray(docs.column("cluster"))
    keep, size = keep_and_size(cluster, docs.column("quality"), docs.column("id"))
    earlier = _apply_index_matches(cluster, docs.column("matched_cluster"), docs["matched_id"])
    cluster, copies_of = earlier
    in_earlier = np.asarray(pc.is_valid(copies_of))
    keep = np.where(in_earlier, False, keep)
    size = size + in_earlier  # the earlier corpus's document is in its cluster too
    reason = [
        EARLIER_CORPUS if earlier else (None if kept else DUPLICATE)
        for earlier, kept in zip(in_earlier.tolist(), keep.tolist(), strict=True)
    ]
    tags = pa.table(
        {
            "block": docs.column("block"),
            "row": docs.column("row"),
            "exact_hash": docs.column("exact_hash"),
            "dup_cluster": pa.array(cluster, pa.int64()),
            "dup_keep": keep,
            "dup_cluster_size": pa.array(size, pa.int32()),
            "dup_of": copies_of,
            "dedup_reason": pa.array(reason, pa.string()),
        },
        schema=TAGS_SCHEMA,
    )
    clusters = int(((size > 1) & keep).sum())
    return [
        *scatter(tags, np.asarray(docs.column("block")), partitions),
        {"clusters": clusters, "dropped": int((~keep).sum())},
    ]


def _apply_index_matches(
    cluster: np.ndarray, matched: pa.ChunkedArray, matched_id: pa.ChunkedArray
) -> tuple[np.ndarray, pa.Array]:
    """A cluster with a member that matched the index joins the matched cluster (the smallest
    when several): (each document's cluster, the id of the indexed document it copies or null).
    A member that matched nothing itself copies the document its cluster's match points at."""
    none = pa.nulls(len(cluster), pa.string())
    if matched.null_count == len(matched):
        return cluster, none
    matched = np.asarray(pc.fill_null(matched, np.iinfo(np.int64).max))
    ids = matched_id.to_pylist()
    hit = np.flatnonzero(matched != np.iinfo(np.int64).max)
    target: dict[int, tuple[int, str]] = {}
    for row in hit.tolist():
        found = (int(matched[row]), ids[row])
        target[int(cluster[row])] = min(found, target.get(int(cluster[row]), found))
    joined = np.isin(cluster, np.array(list(target), dtype=np.int64))
    copies_of: list[str | None] = [None] * len(cluster)
    cluster = cluster.copy()
    for row in np.flatnonzero(joined).tolist():
        root, first_id = target[int(cluster[row])]
        copies_of[row] = ids[row] if ids[row] is not None else first_id
        cluster[row] = root
    return cluster, pa.array(copies_of, pa.string())


def attach(block: pa.Table, block_index: int, *pieces: pa.Table) -> pa.Table:
    """Join the tags of part `block_index` back by row and append the dedup columns (the exact
    hash travels with the tags: the text is normalised and hashed once, in the map step)."""
    tags = concat(pieces)
    tags = tags.filter(pc.equal(tags.column("block"), block_index)).sort_by("row")
    assert tags.num_rows == block.num_rows, (tags.num_rows, block.num_rows)
    columns = {field.name: tags.column(field.name) for field in DEDUP_COLUMNS}
    return append_columns(block, DEDUP_COLUMNS, columns)
