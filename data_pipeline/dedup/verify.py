"""The verification steps of distributed dedup, as plain functions over Arrow tables (one Ray
task each, data_pipeline.dedup.aggregate runs them).

A candidate pair (u, v) first joins u's signed row in u's vertex partition (`attach_u`), then
v's in v's (`verify_v`). Signed rows carry either the shingles (the runner's path: its map side
is persisted with them, on disk) or, on `DedupStage.apply`'s path, where every step's pieces sit
in the object store, only the signature and the document's place (slice, row): a document's
shingles (about 2.6 times its signature) are then recomputed from its text, which the input
blocks hold anyway, for the pairs whose estimate is too close to the threshold to decide
(`verify_sure` -> `shingle_rows` per slice -> `verify_exact`). The kept pairs are the same
either way (core.verify_pairs's rule, split in two).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from data_pipeline.dedup.config import DedupConfig
from data_pipeline.dedup.core import (
    exact_jaccard,
    shingle_lists,
    signatures_of,
    unsure,
    verify_pairs,
)
from data_pipeline.dedup.minhash import jaccard_estimate
from data_pipeline.dedup.tasks import EDGE_SCHEMA, concat, edges_table, lookup, peak_rss_mb, scatter

REQUEST_SCHEMA = pa.schema(
    [("block", pa.int64()), ("row", pa.int64()), ("vertex", pa.int64()), ("dest", pa.int64())]
)
"""A document whose shingles partition `dest` needs: its slice (`block`) and row there."""
SHINGLES_SCHEMA = pa.schema(
    [("vertex", pa.int64()), ("dest", pa.int64()), ("shingles", pa.list_(pa.uint32()))]
)
PENDING_SCHEMA = pa.schema([("u", pa.int64()), ("v", pa.int64())])


def _no_edges() -> pa.Table:
    return edges_table(np.zeros(0, np.int64), np.zeros(0, np.int64))


def attach_u(config: DedupConfig, partitions: int, num_cands: int, *pieces: pa.Table) -> list:
    """Vertex partition q: give each candidate (u, v) with u in q the signed row of u (every
    column but the vertex, suffixed `_u`), split by v."""
    from data_pipeline.dedup.lsh import unique_edges

    cands = concat(pieces[:num_cands], EDGE_SCHEMA)
    docs = concat(pieces[num_cands:])
    if cands.num_rows:  # a pair can collide in several bands that live in different partitions
        u, v, _ = unique_edges(np.asarray(cands.column("u")), np.asarray(cands.column("v")))
        cands = edges_table(u, v)
    u = np.asarray(cands.column("u"))
    at = pa.array(lookup(docs, u), pa.int64())
    table = cands
    for name in docs.column_names:
        if name != "vertex":
            table = table.append_column(f"{name}_u", docs.column(name).take(at))
    return [
        *scatter(table, np.asarray(cands.column("v")), partitions),
        {"candidate_pairs": len(u), "peak_rss_mb": peak_rss_mb()},
    ]


def verify_v(config: DedupConfig, num_cands: int, *pieces: pa.Table) -> list:
    """Vertex partition q: verify candidates (u, v) with v in q from the shingles in the signed
    rows (or by the signature alone, `verify: signature`); returns the kept edges."""
    cands = concat(pieces[:num_cands])
    docs = concat(pieces[num_cands:])
    if not cands.num_rows:
        return [_no_edges(), {"verified_pairs": 0, "peak_rss_mb": peak_rss_mb()}]
    v = np.asarray(cands.column("v"))
    at = lookup(docs, v)
    sig_v = signatures_of(docs.column("sig"), config.num_perm)[at]
    sig_u = signatures_of(cands.column("sig_u"), config.num_perm)
    if "shingles" in docs.column_names:
        shingles_u, shingles_v = cands.column("shingles_u"), docs.column("shingles").take(at)
    else:
        assert config.verify == "signature", "exact verification without shingles: verify_sure"
        shingles_u = shingles_v = None
    ok, _ = verify_pairs(sig_u, sig_v, shingles_u, shingles_v, config)
    u = np.asarray(cands.column("u"))
    return [
        edges_table(u[ok], v[ok]),
        {"verified_pairs": int(ok.sum()), "peak_rss_mb": peak_rss_mb()},
    ]


def verify_sure(
    config: DedupConfig, partitions: int, q: int, num_cands: int, *pieces: pa.Table
) -> list:
    """Vertex partition q, signed rows without shingles: decide the candidates (u, v) with v in q
    whose estimate is clear of the threshold (core.unsure); the others are pending. Returns the
    requests for the pending pairs' documents (each once, with its slice and row, `dest` = q)
    split by slice partition, then the kept edges, the pending pairs and the stats."""
    cands = concat(pieces[:num_cands])
    docs = concat(pieces[num_cands:])
    u = np.asarray(cands.column("u")) if cands.num_rows else np.zeros(0, np.int64)
    v = np.asarray(cands.column("v")) if cands.num_rows else np.zeros(0, np.int64)
    at = lookup(docs, v)
    sig_v = signatures_of(docs.column("sig"), config.num_perm)[at]
    sig_u = signatures_of(cands.column("sig_u"), config.num_perm) if len(u) else sig_v
    similarity = jaccard_estimate(sig_u, sig_v) if len(u) else np.zeros(0)
    checked = unsure(similarity, config)
    sure = np.ones(len(u), dtype=bool)
    sure[checked] = False
    ok = sure & (similarity >= config.threshold)
    pending_u, pending_v = u[checked], v[checked]
    rows_u = cands.select(["block_u", "row_u"]).take(pa.array(checked, pa.int64()))
    rows_v = docs.select(["block", "row"]).take(pa.array(at[checked], pa.int64()))
    requests = pa.table(
        {
            "block": pa.concat_arrays(
                [rows_u.column(0).combine_chunks(), rows_v.column(0).combine_chunks()]
            ).cast(pa.int64()),
            "row": pa.concat_arrays(
                [rows_u.column(1).combine_chunks(), rows_v.column(1).combine_chunks()]
            ).cast(pa.int64()),
            "vertex": pa.array(np.concatenate([pending_u, pending_v]), pa.int64()),
            "dest": pa.array(np.full(2 * len(checked), q), pa.int64()),
        },
        schema=REQUEST_SCHEMA,
    )
    _, first = np.unique(np.asarray(requests.column("vertex")), return_index=True)
    requests = requests.take(pa.array(np.sort(first), pa.int64()))
    return [
        *scatter(requests, np.asarray(requests.column("block")), partitions),
        edges_table(u[ok], v[ok]),
        edges_table(pending_u, pending_v),
        {"verified_pairs": int(ok.sum()), "peak_rss_mb": peak_rss_mb()},
    ]


def shingle_rows(
    block: pa.Table,
    slice_index: int,
    first: int,
    rows: int,
    config: DedupConfig,
    partitions: int,
    *pieces: pa.Table,
) -> list:
    """Slice `slice_index` (`rows` rows of `block` from `first`): the shingles of the rows the
    requests in `pieces` name (core.shingle_lists: the map step's lists), split by `dest`."""
    requests = concat(pieces, REQUEST_SCHEMA)
    requests = requests.filter(pc.equal(requests.column("block"), slice_index))
    wanted, inverse = np.unique(np.asarray(requests.column("row")), return_inverse=True)
    texts = block.slice(first, rows).take(pa.array(wanted, pa.int64()))
    lists = shingle_lists(texts, config) if len(wanted) else pa.array([], pa.list_(pa.uint32()))
    table = pa.table(
        {
            "vertex": requests.column("vertex"),
            "dest": requests.column("dest"),
            "shingles": lists.take(pa.array(inverse.ravel(), pa.int64())),
        },
        schema=SHINGLES_SCHEMA,
    )
    return [
        *scatter(table, np.asarray(table.column("dest")), partitions),
        {"peak_rss_mb": peak_rss_mb()},
    ]


def verify_exact(config: DedupConfig, pending: pa.Table, *pieces: pa.Table) -> list:
    """Vertex partition q: the pending pairs' exact Jaccard, from the shingles every slice sent
    for q; returns the kept edges."""
    if not pending.num_rows:
        return [_no_edges(), {"verified_pairs": 0, "peak_rss_mb": peak_rss_mb()}]
    shingles = concat(pieces, SHINGLES_SCHEMA)
    u, v = np.asarray(pending.column("u")), np.asarray(pending.column("v"))
    lists = shingles.column("shingles")
    similarity = exact_jaccard(
        lists.take(pa.array(lookup(shingles, u))), lists.take(pa.array(lookup(shingles, v)))
    )
    ok = similarity >= config.threshold
    return [
        edges_table(u[ok], v[ok]),
        {"verified_pairs": int(ok.sum()), "peak_rss_mb": peak_rss_mb()},
    ]
