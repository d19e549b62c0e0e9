"""The dedup stage through its one path (map_part per part, persisted as the runner does ->
aggregate on the session's Ray -> join_part): planted duplicates in real text, keep rule,
determinism across parts and partitions, the index."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline import global_parts
from data_pipeline.dedup import index
from data_pipeline.dedup.config import DedupConfig
from data_pipeline.stages.dedup import DedupStage
from data_pipeline.stages.registry import stage_class
from pretrain.config import load_config
from pretrain.errors import ArtifactError, ConfigError

pytestmark = pytest.mark.timeout(120)
FIXTURE = Path(__file__).resolve().parents[1] / "data" / "dedup" / "docs.jsonl"


def load_fixture() -> tuple[pa.Table, list[str | None]]:
    rows = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    table = pa.table(
        {
            "id": [r["id"] for r in rows],
            "text": [r["text"] for r in rows],
            "lang": [r["lang"] for r in rows],
            "quality_score": pa.array(
                [None if i % 4 == 0 else (i % 7) / 7 for i in range(len(rows))], pa.float32()
            ),
        }
    )
    return table, [r["group"] for r in rows]


def tag(
    out: Path, table: pa.Table, config: DedupConfig | None = None, parts: int = 1, **context: Any
) -> tuple[pa.Table, DedupStage]:
    """`table` tagged the way `pretrain data run` tags it: cut into `parts` parts (consecutive
    rows), each mapped (DedupStage.map_part) and persisted in `out` (global_parts.persist), the
    aggregate over them all (Ray tasks, the file exchange under `out`), each part joined back.
    Needs a Ray (the `ray_local` fixture). Returns (the tagged rows in input order, the stage)."""
    stage = DedupStage(config, **context)
    bounds = [len(table) * k // parts for k in range(parts + 1)]
    found = []
    for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        rows, name = table.slice(lo, hi - lo), f"t-{k:05d}"
        tables, info = stage.map_part(rows)
        global_parts.persist(out, stage.name, name, rows, tables, info=info, depends="")
        found.append(global_parts.load(out, stage.name, name, rows.num_rows, ""))
    joins = stage.aggregate(found)
    tagged = [
        stage.join_part(pq.read_table(part.rows), {}, i, *joins[i]) for i, part in enumerate(found)
    ]
    return pa.concat_tables(tagged), stage


def clusters_of(table: pa.Table) -> dict[int, set[str]]:
    found: dict[int, set[str]] = defaultdict(set)
    for doc_id, cluster in zip(
        table.column("id").to_pylist(), table.column("dup_cluster").to_pylist()
    ):
        found[cluster].add(doc_id)
    return found


def test_planted_duplicates_are_found_and_nothing_else(ray_local, tmp_path: Path) -> None:
    table, groups = load_fixture()
    assert stage_class("dedup") is DedupStage
    out, stage = tag(tmp_path, table, parts=2)
    fields = [f.name for f in stage_class("dedup").columns]
    assert out.column_names[-len(fields) :] == fields
    expected: dict[str, set[str]] = defaultdict(set)
    for doc_id, group in zip(table.column("id").to_pylist(), groups):
        expected[group or doc_id].add(doc_id)
    assert sorted(map(sorted, clusters_of(out).values())) == sorted(map(sorted, expected.values()))
    keep = out.column("dup_keep").to_pylist()
    assert sum(keep) == len(expected)  # exactly one kept per cluster
    sizes = dict(zip(out.column("id").to_pylist(), out.column("dup_cluster_size").to_pylist()))
    assert sizes["en-00-copy"] == 2 and sizes["zh-zh-TW"] == 1 and sizes["empty-2"] == 2
    assert (stage.stats.empty, stage.stats.tiny, stage.stats.cjk) == (2, 3, 3)
    assert stage.stats.dropped == len(table) - len(expected)


def test_keeps_highest_quality_then_smallest_id(ray_local, tmp_path: Path) -> None:
    text = " ".join(f"word{i}" for i in range(50))
    table = pa.table(
        {
            "id": ["c", "b", "a", "d"],
            "text": [text] * 4,
            "quality_score": pa.array([0.2, 0.9, 0.9, None], pa.float32()),
        }
    )
    out, _ = tag(tmp_path / "q", table)
    assert out.column("dup_keep").to_pylist() == [False, False, True, False]
    null_quality = table.set_column(2, "quality_score", pa.nulls(4, pa.float32()))
    assert tag(tmp_path / "n", null_quality)[0].column("dup_keep").to_pylist() == [
        False,
        False,
        True,
        False,
    ]


def test_deterministic_across_runs_parts_partitions_and_row_order(ray_local, tmp_path) -> None:
    """The tags depend on the documents alone: not on the run, how the input is cut into parts,
    the partition count (the memory budget's choice), or the row order."""
    table, _ = load_fixture()
    first, _ = tag(tmp_path / "a", table)
    again, _ = tag(tmp_path / "b", table, DedupConfig(num_partitions=7), parts=3)
    assert first.equals(again)
    shuffled = table.take(pa.array(np.random.default_rng(1).permutation(len(table))))
    out = tag(tmp_path / "c", shuffled, DedupConfig(num_partitions=3), parts=2)[0].sort_by("id")
    assert out.select(["id", "dup_cluster", "dup_keep", "dup_cluster_size"]).equals(
        first.sort_by("id").select(["id", "dup_cluster", "dup_keep", "dup_cluster_size"])
    )


def test_exact_only_and_near_only_switches(ray_local, tmp_path: Path) -> None:
    table, _ = load_fixture()
    exact, _ = tag(tmp_path / "e", table, DedupConfig(near=False))
    sizes = dict(zip(exact.column("id").to_pylist(), exact.column("dup_cluster_size").to_pylist()))
    assert sizes["en-00-copy"] == 2 and sizes["en-01-near"] == 1
    near, _ = tag(tmp_path / "n", table, DedupConfig(exact=False))
    sizes = dict(zip(near.column("id").to_pylist(), near.column("dup_cluster_size").to_pylist()))
    assert sizes["en-01-near"] == 2 and sizes["empty-1"] == 1


def test_example_config_loads_and_rejects_typos(repo_root: Path) -> None:
    config = load_config(DedupConfig, repo_root / "configs" / "dedup.yaml")
    assert config.threshold == 0.8 and config.band_rows[0] * config.band_rows[1] <= 128
    with pytest.raises(ConfigError, match="treshold"):
        load_config(DedupConfig, None, ["treshold=0.7"])
    with pytest.raises(ConfigError, match="bands"):
        load_config(DedupConfig, None, ["bands=20", "rows=10"])


def test_incremental_index_matches_new_batch_without_the_old_corpus(ray_local, tmp_path) -> None:
    table, groups = load_fixture()
    old_ids = {"en-00", "en-01", "en-06", "zh-zh-CN", "tiny-1"}
    is_old = pa.array([i in old_ids for i in table.column("id").to_pylist()])
    old, new = table.filter(is_old), table.filter(pa.compute.invert(is_old))
    tag(tmp_path / "old", old, DedupConfig(index={"save_to": str(tmp_path / "idx")}), parts=2)
    matches = index.query(tmp_path / "idx", new)
    got = dict(zip(matches.column("id").to_pylist(), matches.column("matched_id").to_pylist()))
    assert got == {
        "en-00-copy": "en-00",
        "en-01-near": "en-01",
        "zh-CN-near": "zh-zh-CN",
        "tiny-2": "tiny-1",
    }
    assert matches.column("jaccard").to_pylist()[0] == 1.0  # en-00-copy: exact

    out, stage = tag(
        tmp_path / "new", new, DedupConfig(index={"against": str(tmp_path / "idx")}), parts=2
    )
    dropped = {
        i for i, k in zip(out.column("id").to_pylist(), out.column("dup_keep").to_pylist()) if not k
    }
    alone, _ = tag(tmp_path / "alone", new)
    dropped_alone = {
        i
        for i, k in zip(alone.column("id").to_pylist(), alone.column("dup_keep").to_pylist())
        if not k
    }
    assert dropped_alone and not dropped_alone & set(got)
    assert dropped == set(got) | dropped_alone
    assert stage.stats.index_matches == 4
    rows = {r["id"]: r for r in out.to_pylist()}
    for copy, original in got.items():  # each copy points at the document it copies
        assert (rows[copy]["dup_of"], rows[copy]["dedup_reason"]) == (original, "earlier_corpus")
        assert rows[copy]["dup_cluster_size"] >= 2  # the earlier corpus's document counts
    for doc_id in dropped_alone:
        assert (rows[doc_id]["dup_of"], rows[doc_id]["dedup_reason"]) == (None, "duplicate")
    assert all(r["dedup_reason"] is None for r in rows.values() if r["dup_keep"])


def test_index_refuses_tampering_and_other_settings(tmp_path: Path) -> None:
    table, _ = load_fixture()
    index.save_index(tmp_path / "idx", [table.slice(0, 10)], DedupConfig(), partitions=3)
    with pytest.raises(ArtifactError, match="num_perm"):
        DedupStage(DedupConfig(num_perm=64, index={"against": str(tmp_path / "idx")})).map_part(
            table
        )
    part = next((tmp_path / "idx" / "docs").glob("*.parquet"))
    part.write_bytes(part.read_bytes() + b"x")
    with pytest.raises(ArtifactError, match="bytes"):
        index.query(tmp_path / "idx", table)
