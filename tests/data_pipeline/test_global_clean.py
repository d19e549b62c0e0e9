"""The global stages' persisted map side (`.parts/global/`, about a second copy of the tagged
corpus) can be deleted: by `pretrain data clean DIR` after a run, or by the run itself with
`keep_global_parts: false`. The artifact still verifies (its manifest never lists that cache), and
a re-run that needs the map side maps every part again and ends byte-identical."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from data_pipeline.config import PipelineConfig
from data_pipeline.runner import run_pipeline
from pretrain import shards_layout as layout
from pretrain.artifacts import shards as shards_artifact
from pretrain.manifest import MANIFEST, write_manifest
from pretrain_app.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
STAGES = {"extract": {}, "langid": {}, "dedup": {}}


def _config(out: Path, **overrides: object) -> PipelineConfig:
    data = {
        "inputs": [str(DATA)],
        "output": str(out),
        "shard_rows": 4,
        "batch_rows": 3,
        "stages": STAGES,
        "ray": {"timeout_s": 200},
        **overrides,
    }
    return PipelineConfig.model_validate(data)


def _output(out: Path) -> dict[str, bytes]:
    """What users read: shards, rejects, the ledger."""
    paths = [out / layout.LEDGER, *sorted((out / layout.DATA_DIR).glob("*"))]
    paths += sorted((out / layout.REJECTS_DIR).glob("*"))
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in paths}


def _map_side(out: Path) -> list[Path]:
    return sorted(p for p in (out / layout.GLOBAL_MAP_DIR).rglob("*") if p.is_file())


def test_the_manifest_never_lists_the_map_side(tmp_path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.parquet").write_bytes(b"shard")
    cache = tmp_path / layout.GLOBAL_MAP_DIR / "dedup"
    cache.mkdir(parents=True)
    (cache / "a-00000.bands.pq").write_bytes(b"cache")
    manifest = write_manifest(tmp_path, "shards")
    assert list(manifest["files"]) == ["data/a.parquet"]
    assert main(["verify", str(tmp_path)]) == 0  # the cache is not reported as unlisted


def test_clean_refuses_an_unfinished_run(tmp_path, capsys) -> None:
    cache = tmp_path / layout.GLOBAL_MAP_DIR / "dedup"
    cache.mkdir(parents=True)
    (cache / "a-00000.json").write_text("{}")
    assert main(["data", "clean", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "has not finished" in err and "\n" not in err
    assert (cache / "a-00000.json").is_file()
    assert main(["data", "clean", "s3://bucket/out"]) == 2
    err = capsys.readouterr().err.strip()
    assert "works on local outputs" in err and "s3://bucket/out/.parts/global/" in err


HOLD_LOCK = """
import sys
from pretrain.provenance import recorded
from pretrain.locking import output_lock
with recorded(["pretrain", "data", "run", "CONFIG"]), output_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_clean_refuses_while_another_process_writes_the_output(tmp_path, capsys) -> None:
    """A second writer: a run still holding the output's lock (another process) keeps its map
    side; clean says who holds it, in one line, and deletes nothing."""
    cache = tmp_path / layout.GLOBAL_MAP_DIR / "dedup"
    cache.mkdir(parents=True)
    (cache / "a-00000.json").write_text("{}")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.parquet").write_bytes(b"shard")
    write_manifest(tmp_path, "shards")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert main(["data", "clean", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert str(holder.pid) in err and "\n" not in err, err
        assert (cache / "a-00000.json").is_file()
    finally:
        holder.communicate("", timeout=60)
    assert main(["data", "clean", str(tmp_path)]) == 0  # once the writer is gone, it cleans
    assert not (cache / "a-00000.json").exists()


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_clean_then_a_rerun_that_needs_the_map_side_is_byte_identical(
    ray_local, tmp_path, capsys
) -> None:
    out = tmp_path / "shards"
    first = run_pipeline(_config(out), progress=False)
    before, manifest = _output(out), (out / MANIFEST).read_bytes()
    cached = _map_side(out)
    assert cached and all(
        str(p.relative_to(out)) not in json.loads(manifest)["files"] for p in cached
    )

    assert main(["data", "clean", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"removed {len(cached)} files" in said
    assert not (out / layout.GLOBAL_MAP_DIR).exists()
    assert (out / MANIFEST).read_bytes() == manifest
    assert main(["verify", str(out)]) == 0
    shards_artifact.open(out, full=True)

    again = run_pipeline(_config(out), progress=False)  # nothing to do: every part is finished
    assert again.reused_parts == first.parts and _output(out) == before
    # A lost shard makes the global stage run again: with no map side left, every part is mapped,
    # to the same bytes, so the shards merged from them are kept and only the lost one is merged.
    (out / layout.data_file("docs-00001")).unlink()
    (out / layout.PARTS_DIR / "docs-00001.json").unlink()
    resumed = run_pipeline(_config(out), progress=False)
    assert resumed.reused_parts == first.parts - 1 and resumed.reused_map_parts == {"dedup": 0}
    assert _output(out) == before
    assert len(_map_side(out)) == len(cached)  # kept again (keep_global_parts defaults to true)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_keep_global_parts_false_deletes_the_map_side_after_the_run(ray_local, tmp_path) -> None:
    kept, dropped = tmp_path / "kept", tmp_path / "dropped"
    run_pipeline(_config(kept), progress=False)
    result = run_pipeline(_config(dropped, keep_global_parts=False), progress=False)
    assert _map_side(kept) and not (dropped / layout.GLOBAL_MAP_DIR).exists()
    assert _output(dropped) == _output(kept)
    assert main(["verify", str(dropped)]) == 0
    # The setting is not part of what the output is: flipping it resumes, it does not refuse.
    again = run_pipeline(_config(dropped), progress=False)
    assert again.reused_parts == result.parts


def _finished(out: Path) -> None:
    (out / "data").mkdir(parents=True)
    (out / "data" / "a.parquet").write_bytes(b"shard")
    write_manifest(out, "shards")


def test_clean_of_a_map_side_linked_elsewhere_removes_the_link_and_says_so(tmp_path, capsys):
    """`.parts/global` a link to another disk: clean removes the link, never what it points at,
    and does not report the target's files as removed (it reported them, and removed nothing)."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    (elsewhere / "dedup").mkdir(parents=True)
    (elsewhere / "dedup" / "a-00000.bands.pq").write_bytes(b"x" * 1000)
    _finished(out)
    (out / layout.GLOBAL_MAP_DIR).parent.mkdir(parents=True)
    (out / layout.GLOBAL_MAP_DIR).symlink_to(elsewhere)
    assert main(["data", "clean", str(out)]) == 0
    said = capsys.readouterr().out
    assert "removed 0 files (0.0 MB)" in said and "link" in said, said
    assert not (out / layout.GLOBAL_MAP_DIR).is_symlink()
    assert not (out / layout.GLOBAL_MAP_DIR).exists()
    assert (elsewhere / "dedup" / "a-00000.bands.pq").stat().st_size == 1000
    assert main(["verify", str(out)]) == 0


def test_clean_counts_the_files_it_removes_not_what_links_inside_point_at(tmp_path, capsys):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "big.bin").write_bytes(b"x" * 5_000_000)
    _finished(out)
    cache = out / layout.GLOBAL_MAP_DIR / "dedup"
    cache.mkdir(parents=True)
    (cache / "a-00000.json").write_bytes(b"{}")
    (cache / "a-00000.rows.pq").symlink_to(elsewhere / "big.bin")
    (cache / "more").symlink_to(elsewhere)
    assert main(["data", "clean", str(out)]) == 0
    said = capsys.readouterr().out
    assert "removed 1 files (0.0 MB)" in said and "2 links" in said, said
    assert not (out / layout.GLOBAL_MAP_DIR).exists()
    assert (elsewhere / "big.bin").stat().st_size == 5_000_000
