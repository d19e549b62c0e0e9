"""Per-stage CPU-seconds, documents and bytes measured inside the workers, in the manifest and the
summary line, consistent with the ledger; a resumed run measures what it computed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from data_pipeline import throughput
from data_pipeline.config import PipelineConfig
from data_pipeline.runner import run_pipeline

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
MAP_STAGES = {"extract": {}, "langid": {}, "rules": {}}


def _config(out: Path, stages: dict) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "inputs": [str(DATA)],
            "output": str(out),
            "shard_rows": 4,
            "batch_rows": 3,
            "stages": stages,
            "ray": {"timeout_s": 200},
        }
    )


def _check_consistent(manifest: dict, ledger: dict, names: list[str]) -> dict:
    section = manifest["throughput"]
    by_stage = {s["stage"]: s for s in section["stages"]}
    assert list(by_stage) == ["read", *names, "write"]
    for stage in by_stage.values():
        # every stage saw every document read (rows are never dropped before the select)
        assert (stage["docs"], stage["bytes"]) == (ledger["documents_in"], ledger["bytes_in"])
        assert stage["cpu_s"] > 0
        assert stage["docs_per_cpu_s"] == pytest.approx(stage["docs"] / stage["cpu_s"], rel=0.01)
    assert section["parts_measured"] == ledger["parts"]
    assert section["unmeasured_stages"] == []
    return by_stage


def _part_docs(out: Path, shards: tuple[str, ...]) -> int:
    return sum(json.loads((out / ".parts" / f"{s}.json").read_text())["documents"] for s in shards)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_stage_costs_with_a_global_stage(ray_local, tmp_path) -> None:
    out = tmp_path / "shards"
    result = run_pipeline(_config(out, {**MAP_STAGES, "dedup": {}}), progress=False)
    _check_consistent(result.manifest, result.ledger, ["extract", "langid", "rules", "dedup"])
    section = result.manifest["throughput"]
    run = section["run"]
    cpus = max(run["cpus"], os.cpu_count() or 1)
    wall = run["ray_work_s"] + section["fixed"]["ray_start_s"]
    # CPU-seconds are measured in the workers: they cannot exceed what the machine had
    assert 0 < section["cpu_s_total"] <= wall * cpus
    assert run["docs_computed"] == result.ledger["documents_in"]
    assert section["fixed"]["workers_set_up"] >= 1
    # where the run waited: each phase's wall, in order, inside the work after Ray's start-up
    phases = ["stream", "dedup-map", "dedup-verify", "dedup-aggregate", "dedup-join", "merge"]
    assert [name for name, _, _ in run["phase_spans"]] == phases == list(run["phases_s"])
    assert all(start <= end for _, start, end in run["phase_spans"])
    assert all(a[2] <= b[1] for a, b in zip(run["phase_spans"], run["phase_spans"][1:]))
    assert 0 < sum(run["phases_s"].values()) <= run["ray_work_s"]
    marker = json.loads((out / ".parts" / "progress" / "phase.json").read_text())
    assert (marker["phase"], marker["done"]) == (phases[-1], phases[:-1])  # what ran last
    line = result.summary()
    assert "CPU-seconds: read" in line and "dedup" in line and "start-up apart: Ray" in line
    assert json.loads((out / "manifest.json").read_text())["throughput"] == section
    # Resumed after losing a shard: dedup's map side is reused from the first run, so the map
    # stages run on nothing; dedup joins and the merge writes that part only, and that is measured.
    docs = _part_docs(out, ("docs-00000",))
    (out / "data" / "docs-00000.parquet").unlink()
    (out / ".parts" / "docs-00000.json").unlink()
    resumed = run_pipeline(_config(out, {**MAP_STAGES, "dedup": {}}), progress=False)
    assert resumed.reused_map_parts.get("dedup", 0) > 0
    again = resumed.manifest["throughput"]
    assert {s["stage"]: s["docs"] for s in again["stages"]} == {"dedup": docs, "write": docs}
    assert again["unmeasured_stages"] == list(MAP_STAGES) and again["parts_measured"] == 1


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_resume_measures_what_it_computed_and_ignores_a_killed_runs_records(
    ray_local, tmp_path
) -> None:
    out = tmp_path / "shards"
    config = _config(out, MAP_STAGES)
    first = run_pipeline(config, progress=False)
    _check_consistent(first.manifest, first.ledger, list(MAP_STAGES))
    # Two parts lost as if the driver died before writing them, and a batch record a killed run
    # left for one of them (a huge CPU cost): only they are recomputed, the record is ignored.
    lost = ("docs-00002", "pages-00001")
    docs = _part_docs(out, lost)
    for shard in lost:
        (out / "data" / f"{shard}.parquet").unlink()
        (out / ".parts" / f"{shard}.json").unlink()
    (out / "_rejects" / "pages-00001.pq").unlink(missing_ok=True)
    stale = throughput.cost_dir(out) / "docs-00002"
    stale.mkdir(parents=True)
    (stale / "read-000000000000-000000000003.json").write_text(
        json.dumps({"read": {"cpu_s": 1e6, "docs": 999, "bytes": 1, "peak_rss_mb": 1.0}})
    )
    resumed = run_pipeline(config, progress=False)
    assert resumed.reused_parts == 5
    section = resumed.manifest["throughput"]
    stages = {s["stage"]: s for s in section["stages"]}
    assert list(stages) == ["read", *MAP_STAGES, "write"] and stages["read"]["cpu_s"] < 1e5
    assert {s["docs"] for s in stages.values()} == {docs} and docs > 0
    assert section["run"]["docs_computed"] == docs and section["parts_measured"] == len(lost)
    # Nothing left to do: this run measured nothing.
    again = run_pipeline(config, progress=False)
    section = again.manifest["throughput"]
    assert section["stages"] == [] and "run" not in section
    assert "CPU-seconds" not in again.summary()


def _batch(shards: list[str], rows: list[int], raw: list[int]) -> pa.Table:
    return pa.table(
        {
            "_shard": pa.array(shards, pa.string()),
            "_row": pa.array(rows, pa.int64()),
            "_raw_bytes": pa.array(raw, pa.int64()),
        }
    )


def test_a_batch_split_over_shards_and_a_retried_batch(tmp_path) -> None:
    batch = _batch(["a-00000", "a-00000", "a-00000", "a-00001"], [0, 1, 2, 3], [10, 20, 30, 5])
    throughput.record_batch(tmp_path, "map-extract", batch, {"extract": 2.0})
    # A retried task records the same rows again: it replaces its record, it is not added.
    throughput.record_batch(tmp_path, "map-extract", batch, {"extract": 2.0})
    throughput.record_batch(tmp_path, "read", batch, {"read": 0.4})
    write = {"cpu_s": 0.1, "docs": 3, "bytes": 60}
    first = json.loads(throughput.fold_part(tmp_path, "a-00000", write))
    second = json.loads(throughput.fold_part(tmp_path, "a-00001", write))
    assert first["extract"]["cpu_s"] == pytest.approx(1.5)  # 3 of the batch's 4 rows
    assert second["extract"]["cpu_s"] == pytest.approx(0.5)
    assert (first["extract"]["docs"], first["extract"]["bytes"]) == (3, 60)
    assert (second["read"]["docs"], second["read"]["bytes"]) == (1, 5)
    assert (first["write"]["docs"], first["write"]["bytes"], first["write"]["cpu_s"]) == (
        3,
        60,
        0.1,
    )
    assert not (throughput.cost_dir(tmp_path) / "a-00000").exists()


def test_an_empty_batch_records_nothing(tmp_path) -> None:
    throughput.record_batch(tmp_path, "read", _batch([], [], []), {"read": 1.0})
    write = {"cpu_s": 0.0, "docs": 0, "bytes": 0}
    record = json.loads(throughput.fold_part(tmp_path, "a-00000", write))
    assert list(record) == ["write"]
    assert (record["write"]["docs"], record["write"]["bytes"]) == (0, 0)


def test_the_phase_a_run_is_in_is_written_when_it_starts(tmp_path) -> None:
    clock = throughput.RunClock(marker=tmp_path / "progress" / "phase.json")
    seen = []
    for name in ("stream", "merge"):
        with clock.phase(name):
            seen.append(json.loads(clock.marker.read_text()))
    assert [(s["phase"], s["done"]) for s in seen] == [("stream", []), ("merge", ["stream"])]
