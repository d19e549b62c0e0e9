"""Fixtures shared by the data pipeline tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import built_once
from tests.data_pipeline.raytools import (
    DATA,
    DEDUP_CONFIG,
    EMBEDDED_CONFIG,
    clean_env,
    data_run,
    run_cli,
)
from tests.data_pipeline.s3tools import moto_server


@pytest.fixture
def s3_server() -> Iterator[str]:
    """The endpoint URL of a real S3-compatible server (moto in server mode) for one test."""
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def embedded_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output folder of `pretrain data run` on DATA with EMBEDDED_CONFIG, its own local Ray,
    from a clean shell: the reference the cluster, Ray Job and s3 tests compare their runs with.
    Made once per test run (tests.conftest.built_once; it was made by each of four slow tests,
    ~20-30 s each in CI); a test must not write into it."""

    def build(base: Path) -> None:
        argv = data_run(
            {**EMBEDDED_CONFIG, "inputs": [str(DATA)], "output": str(base / "out")},
            base / "e.yaml",
        )
        run = run_cli(argv, clean_env(base / "home"), timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        assert "23 docs in, 17 kept, 6 dropped" in run.stdout, run.stdout[-2000:]

    return built_once(tmp_path_factory, "embedded-out", build) / "out"


@pytest.fixture(scope="session")
def dedup_out(tmp_path_factory: pytest.TempPathFactory, ray_local) -> Path:
    """The output folder of DEDUP_CONFIG's job (extract + dedup, 9 partitions), in process on the
    session's Ray: the reference the dedup exchange's partition-count and s3 tests compare their
    runs with. Made once per test run (each of the two ran it, ~15 s each quiet); a test must not
    write into it."""
    from data_pipeline import runner
    from data_pipeline.config import PipelineConfig

    def build(base: Path) -> None:
        config = {**DEDUP_CONFIG, "output": str(base / "out"), "ray": {"timeout_s": 300}}
        runner.run_pipeline(PipelineConfig.model_validate(config), progress=False)

    return built_once(tmp_path_factory, "dedup-out", build) / "out"
