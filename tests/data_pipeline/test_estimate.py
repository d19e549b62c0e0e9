"""`pretrain data estimate`: projections from a real sample run's manifest, and one-line errors
when the manifest cannot support them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from data_pipeline.config import PipelineConfig
from data_pipeline.estimate import parse_bytes
from data_pipeline.runner import run_pipeline
from pretrain.manifest import write_manifest
from tests.data_pipeline.raytools import REPO, clean_env

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
STAGES = {"extract": {}, "langid": {}, "rules": {}, "dedup": {}}


def _write_config(path: Path, output: Path, stages: dict) -> Path:
    path.write_text(json.dumps({"inputs": [str(DATA)], "output": str(output), "stages": stages}))
    return path


def _estimate(tmp: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pretrain_app", "data", "estimate", str(config), *args]
    env = clean_env(tmp / "home")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


def _json(tmp: Path, config: Path, *args: str) -> dict:
    run = _estimate(tmp, config, *args, "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def sample(ray_local, tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("sample")
    out = root / "shards"
    config = PipelineConfig.model_validate(
        {
            "inputs": [str(DATA)],
            "output": str(out),
            "shard_rows": 4,
            "batch_rows": 3,
            "stages": STAGES,
            "ray": {"timeout_s": 200},
        }
    )
    return out, run_pipeline(config, progress=False).manifest


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_projection_follows_the_sample_costs(sample, tmp_path) -> None:
    out, manifest = sample
    config = _write_config(tmp_path / "c.json", out, STAGES)
    base = ["--input-bytes", "40TB", "--cpus-per-node", "64"]
    one = _json(tmp_path, config, *base, "--nodes", "10", "--utilisation", "1")
    many = _json(tmp_path, config, *base, "--nodes", "20", "--utilisation", "1")
    costs = {s["stage"]: s for s in manifest["throughput"]["stages"]}
    assert set(one["cpu_hours_by_stage"]) == set(costs)
    for stage, hours in one["cpu_hours_by_stage"].items():
        expected = costs[stage]["cpu_s"] / costs[stage]["bytes"] * 40e12 / 3600
        assert hours == pytest.approx(expected, rel=1e-3)
    # twice the nodes: half the wall time (beyond start-up), the same node-hours of work
    start_h = manifest["throughput"]["fixed"]["ray_start_s"] / 3600
    assert many["wall_hours"] - start_h == pytest.approx((one["wall_hours"] - start_h) / 2, 1e-3)
    assert many["node_hours_compute_bound"] == one["node_hours_compute_bound"]
    shard_bytes = sum(v["bytes"] for k, v in manifest["files"].items() if k.startswith("data/"))
    assert one["output_bytes"] == pytest.approx(shard_bytes / costs["read"]["bytes"] * 40e12, 1e-6)
    # each map actor of the job holds at least what the sample's largest worker held
    assert one["peak_memory_gb_per_node"] >= max(c["peak_rss_mb"] for c in costs.values()) / 1e3
    # the sample's own measured utilisation is the default, and it is stated
    measured = _json(tmp_path, config, *base, "--nodes", "10")
    assert measured["utilisation_source"] == "sample" and 0 < measured["utilisation"] <= 1
    assert measured["node_hours"] >= one["node_hours"]
    text = _estimate(tmp_path, config, *base, "--nodes", "10")
    assert text.returncode == 0 and "node-hours" in text.stdout and "GB/node" in text.stdout


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_stage_the_sample_did_not_measure_is_refused(sample, tmp_path) -> None:
    out, _ = sample
    config = _write_config(tmp_path / "c.json", out, {**STAGES, "safety": {}})
    run = _estimate(
        tmp_path, config, "--input-bytes", "1TB", "--nodes", "1", "--cpus-per-node", "8"
    )
    assert run.returncode == 2 and run.stdout == ""
    assert len(run.stderr.strip().splitlines()) == 1 and "stage 'safety'" in run.stderr


def test_a_manifest_without_costs_is_a_one_line_error(tmp_path) -> None:
    # A finished artifact written before per-stage costs were recorded (no `throughput`).
    out = tmp_path / "old"
    (out / "shards").mkdir(parents=True)
    (out / "shards" / "a-00000.parquet").write_bytes(b"PAR1")
    write_manifest(out, "shards", counts={"documents_in": 3})
    config = _write_config(tmp_path / "c.json", out, STAGES)
    run = _estimate(
        tmp_path, config, "--input-bytes", "1TB", "--nodes", "2", "--cpus-per-node", "8"
    )
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1 and "per-stage costs" in run.stderr
    missing = _estimate(
        tmp_path,
        config,
        "--input-bytes",
        "1TB",
        "--nodes",
        "2",
        "--cpus-per-node",
        "8",
        "--from-manifest",
        str(tmp_path / "nothing"),
    )
    assert missing.returncode == 2 and "no manifest.json" in missing.stderr
    bad = _estimate(
        tmp_path, config, "--input-bytes", "lots", "--nodes", "2", "--cpus-per-node", "8"
    )
    assert bad.returncode == 2 and "--input-bytes 'lots'" in bad.stderr


def test_sizes() -> None:
    assert parse_bytes("40TB") == 40 * 10**12
    assert parse_bytes("5 TB") == 5 * 10**12
    assert parse_bytes("1.5GiB") == int(1.5 * 2**30)
    assert parse_bytes("123") == 123
    for bad in ("", "-1TB", "0", "12XB", "TB"):
        with pytest.raises(Exception, match="--input-bytes"):
            parse_bytes(bad)
