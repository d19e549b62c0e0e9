"""The merge hands each part's record and its stages' costs to the driver with its row, and the
driver folds them (ledger.Merged) instead of reading them back: on an object store (moto,
recording every request) the end of a run sends no GET for a part this run merged, and the
ledger and manifest digests equal those read back from the output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from data_pipeline import ledger, parts, runner, throughput, workers
from data_pipeline.stages.registry import stage_class
from pretrain import storage
from pretrain.manifest import write_manifest
from tests.data_pipeline.test_driver_reads import _recording, recorded_s3
from tests.data_pipeline.test_runner_core import ROWS, STAGES, _tagged

__all__ = ["recorded_s3"]  # the fixture, used by name
SHARDS = [f"t-{i:05d}" for i in range(3)]


class _Stage:
    def __init__(self, name: str) -> None:
        self.name = name


def _merged_output(out: storage.OutPath) -> pa.Table:
    """Three parts of input `t` through the real piece writer and merge; the merge's rows."""
    parts.ensure_dirs(out)
    table = _tagged(ROWS * 4)
    for shard in SHARDS:
        shard_col = pa.array([shard] * table.num_rows, pa.string())
        column = table.schema.get_field_index("_shard")
        workers.write_rows(table.set_column(column, "_shard", shard_col), out)
    storage.write_json(
        parts.read_stats_path(out, "t"), {"records": 60, "bytes": 600, "parts": len(SHARDS)}
    )
    options = {
        "out": out,
        "stages": STAGES,
        "fields": [f for name in STAGES for f in stage_class(name).columns],
        "drop": ["extract:*"],
        "rejects_mode": "full",
        "sample_per_reason": 2,
        "level": 3,
    }
    return workers.merge_parts(pa.table({"shard": SHARDS}), **options)


def _end_of_run(out: storage.OutPath, merged: ledger.Merged) -> tuple[Any, ...]:
    """What the runner does after the merge: ledger, throughput section, manifest."""
    stages = [_Stage(name) for name in STAGES]
    led, _ = runner._collect(out, ["t"], stages, merged)  # type: ignore[arg-type]
    section = throughput.report(out, stages, None, merged)
    files = write_manifest(out, "shards", known=merged.known)["files"]
    return led, section, files


def _part_record_gets(log: Path) -> list[str]:
    """GETs of a part's record (`.parts/<shard>.json`)."""
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    urls = [e["url"].split("?")[0] for e in entries if e["method"] in ("GET", "HEAD")]
    return [u for u in urls if any(f"/{shard}.json" in u for shard in SHARDS)]


def test_the_merge_returns_the_records_it_wrote(tmp_path: Path) -> None:
    rows = _merged_output(tmp_path)
    columns = (rows.column(c).to_pylist() for c in ("shard", "record", "cost"))
    for shard, fragment, cost in zip(*columns, strict=True):
        assert fragment.encode() == parts.part_record_path(tmp_path, shard).read_bytes()
        assert json.loads(cost)["write"]["docs"] == json.loads(fragment)["documents"]
    records = [json.loads(record) for record in rows.column("record").to_pylist()]
    assert sum(r["files"][f"data/{r['shard']}.parquet"]["rows"] for r in records) == 36


def test_the_end_of_a_run_reads_no_record_of_a_part_it_merged(recorded_s3: Any) -> None:
    """Fails on the old code: the driver read every fragment back: 3 GETs here, 2M at 40 TB."""
    endpoint, log, out = recorded_s3
    rows = _merged_output(out)
    _recording(endpoint, "start-recording")
    read_back = _end_of_run(out, ledger.Merged())  # every record read from the output
    _recording(endpoint, "stop-recording")
    assert len(_part_record_gets(log)) >= len(SHARDS)  # the recorder sees such reads
    log.unlink()
    merged = ledger.Merged()
    merged.add(rows)
    _recording(endpoint, "start-recording")
    handed = _end_of_run(out, merged)
    _recording(endpoint, "stop-recording")
    assert _part_record_gets(log) == []
    led, section, files = handed
    assert led == read_back[0] and files == read_back[2]
    assert [s["stage"] for s in section["stages"]] == ["write"]
    assert section["parts_measured"] == len(SHARDS)


def test_a_part_handed_over_twice_is_folded_once(tmp_path: Path) -> None:
    rows = _merged_output(tmp_path)
    once, twice = ledger.Merged(), ledger.Merged()
    once.add(rows)
    twice.add(rows)
    twice.add(rows.slice(1, 1))
    assert _end_of_run(tmp_path, twice)[0] == _end_of_run(tmp_path, once)[0]


def test_a_resumed_run_reads_a_reused_parts_fragment_once(recorded_s3: Any) -> None:
    """The resume scan hands over the fragment of every part it verified: the end of the run
    reads none of them again (fails on the old code: finished_parts took no receiver, and the
    ledger read every fragment a second time)."""
    endpoint, log, out = recorded_s3
    _merged_output(out)
    reference = _end_of_run(out, ledger.Merged())
    merged = ledger.Merged()
    assert parts.finished_parts(out, merged.add_record) == {"t-00000", "t-00001", "t-00002"}
    _recording(endpoint, "start-recording")
    led, _, files = _end_of_run(out, merged)
    _recording(endpoint, "stop-recording")
    assert _part_record_gets(log) == [] and led == reference[0] and files == reference[2]


def test_fragments_of_no_input_of_the_run_are_not_folded(tmp_path: Path) -> None:
    """A part the scan verified that belongs to no input of this run is not in its ledger."""
    rows = _merged_output(tmp_path)
    reference = _end_of_run(tmp_path, ledger.Merged())[0]
    merged = ledger.Merged()
    merged.add(rows)
    merged.add_record("gone-00000", rows.column("record")[0].as_py().encode())
    assert _end_of_run(tmp_path, merged)[0] == reference
