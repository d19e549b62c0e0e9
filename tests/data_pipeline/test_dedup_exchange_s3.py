"""The dedup file exchange on `s3://` (data_pipeline.dedup.exchange), against a real
S3-compatible server (moto in server mode): piece files read back through range reads as they
were written, a byte changed in an object is refused naming it, and `pretrain data run` with a
dedup stage and `output: s3://...` exchanges its pieces through the store and writes the bytes
of the same job run into a local directory."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from data_pipeline.dedup import exchange
from tests.data_pipeline.raytools import DEDUP_CONFIG, REPO, clean_env, data_run
from tests.data_pipeline.s3tools import s3_env, s3_filesystem
from tests.data_pipeline.test_dedup_exchange import _pieces
from tests.data_pipeline.test_runner_cluster_s3_out import _local, _objects, _published

BUCKET = "dedup"


def _pieces_on_s3(s3, monkeypatch, endpoint: str) -> None:
    for name, value in s3_env(endpoint).items():
        monkeypatch.setenv(name, value)
    folder = f"s3://{BUCKET}/pieces"
    path = exchange.piece_file(folder, "0001-map", 2, 3)
    pieces = _pieces()
    exchange.write_pieces(path, pieces)
    for q, piece in enumerate(pieces):
        got = exchange.read_piece(path, q)
        assert got.schema == piece.schema and got.equals(piece)
    key = f"{BUCKET}/pieces/0001-map/3/0000002.arrow"
    with s3.open_input_stream(key) as handle:
        data = bytearray(handle.read())
    data[len(pieces[0].schema.serialize()) + 30] ^= 0x01  # in partition 1's bytes (0 is empty)
    with s3.open_output_stream(key) as handle:
        handle.write(bytes(data))
    with pytest.raises(exchange.ExchangeFileError, match=f"s3://{key} has partition 1 not"):
        exchange.read_piece(path, 1)
    assert exchange.read_piece(path, 2).equals(pieces[2])


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_exchange_through_s3_gives_the_local_bytes(
    tmp_path, s3_server, monkeypatch, dedup_out
) -> None:
    s3 = s3_filesystem(s3_server)
    s3.create_dir(BUCKET)
    _pieces_on_s3(s3, monkeypatch, s3_server)
    # dedup_out: this job into a local folder, in process on the session's Ray
    config = {**DEDUP_CONFIG, "ray": {"num_cpus": 2, "timeout_s": 300}}
    env = clean_env(tmp_path / "home", **s3_env(s3_server))  # its own Ray, its workers reach S3
    argv = data_run({**config, "output": f"s3://{BUCKET}/runs/one"}, tmp_path / "s3.yaml")
    done = subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=500, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    stored = _objects(s3, f"{BUCKET}/runs/one")
    expected = _published(_local(dedup_out))
    assert any(k.startswith("data/") for k in expected)
    assert _published(stored) == expected
    assert not any("/exchange/" in k for k in stored)  # the aggregate's scratch is gone
    stages = {s["name"]: s for s in json.loads(stored["manifest.json"])["stages"]}
    disk = stages["dedup"]["stats"]["extra"]["exchange"]  # the pieces went through the store
    assert 0 < disk["peak_bytes"] < disk["written_bytes"], disk
    assert stages["dedup"]["stats"]["dropped"] > 0
    assert not (REPO / "s3:").exists() and not Path("s3:").exists()
