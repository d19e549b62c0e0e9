"""`pretrain data estimate` projects the output's files (what an object store's listing, a verify
and every consumer's glob pay per object) from the files a sample left per part and CONFIG's
`shard_rows`: the lever a planner has at 40 TB."""

from __future__ import annotations

from pathlib import Path

from data_pipeline.config import PipelineConfig
from data_pipeline.estimate import Sample, files_per_part, format_estimate, project

LISTED = [
    "data/web-00000.parquet",
    "data/web-00001.parquet",
    "_rejects/web-00000.pq",
    ".parts/web-00000.json",
    ".parts/web-00001.json",
    ".parts/web.read.json",
    ".parts/fingerprint.json",
    "ledger.json",
    "README.md",
]


def _sample(tmp_path: Path) -> Sample:
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
        files_per_part=files_per_part(dict.fromkeys(LISTED)),
    )


def test_files_follow_the_documents_and_shard_rows(tmp_path: Path) -> None:
    sample = _sample(tmp_path)
    assert sample.files_per_part == 2.5  # two shards and a rejects file over two part records
    config = PipelineConfig(inputs=("x",), output="y", stages={"extract": {}}, shard_rows=500)
    files = project(sample, config, 10**12, 2, 8)["files"]  # 1e6 x the sample: 1e9 documents
    assert files["parts"] == 2 * 10**6 and files["listed"] == 5 * 10**6
    wider = config.model_copy(update={"shard_rows": 5000})
    assert project(sample, wider, 10**12, 2, 8)["files"]["parts"] == 2 * 10**5
    line = format_estimate(project(sample, config, 10**12, 2, 8))
    assert "files: ~5,000,000 listed + 1 per input file (~2,000,000 parts" in line


def test_a_sample_without_a_part_projects_no_files(tmp_path: Path) -> None:
    sample = _sample(tmp_path)
    sample.files_per_part = files_per_part({})
    config = PipelineConfig(inputs=("x",), output="y", stages={"extract": {}})
    result = project(sample, config, 10**12, 2, 8)
    assert result["files"] == {} and "files:" not in format_estimate(result)
