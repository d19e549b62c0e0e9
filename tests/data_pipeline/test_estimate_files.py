"""`pretrain data estimate` projects the output's files (what an object store's listing, a verify
and every consumer's glob pay per object) from the files a sample left per part and CONFIG's
`shard_rows`: the lever a planner has at 40 TB."""

from __future__ import annotations

from pathlib import Path

from data_pipeline.config import PipelineConfig
from data_pipeline.estimate import Sample, files_by_kind, format_estimate, project

LISTED = [
    "data/web-00000.parquet",
    "data/web-00001.parquet",
    "_rejects/web-00000.pq",
    ".parts/web-00000.json",
    ".parts/web-00001.json",
    ".parts/part-costs/web-00000.json",
    ".parts/part-costs/web-00001.json",
    ".parts/web.read.json",
    ".parts/fingerprint.json",
    "ledger.json",
    "README.md",
]


def _sample(tmp_path: Path) -> Sample:
    for name in ("web-00000.rows.pq", "web-00000.json", "web-00001.json"):
        target = tmp_path / ".parts" / "global" / "dedup" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"x")
    cost = {"cpu_s": 1.0, "bytes": 10**6, "docs": 1000, "peak_rss_mb": 100.0}
    return Sample(
        directory=tmp_path,
        stages={name: dict(cost) for name in ("read", "extract", "write")},
        bytes_in=10**6,
        docs_in=1000,
        shard_bytes=10**5,
        reject_bytes=10**3,
        utilisation=0.5,
        ray_start_s=1.0,
        files=files_by_kind(tmp_path, dict.fromkeys(LISTED)),
        parts=2,
    )


def test_the_sample_files_are_counted_by_what_leaves_them(tmp_path: Path) -> None:
    kinds = files_by_kind(tmp_path, dict.fromkeys(LISTED))
    assert kinds == {"part": 7, "input": 1, "other": 3, "map_side": 0}


def test_files_follow_the_documents_and_shard_rows(tmp_path: Path) -> None:
    sample = _sample(tmp_path)
    config = PipelineConfig(inputs=("x",), output="y", stages={"extract": {}}, shard_rows=500)
    files = project(sample, config, 10**12, 2, 8)["files"]  # 1e6 x the sample: 1e9 documents
    assert files["parts"] == 2 * 10**6 and files["files_per_part"] == 3.5
    assert files["listed"] == 7 * 10**6 + 3
    assert files["map_side_while_running"] == 3 * 10**6
    wider = config.model_copy(update={"shard_rows": 5000})
    assert project(sample, wider, 10**12, 2, 8)["files"]["parts"] == 2 * 10**5
    line = format_estimate(project(sample, config, 10**12, 2, 8))
    assert "files: ~7,000,003 listed + 1 per input file (~2,000,000 parts" in line


def test_a_sample_without_a_part_count_projects_no_files(tmp_path: Path) -> None:
    sample = _sample(tmp_path)
    sample.parts = 0
    config = PipelineConfig(inputs=("x",), output="y", stages={"extract": {}})
    result = project(sample, config, 10**12, 2, 8)
    assert result["files"] == {} and "files:" not in format_estimate(result)
