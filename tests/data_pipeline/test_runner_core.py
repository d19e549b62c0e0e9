"""The select, the ledger and the shard writer in-process (no Ray): what the runner relies on."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data_pipeline import ledger, parts, workers
from data_pipeline.stages.registry import stage_class
from pretrain.errors import PretrainError
from pretrain.schema import BASE_FIELDS
from pretrain.storage import write_json

STAGES = ["extract", "langid"]


def _tagged(rows: list[tuple[str | None, str | None, str | None]]) -> pa.Table:
    """Rows of (extract_reason, lang, langid_reason) with every column of extract + langid."""
    n = len(rows)
    columns = {
        "id": [f"d{i}" for i in range(n)],
        "text": [None if r[0] else f"text {i}" for i, r in enumerate(rows)],
        "url": [None] * n,
        "source": ["s"] * n,
        "meta": [None] * n,
        "split": ["train"] * n,
        "extract_reason": [r[0] for r in rows],
        "extractor": ["text"] * n,
        "num_bytes": [0 if r[0] else 6 for r in rows],
        "control_chars": [0] * n,
        "lang": [r[1] for r in rows],
        "lang_score": [0.9] * n,
        "langid_reason": [r[2] for r in rows],
        "_raw_bytes": [10] * n,
        "_shard": ["t-00000"] * n,
        "_row": list(range(n)),
    }
    fields = [
        *BASE_FIELDS,
        *stage_class("extract").columns,
        *stage_class("langid").columns,
        pa.field("_raw_bytes", pa.int64()),
        pa.field("_shard", pa.string()),
        pa.field("_row", pa.int64()),
    ]
    return pa.Table.from_pydict(columns, schema=pa.schema(fields))


ROWS = [
    (None, "en", None),
    ("empty", None, "empty"),
    (None, "zh", "low_confidence"),
    ("not_text", None, "empty"),
    (None, "en", None),
]


def test_first_failing_clause_decides_and_the_ledger_balances() -> None:
    keep, frag, _ = ledger.part_counts(_tagged(ROWS), STAGES, ["extract:*"])
    assert keep.to_pylist() == [True, False, True, False, True]
    led = ledger.aggregate([frag], STAGES, documents_read=5, bytes_read=50)
    assert led["conservation"]["balanced"] and led["documents_dropped"] == 2
    extract, langid = led["stages"]
    assert extract["reasons"] == {
        "empty": {"documents": 1, "bytes": 10, "action": "dropped"},
        "not_text": {"documents": 1, "bytes": 10, "action": "dropped"},
    }
    # Soft tags count only documents that reach the stage and are kept.
    assert langid["documents_in"] == 3
    assert langid["reasons"] == {
        "low_confidence": {"documents": 1, "bytes": 10, "action": "tagged"}
    }
    assert led["languages"] == {
        "en": {"documents": 2, "text_bytes": 12},
        "zh": {"documents": 1, "text_bytes": 6},
    }


def test_select_clauses_are_configurable() -> None:
    keep, _, _ = ledger.part_counts(_tagged(ROWS), STAGES, ["extract:not_text", "langid:*"])
    assert keep.to_pylist() == [True, False, False, False, True]
    led = ledger.aggregate(
        [ledger.part_counts(_tagged(ROWS), STAGES, ["langid:*"])[1]],
        STAGES,
        documents_read=6,
        bytes_read=60,
    )
    assert not led["conservation"]["balanced"]  # one document read but never accounted for


def test_writer_merges_pieces_once_each_and_samples_rejects(tmp_path: Path) -> None:
    table = _tagged(ROWS * 4)
    parts.ensure_dirs(tmp_path)
    for start, stop in ((0, 12), (8, 20), (0, 12)):  # overlapping and repeated: task retries
        workers.write_rows(table.slice(start, stop - start), str(tmp_path))
    options = {
        "stages": STAGES,
        "fields": [f for name in STAGES for f in stage_class(name).columns],
        "drop": ["extract:*"],
    }
    select = {**options, "rejects_mode": "sample", "sample_per_reason": 2, "level": 3}
    workers.merge_parts(pa.table({"shard": ["t-00000"]}), out=str(tmp_path), **select)
    shard = pq.read_table(tmp_path / "data" / "t-00000.parquet")
    assert shard.num_rows == 12 and "_row" not in shard.column_names
    assert shard.column("id").to_pylist() == [f"d{i}" for i in range(20) if i % 5 in (0, 2, 4)]
    rejects = pq.read_table(tmp_path / "_rejects" / "t-00000.pq")
    assert (
        sorted(rejects.column("reject_reason").to_pylist())
        == ["extract:empty"] * 2 + ["extract:not_text"] * 2
    )
    fragment = parts.load_json(parts.part_record_path(tmp_path, "t-00000"))
    assert fragment["documents"] == 20


def test_a_merge_retried_after_it_finished_returns_the_same_and_rewrites_nothing(
    tmp_path: Path,
) -> None:
    """A node can die after its merge task wrote the shard and removed the pieces but before Ray
    heard back: Ray runs the task again, on pieces that are gone."""
    parts.ensure_dirs(tmp_path)
    workers.write_rows(_tagged(ROWS * 4), str(tmp_path))
    options = {
        "out": str(tmp_path),
        "stages": STAGES,
        "fields": [f for name in STAGES for f in stage_class(name).columns],
        "drop": ["extract:*"],
        "rejects_mode": "all",
        "sample_per_reason": 2,
        "level": 3,
    }
    batch = pa.table({"shard": ["t-00000"]})
    first = workers.merge_parts(batch, **options)
    written = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert not parts.rows_dir(tmp_path, "t-00000").exists()
    again = workers.merge_parts(batch, **options)
    assert again.select(["shard", "record"]) == first.select(["shard", "record"])
    assert again.column("cost").to_pylist() == [""]  # measured once, by the merge that ran
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == written


def test_a_merge_whose_pieces_are_gone_and_unfinished_says_so_in_one_line(tmp_path: Path) -> None:
    parts.ensure_dirs(tmp_path)
    options = {
        "stages": STAGES,
        "fields": [f for name in STAGES for f in stage_class(name).columns],
        "drop": [],
        "rejects_mode": "all",
    }
    try:
        batch = pa.table({"shard": ["t-00000"]})
        workers.merge_parts(batch, out=str(tmp_path), sample_per_reason=2, level=3, **options)
    except PretrainError as exc:
        assert "t-00000" in str(exc) and "re-run" in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("a shard without pieces or a finished record was written")


def test_the_tag_progress_total_leaves_out_the_parts_a_resumed_run_skips(tmp_path: Path) -> None:
    parts.ensure_dirs(tmp_path)
    assert parts.records_to_read(tmp_path, ["a"], set(), 4) is None  # not read yet
    write_json(parts.read_stats_path(tmp_path, "a"), {"records": 10, "parts": 3})
    write_json(parts.read_stats_path(tmp_path, "b"), {"records": 3, "parts": 1})
    assert parts.records_to_read(tmp_path, ["a", "b"], set(), 4) == 13
    # parts of 4, 4 and 2 rows: the last two were finished by an earlier run
    assert parts.records_to_read(tmp_path, ["a", "b"], {"a-00001", "a-00002"}, 4) == 4 + 3
