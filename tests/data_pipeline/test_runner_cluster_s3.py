"""`s3://` inputs through pyarrow's S3FileSystem, served by a real S3-compatible server (moto in
server mode, a separate process on loopback), read by `pretrain data run` from a clean shell."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.data_pipeline.raytools import EMBEDDED_CONFIG, REPO, clean_env, data_run
from tests.data_pipeline.s3tools import s3_env, upload_inputs


def _texts(out: Path) -> list[str]:
    return [
        t for p in sorted(out.glob("data/*.parquet")) for t in pq.read_table(p)["text"].to_pylist()
    ]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_s3_inputs_give_the_same_documents_as_local_files(
    tmp_path, s3_server, embedded_out
) -> None:
    upload_inputs(s3_server)  # DATA's files; embedded_out: this job on DATA itself
    env = clean_env(tmp_path / "home", **s3_env(s3_server))
    config = {**EMBEDDED_CONFIG, "inputs": ["s3://crawl/in"], "output": str(tmp_path / "s3")}
    run = subprocess.run(
        data_run(config, tmp_path / "s3.yaml"),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "23 docs in, 17 kept, 6 dropped" in run.stdout
    assert _texts(tmp_path / "s3") == _texts(embedded_out)
