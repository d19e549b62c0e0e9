"""`s3://` inputs through pyarrow's S3FileSystem, served by a real S3-compatible server (moto in
server mode, a separate process on loopback), read by `pretrain data run` from a clean shell."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.data_pipeline.raytools import DATA, REPO, clean_env, data_run
from tests.data_pipeline.s3tools import s3_env, upload_inputs


def _texts(out: Path) -> list[str]:
    return [
        t for p in sorted(out.glob("data/*.parquet")) for t in pq.read_table(p)["text"].to_pylist()
    ]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_s3_inputs_give_the_same_documents_as_local_files(tmp_path, s3_server) -> None:
    upload_inputs(s3_server)
    env = clean_env(tmp_path / "home", **s3_env(s3_server))
    config = {"shard_rows": 4, "batch_rows": 3, "ray": {"num_cpus": 2, "timeout_s": 300}}
    runs = {}
    for name, inputs in (("s3", ["s3://crawl/in"]), ("local", [str(DATA)])):
        argv = data_run(
            {**config, "inputs": inputs, "output": str(tmp_path / name)}, tmp_path / f"{name}.yaml"
        )
        runs[name] = subprocess.run(
            argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=500
        )
        assert runs[name].returncode == 0, runs[name].stderr[-2000:]
    assert "23 docs in, 17 kept, 6 dropped" in runs["s3"].stdout
    assert _texts(tmp_path / "s3") == _texts(tmp_path / "local")
