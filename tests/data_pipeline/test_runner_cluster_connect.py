"""Connecting to a cluster address without starting Ray: what is checked before `ray.init`."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from pretrain import rayinit
from pretrain.errors import PretrainError


def test_an_address_nobody_listens_on_is_one_line_at_once() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(PretrainError, match="nothing accepts connections") as err:
            rayinit._probe(f"127.0.0.1:{port}")
    assert "\n" not in str(err.value) and f"ray status --address 127.0.0.1:{port}" in str(err.value)


def test_token_is_found_where_ray_looks(tmp_path, monkeypatch) -> None:
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert not rayinit.token_available()
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("")
    assert not rayinit.token_available()  # an empty file is no token
    (tmp_path / ".ray" / "auth_token").write_text("abc123\n")
    assert rayinit.token_available()
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    assert not rayinit.token_available()
    monkeypatch.setenv("RAY_AUTH_TOKEN", "xyz")
    assert rayinit.token_available()


def test_a_local_ray_that_cannot_start_is_one_line(tmp_path) -> None:
    """`ray.object_store_mb` larger than the machine's memory: Ray's ValueError from its resource
    check came out of `pretrain data run` as a traceback (exit 1)."""
    import subprocess
    import sys

    from tests.data_pipeline.raytools import REPO, clean_env

    source = tmp_path / "a.jsonl"
    source.write_text('{"text": "one short document"}\n')
    argv = [sys.executable, "-m", "pretrain_app", "data", "run", "configs/pipeline.yaml"]
    for item in (
        f"inputs=[{source}]",
        f"output={tmp_path / 'out'}",
        "ray.object_store_mb=1000000000",
    ):
        argv += ["--set", item]
    done = subprocess.run(
        argv,
        cwd=REPO,
        env=clean_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "could not start a local Ray" in errors[0], done.stderr[-2000:]
    assert "ray.object_store_mb" in errors[0]


def test_a_ray_head_left_on_this_machine_does_not_capture_a_local_run(tmp_path) -> None:
    """`ray start --head` records its address in <tmp>/ray/ray_current_cluster, and a plain
    `ray.init()` joins whatever that file names: a local run (no address) on a machine where a
    head was left running tried to join it and failed ("num_cpus ... must not be provided")."""
    import subprocess
    import sys
    import tempfile

    from tests.data_pipeline.raytools import REPO, clean_env

    short = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))  # Ray's socket paths must stay short
    try:
        (short / "ray").mkdir()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]  # the head that file names is gone: nothing listens
            (short / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}\n")
            code = (
                "import ray\nfrom pretrain import rayinit\n"
                "assert rayinit.connect(None, num_cpus=1)\n"
                "print('nodes', len(ray.nodes()))\nray.shutdown()\n"
            )
            done = subprocess.run(
                [sys.executable, "-c", code],
                cwd=REPO,
                env=clean_env(tmp_path / "home", RAY_TMPDIR=str(short)),
                capture_output=True,
                text=True,
                timeout=300,
            )
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "nodes 1" in done.stdout
