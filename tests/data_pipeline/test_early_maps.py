"""The first global stage's map of a part starts as soon as the stream has finished that part
(data_pipeline.early_maps), not after the whole stream: on 2 CPUs it runs beside the stream's
actors, in the core the stream's last parts leave idle. The shards stay byte-identical.

Both runs join the session's local Ray (`ray_local`, 2 CPUs, as the config asks): what is
compared is when the maps start and the bytes, not Ray's start-up, which each run paid apart."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from data_pipeline import early_maps, ray_job
from data_pipeline.config import PipelineConfig
from data_pipeline.parts import read_stats_path
from data_pipeline.runner import run_pipeline
from pretrain import shards_layout as layout

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"


def _block(rows: dict[str, int]) -> pa.Table:
    return pa.table({"shard": list(rows), "rows": list(rows.values())})


def test_a_part_is_started_once_when_all_its_rows_are_counted(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(early_maps, "RECHECK_S", 0.0)
    started: list[tuple[str, int]] = []
    early = early_maps.EarlyMaps(tmp_path, 4, lambda part, rows: started.append((part, rows)))
    early.add(_block({"a-b-00000": 3, "c-00000": 1}))
    assert started == []  # 3 of 4 rows; c's count unknown without its read record
    early.add(_block({"a-b-00000": 1, "a-b-00001": 2}))
    assert started == [("a-b-00000", 4)]  # a full part needs no record
    early.add(_block({"a-b-00000": 0}))
    assert started == [("a-b-00000", 4)]  # never twice
    record = read_stats_path(tmp_path, "a-b")
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"records": 6}))
    early.add(_block({}))  # the read record appeared after the part's last block
    assert started == [("a-b-00000", 4), ("a-b-00001", 2)]
    read_stats_path(tmp_path, "c").write_text(json.dumps({"records": 2}))
    early.add(_block({}))
    assert started[-1:] == [("a-b-00001", 2)]  # c has 1 of its 2 rows
    early.add(_block({"c-00000": 1}))
    assert started[-1:] == [("c-00000", 2)]
    assert set(early.started) == {"a-b-00000", "a-b-00001", "c-00000"}


def _config(out: Path) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "inputs": [str(DATA)],
            "output": str(out),
            "shard_rows": 4,
            "batch_rows": 3,
            "stages": {"extract": {}, "langid": {}, "dedup": {}},
            "keep_global_parts": True,
            "ray": {"timeout_s": 200, "num_cpus": 2, "workers": 2},
        }
    )


def _output(out: Path) -> dict[str, bytes]:
    paths = [out / layout.LEDGER, *sorted((out / layout.DATA_DIR).glob("*"))]
    paths += sorted((out / layout.REJECTS_DIR).glob("*"))
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in paths}


@pytest.mark.slow
def test_maps_start_during_the_stream_and_the_shards_are_the_same(
    ray_local, tmp_path, monkeypatch
) -> None:
    made: list[early_maps.EarlyMaps] = []
    build = ray_job._early_maps

    def recorded(*args: object) -> early_maps.EarlyMaps:
        made.append(build(*args))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(ray_job, "_early_maps", recorded)
    result = run_pipeline(_config(tmp_path / "early"), progress=False)
    records = sorted((tmp_path / "early" / layout.GLOBAL_MAP_DIR / "dedup").glob("*.json"))
    assert len(records) == result.parts > 2
    # every part's map was started from the stream's blocks (none waited for the map phase)
    assert sorted(made[0].started) == sorted(r.name.removesuffix(".json") for r in records)
    monkeypatch.setattr(ray_job, "_early_maps", lambda *args: None)  # every map after the stream
    late = run_pipeline(_config(tmp_path / "late"), progress=False)
    assert late.reused_map_parts == result.reused_map_parts == {"dedup": 0}
    assert _output(tmp_path / "early") == _output(tmp_path / "late")
    assert not list((tmp_path / "early" / layout.PARTS_DIR).glob("pieces/*/*"))
