"""Artifacts are closed and consumers check bytes: a file added to an artifact is reported by
`pretrain verify` and never read; a manifest path leaving its artifact is refused; a byte flipped at
the same size (mtime restored) is caught through the hash cache; `full` ignores the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pretrain.errors import ArtifactError
from pretrain.hashcache import cache_dir, file_sha256
from pretrain.manifest import load_manifest, seal_of, verify, write_manifest
from pretrain.storage import write_json
from pretrain_app.cli import main
from tests.evals.test_sets import make_shards
from tests.mixtures.conftest import make_encoded, mixture_config

pytestmark = pytest.mark.timeout(180)


def _one_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _flip_keep_mtime(path: Path, offset: int = 0) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_dot_files_are_in_the_manifest(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / ".metadata").write_bytes(b"index")
    (root / "data.bin").write_bytes(b"weights")
    manifest = write_manifest(root, "checkpoint")
    assert set(manifest["files"]) == {".metadata", "data.bin"}
    (root / ".metadata").write_bytes(b"INDEX")
    with pytest.raises(ArtifactError, match=r"\.metadata does not match its sha256"):
        verify(root)


def test_added_file_is_reported_by_verify_and_not_used_by_eval_build(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    shards, _ = make_shards(tmp_path / "shards")
    assert main(["verify", str(shards)]) == 0
    capsys.readouterr()
    planted = pa.table(
        {
            "id": [f"planted-{i}" for i in range(5)],
            "text": ["planted words " * 40] * 5,
            "split": ["eval"] * 5,
            "domain": ["planted"] * 5,
            "lang": ["en"] * 5,
            "dup_keep": [True] * 5,
        }
    )
    pq.write_table(planted, shards / "data" / "z-00009.parquet")
    assert main(["verify", str(shards)]) == 2
    line = _one_error(capsys)
    assert "1 file(s) its manifest does not list (data/z-00009.parquet)" in line

    config = {"shards": str(shards), "out": str(tmp_path / "evalsets"), "min_docs_per_set": 2}
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    assert main(["eval", "build", str(tmp_path / "eval.yaml")]) == 0
    built = load_manifest(tmp_path / "evalsets")
    assert {s["domain"] for s in built["sets"]} == {"web", "code"}  # nothing from the planted file


@pytest.fixture
def mixture(tmp_path: Path) -> Path:
    from mixtures.build import build_mixture
    from mixtures.recipe import MixtureConfig
    from pretrain.config import parse_config

    encoded = make_encoded(tmp_path / "enc")
    config = mixture_config(encoded, tmp_path / "mix")
    build_mixture(parse_config(MixtureConfig, config))
    return tmp_path / "mix"


def _rewrite(root: Path, **fields: object) -> None:
    """A crafted manifest, sealed as a writer would (the seal alone is no defence: a crafter can
    recompute it, so the paths it names must still be confined)."""
    manifest = json.loads((root / "manifest.json").read_text())
    manifest.update(fields)
    manifest["seal"] = seal_of(manifest)
    write_json(root / "manifest.json", manifest)


@pytest.mark.parametrize("escape", ["../outside.npy", "/etc/passwd", "index/not-listed.npy"])
def test_mixture_phase_index_leaving_the_artifact_is_refused(
    mixture: Path, escape: str, capsys: pytest.CaptureFixture
) -> None:
    from mixtures.dataset import MixtureDataset

    manifest = load_manifest(mixture)
    phases = [{**manifest["phases"][0], "index": escape}] + manifest["phases"][1:]
    np.save(mixture.parent / "outside.npy", np.load(mixture / manifest["phases"][0]["index"]))
    np.save(mixture / "index" / "not-listed.npy", np.zeros(3))
    _rewrite(mixture, phases=phases)
    with pytest.raises(ArtifactError, match="leaves the artifact|not listed among its files"):
        MixtureDataset(mixture)
    assert main(["mixture", "report", str(mixture), "--out", str(mixture.parent / "r")]) == 2
    assert repr(escape) in _one_error(capsys)


def test_encoded_prefix_leaving_the_artifact_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    encoded = make_encoded(tmp_path / "enc")
    make_encoded(tmp_path / "other", seed=3)
    _rewrite(encoded, prefixes=["../other/part-00000", *load_manifest(encoded)["prefixes"]])
    config = mixture_config(encoded, tmp_path / "mix")
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump(config))
    assert main(["mixture", "build", str(tmp_path / "mix.yaml")]) == 2
    assert "'../other/part-00000.bin', which leaves the artifact" in _one_error(capsys)
    assert not (tmp_path / "mix").exists()


def test_same_size_flip_in_encoded_bin_is_caught_through_the_cache(mixture: Path) -> None:
    from mixtures.dataset import MixtureDataset

    MixtureDataset(mixture)  # hashes everything once; later checks come from the cache
    _flip_keep_mtime(next((mixture.parent / "enc").glob("*.bin")), offset=100)
    with pytest.raises(ArtifactError, match=r"\.bin does not match its sha256"):
        MixtureDataset(mixture)


def test_cache_entry_is_reused_and_full_mode_bypasses_it(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"a" * 1000)
    real = file_sha256(path)
    (entry,) = [
        p for p in cache_dir().rglob("*.json") if json.loads(p.read_text())["path"] == str(path)
    ]
    record = json.loads(entry.read_text())
    record["sha256"] = "0" * 64  # what a stale entry would say for an unchanged identity
    entry.write_text(json.dumps(record))
    assert file_sha256(path) == "0" * 64  # identity unchanged: the cache answers
    assert file_sha256(path, full=True) == real  # --verify full re-hashes
    env = {**os.environ, "PRETRAIN_VERIFY": "full"}
    code = f"from pretrain.hashcache import file_sha256; print(file_sha256({str(path)!r}))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == real


def test_concurrent_hashers_leave_only_whole_entries(tmp_path: Path) -> None:
    files = []
    for i in range(40):
        files.append(tmp_path / f"f{i}")
        files[-1].write_bytes(os.urandom(4096))
    code = (
        "import sys\nfrom pretrain.hashcache import file_sha256\n"
        "for _ in range(5):\n    for p in sys.argv[1:]: file_sha256(p, full=True)\n"
    )
    env = dict(os.environ)
    procs = [
        subprocess.Popen([sys.executable, "-c", code, *map(str, files)], env=env) for _ in range(3)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    for path in files:
        assert file_sha256(path) == file_sha256(path, full=True)
    for entry in cache_dir().rglob("*.json"):
        json.loads(entry.read_text())  # no torn entry
    assert not list(cache_dir().rglob("*.tmp"))
