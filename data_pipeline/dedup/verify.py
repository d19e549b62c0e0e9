"""The verification steps of distributed dedup, as plain functions over Arrow tables (one Ray
task each, data_pipeline.dedup.aggregate runs them).

A candidate pair (u, v) first joins u's signed row (signature and shingles) in u's vertex
partition (`attach_u`), then v's in v's (`verify_v`), which keeps the pairs core.verify_pairs
keeps.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from data_pipeline.dedup.config import DedupConfig
from data_pipeline.dedup.core import signatures_of, verify_pairs
from data_pipeline.dedup.tasks import EDGE_SCHEMA, concat, edges_table, lookup, scatter
from data_pipeline.throughput import peak_rss_mb


def attach_u(config: DedupConfig, partitions: int, num_cands: int, *pieces: pa.Table) -> list:
    """Vertex partition q: give each candidate (u, v) with u in q the signed row of u (every
    column but the vertex, suffixed `_u`), split by v."""
    from data_pipeline.dedup.lsh import unique_edges

    cands = concat(pieces[:num_cands], EDGE_SCHEMA)
    docs = concat(pieces[num_cands:])
    if cands.num_rows:  # a pair can collide in several bands that live in different partitions
        u, v = unique_edges(np.asarray(cands.column("u")), np.asarray(cands.column("v")))
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
        return [EDGE_SCHEMA.empty_table(), {"verified_pairs": 0, "peak_rss_mb": peak_rss_mb()}]
    v = np.asarray(cands.column("v"))
    at = lookup(docs, v)
    sig_v = signatures_of(docs.column("sig"), config.num_perm)[at]
    sig_u = signatures_of(cands.column("sig_u"), config.num_perm)
    shingles_u, shingles_v = cands.column("shingles_u"), docs.column("shingles").take(at)
    ok, _ = verify_pairs(sig_u, sig_v, shingles_u, shingles_v, config)
    u = np.asarray(cands.column("u"))
    return [
        edges_table(u[ok], v[ok]),
        {"verified_pairs": int(ok.sum()), "peak_rss_mb": peak_rss_mb()},
    ]
