"""Exact verification from the text (DedupStage.apply's path: signed rows without shingles) keeps
the same pairs as verification from shipped shingles (the runner's path), in process, no Ray."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from data_pipeline.dedup import tasks, verify
from data_pipeline.dedup.config import DedupConfig

PARTITIONS = 3


def _near_copies() -> pa.Table:
    """Bases of 150 words and copies with 2-30 words replaced: many pairs whose MinHash estimate
    lies within noise of 0.8 (exact verification decides them); two CJK documents (character
    shingles, by `lang`) and an empty one."""
    rng = np.random.default_rng(3)
    vocab = [f"w{i}" for i in range(4000)]
    ids, texts, langs = [], [], []
    for b in range(12):
        base = list(rng.choice(vocab, 150))
        for c in range(6):
            words = list(base)
            for pos in rng.choice(150, int(rng.integers(2, 31)), replace=False):
                words[pos] = f"edit{b}-{c}-{pos}"
            ids.append(f"doc-{b:02d}-{c}")
            texts.append(" ".join(words))
            langs.append("en")
    cjk = "数据去重需要在大规模语料上稳定地运行并且结果可以复现" * 4
    ids += ["zh-a", "zh-b", "empty"]
    texts += [cjk, cjk[:-3] + "完全不同", ""]
    langs += ["zh", "zh", "en"]
    return pa.table({"id": ids, "text": texts, "lang": langs})


def _buckets(config: DedupConfig, maps: list[list]) -> tuple[list[list], list[pa.Table]]:
    """Candidates per vertex partition (one piece per bucket task) and the exact edges."""
    cands: list[list] = [[] for _ in range(PARTITIONS)]
    exact = []
    for p in range(PARTITIONS):
        bands = [m[p] for m in maps]
        exacts = [m[PARTITIONS + p] for m in maps]
        out = tasks.bucket_edges(config, PARTITIONS, len(bands), *bands, *exacts)
        for q in range(PARTITIONS):
            cands[q].append(out[q])
        exact.append(out[PARTITIONS])
    return cands, exact


def _joined(config: DedupConfig, cands: list[list], signed: list[list]) -> list[list]:
    joined: list[list] = [[] for _ in range(PARTITIONS)]
    for q in range(PARTITIONS):
        out = verify.attach_u(config, PARTITIONS, len(cands[q]), *cands[q], *signed[q])
        for r in range(PARTITIONS):
            joined[r].append(out[r])
    return joined


def _signed(maps: list[list]) -> list[list]:
    return [[m[3 * PARTITIONS + q] for m in maps] for q in range(PARTITIONS)]


def _edges(tables: list[pa.Table]) -> set[tuple[int, int]]:
    table = pa.concat_tables(tables)
    return set(zip(table.column("u").to_pylist(), table.column("v").to_pylist()))


def test_verification_from_the_text_keeps_the_pairs_the_shipped_shingles_keep() -> None:
    table = _near_copies()
    config = DedupConfig()
    slices = [(0, 30), (30, 25), (55, table.num_rows - 55)]  # three slices: shingles per slice

    # the runner's path: signed rows carry the shingles
    shipped = []
    for s, (lo, n) in enumerate(slices):
        bands, exact, docs, info = tasks.map_tables(table.slice(lo, n), config)
        shipped.append(tasks.scatter_map(bands, exact, docs, info, s, PARTITIONS))
    cands, _ = _buckets(config, shipped)
    joined = _joined(config, cands, _signed(shipped))
    by_shingles = _edges(
        [
            verify.verify_v(config, len(joined[q]), *joined[q], *_signed(shipped)[q])[0]
            for q in range(PARTITIONS)
        ]
    )
    by_signature = _edges(
        [
            verify.verify_v(
                config.model_copy(update={"verify": "signature"}),
                len(joined[q]),
                *joined[q],
                *_signed(shipped)[q],
            )[0]
            for q in range(PARTITIONS)
        ]
    )

    # DedupStage.apply's path: signed rows carry (slice, row); shingles come from the text
    maps = [
        tasks.map_block(table, s, lo, n, config, PARTITIONS) for s, (lo, n) in enumerate(slices)
    ]
    signed = _signed(maps)
    assert all("shingles" not in piece.column_names for q in signed for piece in q)
    cands, _ = _buckets(config, maps)
    joined = _joined(config, cands, signed)
    sure = [
        verify.verify_sure(config, PARTITIONS, q, len(joined[q]), *joined[q], *signed[q])
        for q in range(PARTITIONS)
    ]
    pending = [out[PARTITIONS + 1] for out in sure]
    shingled = [
        verify.shingle_rows(
            table, s, lo, n, config, PARTITIONS, *[out[s % PARTITIONS] for out in sure]
        )
        for s, (lo, n) in enumerate(slices)
    ]
    exact = [
        verify.verify_exact(config, pending[q], *[out[q] for out in shingled])[0]
        for q in range(PARTITIONS)
    ]
    by_text = _edges([out[PARTITIONS] for out in sure] + exact)

    assert sum(p.num_rows for p in pending) > 0  # some pairs needed the text
    requested = sum(sum(t.num_rows for t in out[:PARTITIONS]) for out in shingled)
    assert requested < table.num_rows  # shingles for the pending pairs' documents only
    assert by_signature != by_shingles  # exact verification changes decisions here ...
    assert by_text == by_shingles  # ... and the text path makes the same ones
